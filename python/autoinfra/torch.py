"""The torch.distributed backend "autoinfra" (docs/torch.md).

Importing this module registers the backend; then

    import autoinfra.torch
    import torch.distributed as dist
    dist.init_process_group("autoinfra")            # env:// (RANK, WORLD_SIZE,
                                                    # MASTER_ADDR, MASTER_PORT)
    dist.init_process_group("autoinfra", store=store, rank=r, world_size=n)

The communicator is bootstrapped through the store torch hands the backend;
init_process_group's timeout becomes the communicator's (every wait).

Groups that outlive a failure (docs/torch.md "Elastic groups", over the
runtime's fault-tolerance calls): revoke(group) fails every pending and later
call on a group at once; shrink(group) makes a new group of the survivors,
grow(group, joiners) one with newcomers that called join(addr), admit(group)
one with whoever waits in join() now (the library's side of the protocol).
Each returns a new ProcessGroup (its rank() and size() are this process's
place in it); the old one is left to be dropped.
autoinfra.elastic drives them from a training loop.

The compiled part is _autoinfra_torch.so for torch 1.x (a c10d::ProcessGroup)
and _autoinfra_torch2.so for torch 2.x (a c10d::Backend, registered for CPU
tensors), chosen by torch.__version__; it is found at $AUTOINFRA_TORCH_LIB
(the file, or the folder holding it), else next to this file, else in the
build tree of this source checkout (build/plugins/torch/).
"""
import importlib.machinery
import importlib.util
import os
import socket

import torch
import torch.distributed as dist

from .errors import CommError

_TORCH2 = int(torch.__version__.split(".")[0]) >= 2
_NAME = "_autoinfra_torch2" if _TORCH2 else "_autoinfra_torch"
_HERE = os.path.dirname(os.path.abspath(__file__))
_CHECKOUT = os.path.dirname(os.path.dirname(_HERE))


def _module_path():
    env = os.environ.get("AUTOINFRA_TORCH_LIB")
    if env:
        path = env if env.endswith(".so") else os.path.join(env, _NAME + ".so")
        if os.path.basename(path) != _NAME + ".so":
            raise ImportError(f"AUTOINFRA_TORCH_LIB={env}: torch {torch.__version__} needs "
                              f"{_NAME}.so, not {os.path.basename(path)}")
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
_C.set_comm_error(CommError)
library_path = _C.__file__


def _peer_addr(rank):
    # An address of the group's rank 0's host: this rank offers peers the
    # address of the interface it reaches that host by (loopback when
    # unset), and rank 0 listens on it. The job's rank 0 is on MASTER_ADDR;
    # a group of dist.new_group may have its rank 0 elsewhere: that rank
    # offers the address it reaches MASTER_ADDR from, and the others
    # (which reach the nodes through the same interface as MASTER_ADDR)
    # are told MASTER_ADDR.
    if os.environ.get("AUTOINFRA_PEER_ADDR"):
        return os.environ["AUTOINFRA_PEER_ADDR"]
    master = os.environ.get("MASTER_ADDR") or ""
    if rank == 0 and master and dist.distributed_c10d.GroupMember.WORLD is not None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master, 9))  # no packet: only the route is looked up
            return s.getsockname()[0]
    return master


# ------------------------------------------------------------ elastic groups
#
# revoke, shrink, grow and join are the runtime's (include/autoinfra.h,
# "fault tolerance"), and so is the join door: none of them needs the job's
# c10d store (hosted by the first rank's process), so the job shrinks and
# takes newcomers whichever of its processes dies. A newcomer connects to
# rank 0's door and waits there; rank 0 counts the live ones waiting
# (pending_joiners) and grow admits them. With AUTOINFRA_JOIN_DOOR set
# ("host:port[,host:port...]", the same in every process of the job) the
# door is at one of those addresses whichever process is rank 0, and a
# newcomer passes that list to join().

_timeouts = {}  # a group made by this backend (_key) -> its timeout (s)


