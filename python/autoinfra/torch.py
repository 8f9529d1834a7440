"""The torch.distributed backend "autoinfra" (docs/torch.md).

Importing this module registers the backend; then

    import autoinfra.torch
    import torch.distributed as dist
    dist.init_process_group("autoinfra")            # env:// (RANK, WORLD_SIZE,
                                                    # MASTER_ADDR, MASTER_PORT)
    dist.init_process_group("autoinfra", store=store, rank=r, world_size=n)

The communicator is bootstrapped through the store torch hands the backend;
init_process_group's timeout becomes the communicator's (every wait).

Groups that outlive a failure (docs/torch.md "Elastic groups"): revoke(group)
fails every pending and later call on a group at once; shrink(group) makes a
new group of the survivors, grow(group, joiners) one with newcomers that
called join(addr). Each returns a new ProcessGroup (its rank() and size()
are this process's place in it); the old one is left to be dropped.
autoinfra.elastic drives them from a training loop.

The compiled part, _autoinfra_torch.so, is found at $AUTOINFRA_TORCH_LIB (the
file, or the folder holding it), else next to this file, else in the build
tree of this source checkout (build/plugins/torch/).
"""
import datetime
import importlib.machinery
import importlib.util
import os
import re
import time

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
    pg = _C.create(store, rank, size, timeout.total_seconds(), _peer_addr())
    _stores[pg] = (_base_store(store), timeout.total_seconds())
    return pg


# ------------------------------------------------------------ elastic groups
#
# Until the runtime's own shrink and join (include/autoinfra.h) serve the
# backend, a new group is a new communicator bootstrapped through the job's
# c10d store (the TCPStore that torch's env:// rendezvous made, hosted by
# the process of the job's first rank: it must outlive every failure), in
# a key space of its own: autoinfra/elastic/<lineage>/<generation><kind>/.
# The lineage is the group a chain of shrinks and grows started from
# ("world" for the default group), the generation counts the attempts.

_ELASTIC = "autoinfra/elastic/"
_POLL_S = 0.002
# The runtime's messages name a dead peer "rank N (pid P on this host) died"
# or "rank N (host H) died or lost its network" (src/comm/transport).
_DEAD = re.compile(r"\brank (\d+) \([^)]*\) died")

_stores = {}   # ProcessGroup made by this backend -> (base store, timeout s)
_lineage = {}  # ProcessGroup made by shrink/grow/join -> _Lineage


class _Lineage:
    def __init__(self, store, ns, gen, timeout_s):
        self.store, self.ns, self.gen, self.timeout_s = store, ns, gen, timeout_s


def _base_store(store):
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return store


def _group(group):
    return group if group is not None else dist.distributed_c10d._get_default_group()


def _lineage_of(group):
    group = _group(group)
    if group in _lineage:
        return _lineage[group]
    if group not in _stores:
        raise ValueError("autoinfra: not a group of the autoinfra backend")
    store, timeout_s = _stores[group]
    default = dist.is_initialized() and group is dist.distributed_c10d._get_default_group()
    name = "world" if default else "pg" + dist.distributed_c10d._pg_names.get(group, "?")
    rec = _Lineage(store, _ELASTIC + name + "/", 0, timeout_s)
    _lineage[group] = rec
    return rec


def _attempt(group, timeout, kind):
    """The next generation of group's lineage, for a shrink ("s") or a grow
    ("g"): the group, its lineage, the timeout and the generation's keys."""
    group = _group(group)
    rec = _lineage_of(group)
    rec.gen += 1
    return (group, rec, rec.timeout_s if timeout is None else float(timeout),
            "%s%d%s/" % (rec.ns, rec.gen, kind))


def _new_group(rec, ns, rank, size, timeout_s, peer_addr=None):
    pg = _C.create(dist.PrefixStore(ns + "comm", rec.store), rank, size, timeout_s,
                   _peer_addr() if peer_addr is None else peer_addr)
    _lineage[pg] = _Lineage(rec.store, rec.ns, rec.gen, rec.timeout_s)
    return pg


def forget(group):
    """Drop this module's record of a group that was replaced, so that the
    group (its progress thread and connections) goes when the caller drops it."""
    _lineage.pop(group, None)
    _stores.pop(group, None)


def dead_ranks(error):
    """The ranks a runtime error message names as dead (died or lost their
    network), in the numbering of the group whose call failed."""
    return sorted({int(m) for m in _DEAD.findall(str(error))})


def revoke(group=None, reason=""):
    """Every queued and later call on group fails at once with an error
    naming reason; a call already running fails when the runtime sees the
    failure (in milliseconds for a dead peer) or at the timeout."""
    _C.revoke(_group(group), reason)


