"""autoinfra from Python. `import autoinfra.torch` registers the
torch.distributed backend "autoinfra" (docs/torch.md). A failed call of the
runtime raises autoinfra.CommError (errors.py)."""
from .errors import CommError  # noqa: F401