def _create(store, rank, size, timeout):
    pg = _C.create(store, rank, size, timeout.total_seconds(), _peer_addr(rank))
    _timeouts[pg] = timeout.total_seconds()
    return pg


def _create2(opts, backend_options=None):
    # torch 2 (extended_api): the creator makes the Backend that the group
    # torch builds around it dispatches CPU tensors to; the records are
    # keyed by that Backend (_key).
    timeout = opts.timeout.total_seconds()
    backend = _C.create(opts.store, opts.group_rank, opts.group_size, timeout,
                        _peer_addr(opts.group_rank))
    _timeouts[backend] = timeout
    return backend


def _key(group):
    # What the records know a group by: the group itself on torch 1.x, its
    # CPU Backend on torch 2 (the object _create2 returned, or a group's
    # made by shrink, grow or join).
    if not _TORCH2:
        return group
    try:
        return group._get_backend(torch.device("cpu"))
    except RuntimeError:
        return group


def _group(group):
    return group if group is not None else dist.distributed_c10d._get_default_group()


def _timeout_of(group, timeout):
    if timeout is not None:
        return float(timeout)
    if _key(group) not in _timeouts:
        raise ValueError("autoinfra: not a group of the autoinfra backend")
    return _timeouts[_key(group)]


def forget(group):
    """Drop this module's record of a group that was replaced, so that the
    group (its progress thread and connections) goes when the caller drops it."""
    _timeouts.pop(_key(group), None)


def revoke(group=None, reason=""):
    """Every queued and later call on group fails at once with an error
    naming reason, and the communicator is revoked (ai_comm_revoke): every
    rank's pending and later calls on it fail too."""
    _C.revoke(_group(group), reason)


def revoked(group=None):
    return _C.revoked(_group(group))


def failure(group=None):
    """The first error that left group's communicator unusable (a peer
    failed, a wait ran out, it was revoked), as the CommError its call
    raised; None while it works."""
    return _C.failure(_group(group))


def comm_error(e, group=None):
    """The communication failure behind exception e, a CommError, or None
    when e is none. A call of the backend raises CommError itself; torch's
    autograd engine (DDP's gradient allreduces in backward) re-raises every
    C++ error as a plain RuntimeError, which is taken for group's failure()
    when group has one."""
    if isinstance(e, CommError):
        return e if e.failure else None
    if isinstance(e, RuntimeError) and _key(_group(group)) in _timeouts:
        return failure(group)
    return None


def failed(group=None):
    """The ranks of group the runtime knows failed: agreed by the survivors
    after a shrink, before that what this rank saw (ai_comm_failed)."""
    return list(_C.failed(_group(group)))


def shrink(group=None):
    """A new group of the survivors of group (revoked first, if it was not),
    ranks renumbered in the old order (ai_comm_shrink: the survivors agree
    on who they are; no store). Every survivor calls it. Raises
    CommError naming the cause when it fails (a rank the others counted
    failed gets one too, and must leave)."""
    group = _group(group)
    timeout = _timeout_of(group, None)
    revoke(group, "shrinking to the survivors")
    new = _C.shrink(group)
    _timeouts[_key(new)] = timeout
    return new


def join_addr(group=None):
    """What newcomers pass to join(): AUTOINFRA_JOIN_DOOR if set, else rank
    0's door (ai_comm_join_addr)."""
    return _C.join_addr(_group(group))


def pending_joiners(group=None):
    """On rank 0: how many live processes wait in join() at the door (one
    that died waiting is not counted); 0 on the other ranks. Never blocks."""
    return _C.join_pending(_group(group))


def grow(group, joiners, timeout=None):
    """A new group of group's members (ranks kept) and the first `joiners`
    processes waiting in join(), ranks size..size+joiners-1
    (ai_comm_grow). Every member calls it with the same joiners
    (pending_joiners as rank 0 saw it). Too few newcomers within timeout:
    CommError (ERR_TIMEOUT), and group stays usable."""
    group = _group(group)
    t = _timeout_of(group, timeout)
    new = _C.grow(group, joiners, t)
    _timeouts[_key(new)] = _timeout_of(group, None)
    return new


