"""The torch.distributed backend "autoinfra" (docs/torch.md).

Importing this module registers the backend; then

    import autoinfra.torch
    import torch.distributed as dist
    dist.init_process_group("autoinfra")            # env:// (RANK, WORLD_SIZE,
                                                    # MASTER_ADDR, MASTER_PORT)
    dist.init_process_group("autoinfra", store=store, rank=r, world_size=n)

The communicator is bootstrapped through the store torch hands the backend;
init_process_group's timeout becomes the communicator's (every wait).

The compiled part, _autoinfra_torch.so, is found at $AUTOINFRA_TORCH_LIB (the
file, or the folder holding it), else next to this file, else in the build
tree of this source checkout (build/plugins/torch/).
"""
import importlib.machinery
import importlib.util
import os

import torch.distributed as dist

_NAME = "_autoinfra_torch"
_HERE = os.path.dirname(os.path.abspath(__file__))
_CHECKOUT = os.path.dirname(os.path.dirname(_HERE))


def _module_path():
    env = os.environ.get("AUTOINFRA_TORCH_LIB")
    if env:
        path = env if env.endswith(".so") else os.path.join(env, _NAME + ".so")
        if not os.path.isfile(path):
            raise ImportError(f"AUTOINFRA_TORCH_LIB={env}: no {_NAME}.so there")
        return path
    tried = [os.path.join(_HERE, _NAME + ".so"),
             os.path.join(_CHECKOUT, "build", "plugins", "torch", _NAME + ".so")]
    for path in tried:
        if os.path.isfile(path):
            return path
    raise ImportError(f"{_NAME}.so not found (tried {', '.join(tried)}; build it with "
                      "`make build`, or set AUTOINFRA_TORCH_LIB)")


def _load():
    path = _module_path()
    loader = importlib.machinery.ExtensionFileLoader(_NAME, path)
    spec = importlib.util.spec_from_file_location(_NAME, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


_C = _load()
library_path = _C.__file__


def _peer_addr():
    # An address of rank 0's host: this rank offers peers the address of the
    # interface it reaches that host by (loopback when unset).
    return os.environ.get("AUTOINFRA_PEER_ADDR") or os.environ.get("MASTER_ADDR") or ""


def _create(store, rank, size, timeout):
    return _C.create(store, rank, size, timeout.total_seconds(), _peer_addr())


def choice(group, coll, nbytes):
    """What `auto` runs next for `coll` ("allreduce", ...) at `nbytes` on this
    process group: a dict with algo, chunk_bytes, channels, source, explored,
    explore_s (docs/learner.md). Queued behind the group's pending calls."""
    return _C.choice(group if group is not None else dist.distributed_c10d._get_default_group(),
                     coll, int(nbytes))


if not hasattr(dist.Backend, "AUTOINFRA"):
    dist.Backend.register_backend("autoinfra", _create)


def fingerprint(group=None):
    """The communicator's topology fingerprint (hex), the knowledge base's key
    for what was measured on these links (ai_comm_fingerprint)."""
    return _C.fingerprint(group if group is not None else dist.distributed_c10d._get_default_group())


# The batch-share balancer (docs/train.md, "Batch shares"): Shares(nranks,
# global_batch, hysteresis) with observe(rank, batch, seconds), set(shares),
# rebalance() -> (shares, changed, predicted_s), model(rank) -> (a, c, affine);
# shares_split(throughput, B); shares_grad_weights(shares).
Shares = _C.Shares
shares_split = _C.shares_split
shares_grad_weights = _C.shares_grad_weights