def revoked(group=None):
    return _C.revoked(_group(group))


def shrink(group=None, failed=(), timeout=None):
    """A new group of the survivors of group: every member that calls this
    (after a failure) is in it, ranks renumbered in the old order. failed:
    ranks of group known dead (dead_ranks of an error); the survivors wait
    for every rank of group to either call shrink or be named failed by
    one of them, at most timeout seconds (default the group's), then go on
    with those that called. Raises RuntimeError naming the cause when this
    rank is left out or the new communicator cannot be made."""
    group, rec, timeout_s, ns = _attempt(group, timeout, "s")
    rank, size = group.rank(), group.size()
    st = rec.store
    revoke(group, "shrinking to the survivors")
    st.add(ns + "alive/%d" % rank, 1)
    for f in failed:
        if 0 <= f < size and f != rank:
            st.add(ns + "failed/%d" % f, 1)
    deadline = time.monotonic() + timeout_s
    while not st.add(ns + "decided", 0):
        alive = [r for r in range(size) if st.add(ns + "alive/%d" % r, 0)]
        dead = {r for r in range(size) if st.add(ns + "failed/%d" % r, 0)}
        if len(set(alive) | dead) == size or time.monotonic() > deadline:
            # The first rank to see the set complete (or time run out)
            # decides for all; the others take its list.
            if st.add(ns + "decider", 1) == 1:
                st.set(ns + "members", ",".join(str(r) for r in alive if r not in dead))
                st.add(ns + "decided", 1)
        else:
            time.sleep(_POLL_S)
    members = [int(x) for x in st.get(ns + "members").decode().split(",") if x]
    if rank not in members:
        raise RuntimeError("autoinfra shrink: rank %d of %d is not among the survivors %s (named "
                           "failed, or too late)" % (rank, size, members))
    return _new_group(rec, ns, members.index(rank), len(members), timeout_s)


def pending_joiners(group=None):
    """How many processes called join() on group's lineage and were not yet
    admitted by grow()."""
    rec = _lineage_of(group)
    return rec.store.add(rec.ns + "join/tickets", 0) - rec.store.add(rec.ns + "join/admitted", 0)


def grow(group, joiners, timeout=None):
    """A new group of group's members (ranks kept) and the next `joiners`
    processes waiting in join(), ranks size..size+joiners-1. Every member
    calls it with the same joiners (pending_joiners as rank 0 saw it)."""
    group, rec, timeout_s, ns = _attempt(group, timeout, "g")
    rank, size = group.rank(), group.size()
    if rank == 0:
        first = rec.store.add(rec.ns + "join/admitted", joiners) - joiners
        for i in range(joiners):
            rec.store.set(rec.ns + "join/%d" % (first + i + 1),
                          "%d %d %d" % (rec.gen, size + i, size + joiners))
    return _new_group(rec, ns, rank, size + joiners, timeout_s)


def join(addr, timeout=60.0, lineage="world"):
    """From a new process: wait (at most timeout s) until the members of the
    job whose c10d store is at addr ("HOST:PORT", the job's MASTER_ADDR and
    MASTER_PORT) admit it with grow(); returns its group there."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError("autoinfra join: address '%s' is not HOST:PORT" % addr)
    wait = datetime.timedelta(seconds=timeout)
    st = dist.TCPStore(host, int(port), is_master=False, timeout=wait)
    ns = _ELASTIC + lineage + "/"
    ticket = st.add(ns + "join/tickets", 1)
    key = ns + "join/%d" % ticket
    try:
        st.wait([key], wait)
    except RuntimeError as e:
        raise RuntimeError("autoinfra join: no member of the job at %s admitted this process "
                           "within %g s (ticket %d): %s" % (addr, timeout, ticket, e)) from None
    gen, rank, size = (int(x) for x in st.get(key).decode().split())
    rec = _Lineage(st, ns, gen, float(timeout))
    peer = os.environ.get("AUTOINFRA_PEER_ADDR") or host
    return _new_group(rec, "%s%dg/" % (ns, gen), rank, size, float(timeout), peer)


def choice(group, coll, nbytes):
    """What `auto` runs next for `coll` ("allreduce", ...) at `nbytes` on this
    process group: a dict with algo, chunk_bytes, channels, source, explored,
    explore_s (docs/learner.md). Queued behind the group's pending calls."""
    return _C.choice(group if group is not None else dist.distributed_c10d._get_default_group(),
                     coll, int(nbytes))


if not hasattr(dist.Backend, "AUTOINFRA"):
    dist.Backend.register_backend("autoinfra", _create)
