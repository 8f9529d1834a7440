"""autoinfra from Python. `import autoinfra.torch` registers the
torch.distributed backend "autoinfra" (docs/torch.md). A failed call of the
runtime raises autoinfra.CommError (errors.py). rendezvous_port() picks a
port for MASTER_PORT where no starting rank can take it first (ports.py)."""
from .errors import CommError  # noqa: F401
from .ports import rendezvous_port  # noqa: F401
