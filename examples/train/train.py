#!/usr/bin/python3
"""The training job (autoinfra.train) as a script to copy and adapt: it
runs `python -m autoinfra.train` with this command line. The package is
found on PYTHONPATH, else in the python/ folder of the checkout this file
sits in.

    build/autoinfra launch -n 2 -- /usr/bin/python3 examples/train/train.py --model tiny --steps 20
"""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
checkout = os.path.join(here, "..", "..", "python")
if os.path.isdir(os.path.join(checkout, "autoinfra")):
    sys.path.append(checkout)

import autoinfra.train  # noqa: E402 (after the path above)

sys.exit(autoinfra.train.main(sys.argv[1:]))
