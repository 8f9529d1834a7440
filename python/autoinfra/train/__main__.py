"""python -m autoinfra.train [flags]: the training job (docs/train.md)."""
import sys

from autoinfra.train import main

sys.exit(main())