def admit(group=None, timeout=None):
    """The members' side of joining, for a loop between its steps: every
    member calls it; rank 0 counts the processes waiting in join() and
    they are admitted on every member (ai_comm_admit). Returns (joined,
    the larger group) or (0, None) when nobody waited. Too few newcomers
    within timeout: CommError (ERR_TIMEOUT), and group stays usable."""
    group = _group(group)
    t = _timeout_of(group, timeout)
    joined, new = _C.admit(group, t)
    if new is not None:
        _timeouts[_key(new)] = _timeout_of(group, None)
    return joined, new


def join(addr=None, timeout=60.0):
    """From a new process: wait (at most timeout s) at the job's join door
    until its members admit it with grow(); returns its group there
    (ai_comm_join). addr: "HOST:PORT[,HOST:PORT...]", the doors tried in
    turn (the job's AUTOINFRA_JOIN_DOOR; None: that variable here)."""
    addr = addr or os.environ.get("AUTOINFRA_JOIN_DOOR")
    if not addr:
        raise ValueError("autoinfra join: no address (pass the job's AUTOINFRA_JOIN_DOOR)")
    for one in addr.split(","):
        host, sep, port = one.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError("autoinfra join: address '%s' is not HOST:PORT" % one)
    pg = _C.join(addr, float(timeout))
    _timeouts[_key(pg)] = float(timeout)
    return pg


def choice(group, coll, nbytes):
    """What `auto` runs next for `coll` ("allreduce", ...) at `nbytes` on this
    process group: a dict with algo, chunk_bytes, channels, source, explored,
    explore_s (docs/learner.md). Queued behind the group's pending calls."""
    return _C.choice(group if group is not None else dist.distributed_c10d._get_default_group(),
                     coll, int(nbytes))


if not hasattr(dist.Backend, "AUTOINFRA"):
    if _TORCH2:
        dist.Backend.register_backend("autoinfra", _create2, extended_api=True, devices=["cpu"])
    else:
        dist.Backend.register_backend("autoinfra", _create)


# torch's dist.monitored_barrier (1.13 and 2.x) refuses every backend but
# gloo before it reaches the group; the backend has one (ProcessGroup.monitored_barrier,
# gloo's semantics and messages), so groups of this backend go to it.
_torch_monitored_barrier = dist.distributed_c10d.monitored_barrier


def monitored_barrier(group=dist.GroupMember.WORLD, timeout=None, wait_all_ranks=False):
    """dist.monitored_barrier, for groups of this backend too."""
    pg = _group(group) if group is not dist.GroupMember.NON_GROUP_MEMBER else None
    if pg is None or dist.get_backend(pg) != "autoinfra":
        return _torch_monitored_barrier(group, timeout, wait_all_ranks)
    if timeout is None:
        timeout = dist.distributed_c10d.default_pg_timeout
    return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


if getattr(dist.monitored_barrier, "__module__", "") != __name__:
    dist.monitored_barrier = dist.distributed_c10d.monitored_barrier = monitored_barrier


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


def even_shares(global_batch, nranks):
    """global_batch samples over nranks ranks, the first global_batch %
    nranks one more: ai_shares_split of equal throughputs, the one even
    split of the package."""
    return list(shares_split([1.0] * int(nranks), int(global_batch)))


def deferred_calls(group=None):
    """How many of the group's calls were queued without waking its progress
    thread, their caller waiting for each at once (docs/torch.md)."""
    return _C.deferred_calls(_group(group))


def queued_calls(group=None):
    """How many of the group's calls wait for its progress thread, not
    started yet."""
    return _C.queued_calls(_group(group))


def capi_allreduce_loop(group, tensor, iters):
    """Seconds of `iters` in-place sum allreduces of `tensor` (contiguous)
    straight through the C API on `group`'s communicator, after its pending
    calls: bench/torch-overhead's reference for what the backend adds."""
    return _C.capi_allreduce_loop(_group(group), tensor, int(iters))
