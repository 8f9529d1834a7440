"""Checks of the autoinfra torch.distributed backend, run by ctest
(plugins/torch/CMakeLists.txt) with /usr/bin/python3 (torch 1.13), and with
the Python of torch 2's venv (plugins/torch/torch2.cmake, the torch 2
module):

    check_backend.py collectives N   every collective on N local ranks against
                                     gloo's result and a reference computed here
    check_backend.py ddp N           DDP trains a small model; parameters must be
                                     bit-identical across ranks and equal gloo's
    check_backend.py kill N          rank N-1 dies mid-run; the others must raise
                                     within the timeout, naming it, an
                                     autoinfra.CommError whose peer is that rank
    check_backend.py revoke N        rank 0 revokes its group with calls queued behind
                                     a running one: they fail at once, naming the
                                     reason, and so does every later call, on every rank
                                     (CommError, status ERR_REVOKED)
    check_backend.py deferred N      large calls waited for at once are deferred; an
                                     asynchronous one nobody waits for still starts
    check_backend.py groups N        dist.new_group of every pair and of all ranks but
                                     the first, beside the default group
    check_backend.py mismatch N      dist.broadcast with src 1 on the last rank and
                                     src 0 on the others: no rank gets wrong data, and
                                     every rank raises, in that call or the next, naming
                                     both calls
    check_backend.py p2p N           irecv posted before its isend, batch_isend_irecv, a
                                     ring of large isends before their irecvs: done at
                                     once, equal to gloo's; receives from any source
                                     (recv and irecv without src) name their senders
    check_backend.py asyncsmall 3    an async_op=True call returns before its peers
                                     arrive: a cycle through three groups that only
                                     an asynchronous small call lets finish
    check_backend.py features N      all_gather_coalesced and sparse allreduce against gloo
                                     and a reference;
                                     monitored_barrier passing and naming a missing rank;
                                     timeouts (wait(timeout), the communicator's) raise
                                     RuntimeError saying " Timed out " (CommError,
                                     status ERR_TIMEOUT)
    check_backend.py suite N         what torch's own suite found: monitored_barrier with a
                                     zero timeout fails at once on rank 0, naming it; the
                                     group's sequence number counts its collectives, the
                                     same on every rank; a group under torch's debug
                                     wrapper (DETAIL) gathers objects

Run with RANK set (bench/testbed run sets it on every node), a case runs
as that one rank: test_testbed runs `groups` so across namespaces.

The parent starts N copies of itself with env:// variables on loopback and
fails if any rank fails or the whole run exceeds its limit.
"""
import datetime
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from autoinfra.ports import rendezvous_port  # noqa: E402


def parent(case, n, limit_s=150):
    env = dict(os.environ, WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(rendezvous_port()), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, __file__, case, str(n)],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r))) for r in range(n)]
    end = time.time() + limit_s
    codes = [None] * n
    while None in codes and time.time() < end:
        codes = [p.poll() for p in procs]
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            p.kill()
    codes = [p.wait() for p in procs]
    want = [0] * n if case != "kill" else [0] * (n - 1) + [-9]
    if codes != want:
        print(f"{case} on {n} ranks: exit codes {codes}, want {want}", file=sys.stderr)
        return 1
    print(f"{case} on {n} ranks: ok")
    return 0


# ------------------------------------------------------------------ ranks

def values(shape, dtype, rank, salt, small=False):
    """Small integers (every sum, product, min, max exact in every dtype)."""
    import torch
    g = torch.Generator().manual_seed(1000 * rank + salt)
    lo, hi = (0, 3) if dtype == torch.uint8 else (-3, 4)
    if small:
        lo, hi = (1, 3)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def reference(inputs, op, n):
    import torch
    import torch.distributed as dist
    x = torch.stack([i.double() if i.is_floating_point() else i.long() for i in inputs])
    if op == dist.ReduceOp.SUM:
        r = x.sum(0)
    elif op == dist.ReduceOp.PRODUCT:
        r = x.prod(0)
    elif op == dist.ReduceOp.MIN:
        r = x.min(0).values
    elif op == dist.ReduceOp.MAX:
        r = x.max(0).values
    else:
        s = x.sum(0)
        r = s / n if inputs[0].is_floating_point() else torch.div(s, n, rounding_mode="trunc")
    return r.to(inputs[0].dtype) if inputs[0].dtype != torch.uint8 else (r % 256).to(torch.uint8)


def same(a, b, what):
    import torch
    if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a, b):
        diff = "" if a.shape != b.shape else f" (first differences {torch.nonzero(a != b)[:3].tolist()})"
        raise AssertionError(f"{what}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}{diff}")


def collectives(rank, n):
    import torch
    import torch.distributed as dist
    gloo = dist.new_group(backend="gloo")
    D = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
         torch.uint8]
    OPS = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX,
           dist.ReduceOp.AVG]
    sizes = [0, 1, 13, 4099]
    big = [(1 << 18) + 3, (1 << 20) + 5]  # float32: 1 MiB and 4 MiB
    checked = 0
    for dt in D:
        for op in OPS:
            for sz in sizes + (big if dt == torch.float32 and op == dist.ReduceOp.SUM else []):
                small = op == dist.ReduceOp.PRODUCT
                ins = [values((sz,), dt, r, 1, small) for r in range(n)]
                t = ins[rank].clone()
                dist.all_reduce(t, op)
                want = reference(ins, op, n)
                if op == dist.ReduceOp.AVG and dt.is_floating_point:
                    torch.testing.assert_close(t, want, rtol=1e-2, atol=0)
                else:
                    same(t, want, f"allreduce {op} {dt} {sz}")
                if dt != torch.bfloat16 and op != dist.ReduceOp.AVG:
                    g = ins[rank].clone()
                    dist.all_reduce(g, op, group=gloo)
                    same(t, g, f"allreduce {op} {dt} {sz} against gloo")
                checked += 1
    # non-contiguous: a strided view; the elements between stay as they were
    base = values((64, 8), torch.float32, rank, 2)
    keep = base.clone()
    view = base[:, ::2]
    dist.all_reduce(view)
    same(view, reference([values((64, 8), torch.float32, r, 2)[:, ::2] for r in range(n)],
                         dist.ReduceOp.SUM, n), "allreduce non-contiguous")
    same(base[:, 1::2], keep[:, 1::2], "allreduce non-contiguous: untouched elements")
    # an unsupported op and dtype are refused by name
    for bad, kw in ((torch.ones(3), dict(op=dist.ReduceOp.BAND)), (torch.ones(3, dtype=torch.bool), {})):
        try:
            dist.all_reduce(bad, **kw)
            raise AssertionError("allreduce accepted " + str(kw or bad.dtype))
        except RuntimeError as e:
            assert "autoinfra" in str(e) and "not supported" in str(e) or "no reduction" in str(e), e
    # allreduce_coalesced
    ts = [values((s,), torch.float64, rank, 3 + s) for s in (5, 0, 300)]
    dist.all_reduce_coalesced(ts)
    for t, s in zip(ts, (5, 0, 300)):
        same(t, reference([values((s,), torch.float64, r, 3 + s) for r in range(n)],
                          dist.ReduceOp.SUM, n), "allreduce_coalesced")
    for dt in D + [torch.bool]:
        for sz in sizes + ([(1 << 20) + 1] if dt == torch.float32 else []):
            for root in range(n):
                mk = lambda r: values((sz,), dt, r, 4) if dt != torch.bool else values((sz,), torch.uint8, r, 4).bool()
                a, g = mk(rank), mk(rank)
                dist.broadcast(a, root)
                same(a, mk(root), f"broadcast {dt} {sz} root {root}")
                if dt not in (torch.bfloat16, torch.bool):  # gloo of torch 1.13 has neither
                    dist.broadcast(g, root, group=gloo)
                    same(a, g, f"broadcast {dt} {sz} against gloo")
            # reduce to the last rank
            if dt != torch.bool:
                a = mk(rank)
                dist.reduce(a, n - 1, dist.ReduceOp.MAX)
                if rank == n - 1:
                    same(a, reference([mk(r) for r in range(n)], dist.ReduceOp.MAX, n), f"reduce {dt} {sz}")
                else:
                    same(a, mk(rank), f"reduce {dt} {sz}: input kept at non-root")
            # allgather, both forms
            x = values((sz,), dt if dt != torch.bool else torch.uint8, rank, 5)
            outs = [torch.empty_like(x) for _ in range(n)]
            gouts = [torch.empty_like(x) for _ in range(n)]
            dist.all_gather(outs, x)
            # gloo of torch 1.13 dies of SIGFPE on an empty allgather, has no bfloat16
            gloo_ok = sz and dt != torch.bfloat16
            if gloo_ok:
                dist.all_gather(gouts, x, group=gloo)
            for r in range(n):
                same(outs[r], values((sz,), x.dtype, r, 5), f"allgather {dt} {sz}")
                if gloo_ok:
                    same(outs[r], gouts[r], f"allgather {dt} {sz} against gloo")
            flat = torch.empty(n * sz, dtype=x.dtype)
            dist.all_gather_into_tensor(flat, x)
            same(flat, torch.cat([values((sz,), x.dtype, r, 5) for r in range(n)]), f"_allgather_base {dt} {sz}")
            # reduce_scatter, both forms (gloo of torch 1.13 has none: the reference)
            if dt != torch.bool:
                ins = [values((sz,), dt, rank, 10 + q) for q in range(n)]
                out = torch.empty(sz, dtype=dt)
                dist.reduce_scatter(out, ins)
                want = reference([values((sz,), dt, r, 10 + rank) for r in range(n)], dist.ReduceOp.SUM, n)
                same(out, want, f"reduce_scatter {dt} {sz}")
                out2 = torch.empty(sz, dtype=dt)
                dist.reduce_scatter_tensor(out2, torch.cat(ins))
                same(out2, want, f"_reduce_scatter_base {dt} {sz}")
    # alltoall: equal, uneven (rows), the list form; gather, scatter, send/recv
    for rows in (0, 3, 1000):
        x = values((n * rows, 5), torch.float32, rank, 20)
        o, go = torch.empty_like(x), torch.empty_like(x)
        dist.all_to_all_single(o, x)
        if rows:
            dist.all_to_all_single(go, x, group=gloo)
            same(o, go, f"alltoall_base equal {rows}")
        same(o, torch.cat([values((n * rows, 5), torch.float32, r, 20)[rank * rows:(rank + 1) * rows]
                           for r in range(n)]), f"alltoall_base equal {rows}")
        ins_rows = [(rank + 2 * q + rows) % 4 for q in range(n)]  # rows this rank sends to q
        outs_rows = [(q + 2 * rank + rows) % 4 for q in range(n)]
        x = values((sum(ins_rows), 3), torch.int64, rank, 21)
        o, go = torch.empty(sum(outs_rows), 3, dtype=torch.int64), torch.empty(sum(outs_rows), 3, dtype=torch.int64)
        dist.all_to_all_single(o, x, outs_rows, ins_rows)
        dist.all_to_all_single(go, x, outs_rows, ins_rows, group=gloo)
        same(o, go, f"alltoall_base uneven {rows}")
        li = [values((ins_rows[q],), torch.float16, rank, 30 + q) for q in range(n)]
        lo = [torch.empty(outs_rows[q], dtype=torch.float16) for q in range(n)]
        dist.all_to_all(lo, li)
        for q in range(n):
            same(lo[q], values((outs_rows[q],), torch.float16, q, 30 + rank), f"alltoall list {rows}")
        for root in (0, n - 1):
            x = values((rows, 2), torch.float64, rank, 40)
            g = [torch.empty_like(x) for _ in range(n)] if rank == root else None
            dist.gather(x, g, dst=root)
            if rank == root:
                for r in range(n):
                    same(g[r], values((rows, 2), torch.float64, r, 40), f"gather {rows} root {root}")
            sc = [values((rows,), torch.int32, q, 50 + root) for q in range(n)] if rank == root else None
            y = torch.empty(rows, dtype=torch.int32)
            dist.scatter(y, sc, src=root)
            same(y, values((rows,), torch.int32, rank, 50 + root), f"scatter {rows} root {root}")
        # send/recv around the ring: even ranks send first, odd ranks receive first
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        s, r = values((rows * 300,), torch.float32, rank, 60), torch.empty(rows * 300)
        if n > 1:
            # no cycle of senders: odd ranks take theirs first
            ops = [lambda: dist.send(s, nxt), lambda: dist.recv(r, prv)]
            if rank % 2 == 1:
                ops.reverse()
            for f in ops:
                f()
            same(r, values((rows * 300,), torch.float32, prv, 60), f"send/recv {rows}")
    dist.barrier()
    w = dist.all_reduce(torch.ones(8), async_op=True)
    fut = w.get_future()
    w.wait()
    same(fut.value()[0], torch.full((8,), float(n)), "future value")
    # Small calls run on the caller's thread only while nothing is queued:
    # behind a large asynchronous one they queue, and issue order holds
    # (the product of the doubled small tensor is only right in order).
    big = torch.ones(1 << 20)
    small = torch.full((4,), 2.0)
    works = [dist.all_reduce(big, async_op=True)]
    works.append(dist.all_reduce(small, async_op=True))
    works.append(dist.all_reduce(small, op=dist.ReduceOp.PRODUCT, async_op=True))
    for w in works:
        w.wait()
    same(big, torch.full((1 << 20,), float(n)), "big before small")
    same(small, torch.full((4,), float(2 * n) ** n), "small calls in issue order")
    if rank == 0:
        print(f"collectives on {n} ranks: {checked} allreduce cases and the rest agree")


def ddp(rank, n):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    gloo = dist.new_group(backend="gloo")
    finals = []
    for group in (None, gloo):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
        with torch.no_grad():  # ranks start apart: DDP's broadcast must align them
            for p in model.parameters():
                p.add_(rank)
        m = DDP(model, process_group=group, bucket_cap_mb=0.01)
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(rank)
        for _ in range(6):
            x, y = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in m.parameters()])
        everyone = [torch.empty_like(flat) for _ in range(n)]
        dist.all_gather(everyone, flat, group=gloo)
        for r in range(n):
            same(everyone[r], flat, f"parameters of rank {r} against rank {rank}")
        finals.append(flat)
    # gloo and autoinfra may sum in other orders: equal to rounding
    torch.testing.assert_close(finals[0], finals[1], rtol=1e-5, atol=1e-6)


def kill(rank, n):
    import torch
    import torch.distributed as dist
    import autoinfra.torch as at
    from autoinfra import CommError
    victim = n - 1
    t = torch.ones(1 << 16)
    for _ in range(5):
        dist.all_reduce(t)
    dist.barrier()
    if rank == victim:
        os.kill(os.getpid(), 9)
    t0 = time.time()
    try:
        for _ in range(1000):
            dist.all_reduce(t)
        raise AssertionError("allreduce went on with a dead peer")
    except RuntimeError as e:
        took = time.time() - t0
        msg = str(e)
        assert f"rank {victim}" in msg, msg
        assert took < 5, f"{took:.1f} s to notice"
        # Typed: the runtime's status and the dead peer, not the words.
        assert isinstance(e, CommError) and e.failure, f"{type(e).__name__}: {msg}"
        assert e.peer == victim, f"CommError.peer {e.peer}, want {victim}: {msg}"
        f = at.failure(None)
        assert f is not None and f.status == e.status, f"failure(): {f!r}"
        print(f"rank {rank}: raised {e.status_name} (peer {e.peer}) after {took:.2f} s: "
              f"{msg[:200]}")
    os._exit(0)  # the communicator is failed; skip torch's teardown


def revoke(rank, n):
    import torch
    import torch.distributed as dist
    import autoinfra.torch as at
    from autoinfra import CommError, errors
    big = torch.ones(1 << 20)  # 4 MiB: queued, never run inline
    gloo = dist.new_group(backend="gloo")
    dist.barrier()
    if rank == 0:
        running = dist.all_reduce(big, async_op=True)  # waits for the others' call
        # The progress thread takes it up when it gets a core: on a busy
        # machine that can be after the revoke, which then fails it as queued.
        deadline = time.time() + 30
        while at.queued_calls(None) and time.time() < deadline:
            time.sleep(0.001)
        assert at.queued_calls(None) == 0, "the first call did not start within 30 s"
        queued = [dist.all_reduce(torch.ones(1 << 18), async_op=True) for _ in range(3)]
        t0 = time.time()
        at.revoke(None, "test reason")
        for w in queued:
            try:
                w.wait()
                raise AssertionError("a call queued on a revoked group completed")
            except RuntimeError as e:
                assert "revoked" in str(e) and "test reason" in str(e), str(e)
                assert isinstance(e, CommError) and e.status == errors.ERR_REVOKED, repr(e)
        took = time.time() - t0
        assert took < 1, f"queued calls took {took:.2f} s to fail after the revoke"
        assert at.revoked(None) and not running.is_completed()
        dist.barrier(group=gloo)  # now the others join the running call
        running.wait()
        assert torch.equal(big, torch.full_like(big, n)), "the running call's result"
        try:
            dist.all_reduce(torch.ones(4))
            raise AssertionError("a call after the revoke completed")
        except RuntimeError as e:
            assert "revoked" in str(e), str(e)
        print(f"rank 0: queued calls failed {took * 1e3:.1f} ms after the revoke")
    else:
        dist.barrier(group=gloo)
        try:
            dist.all_reduce(big)  # rank 0's running call; its revoke may overtake the end
        except RuntimeError as e:
            assert "revoked" in str(e), str(e)
        # rank 0's revoke reaches this rank's communicator too (ai_comm_revoke)
        t0 = time.time()
        try:
            for _ in range(1000):
                dist.all_reduce(torch.ones(4))
                time.sleep(0.01)
            raise AssertionError("rank 0's revoke never reached rank %d" % rank)
        except RuntimeError as e:
            assert "revoked" in str(e), str(e)
            assert isinstance(e, CommError) and e.status == errors.ERR_REVOKED, repr(e)
            assert at.failure(None).status == errors.ERR_REVOKED, repr(at.failure(None))
        print(f"rank {rank}: rank 0's revoke failed its call after {time.time() - t0:.2f} s")
    dist.barrier(group=gloo)  # rank 0 stays until the others saw its revoke
    os._exit(0)  # the group is revoked; skip torch's teardown


def deferred(rank, n):
    # A caller that waits for each large call at once gets its calls
    # queued without waking the progress thread (comm_runner.hpp,
    # kWaitStreak). An asynchronous call after such a run, which the
    # caller does not wait for before its peers need it, must still start
    # on its own: rank 0 posts one and then waits on gloo for rank 1, who
    # can only send once that call completed on every rank.
    import torch
    import torch.distributed as dist
    import autoinfra.torch as at
    gloo = dist.new_group(backend="gloo")
    big = torch.ones(1 << 18)  # 1 MiB: above the inline limit
    for k in range(12):
        big.fill_(k)
        dist.all_reduce(big)
        same(big, torch.full_like(big, k * n), f"call {k} of the run waited for at once")
    before = at.deferred_calls()
    assert before > 0, "a run of calls waited for at once deferred none"
    big.fill_(1)
    flag = torch.zeros(1)
    t0 = time.time()
    if rank == 0:
        w = dist.all_reduce(big, async_op=True)
        dist.recv(flag, 1, group=gloo)
        w.wait()
    else:
        dist.all_reduce(big)
        if rank == 1:
            dist.send(torch.ones(1), 0, group=gloo)
    took = time.time() - t0
    same(big, torch.full_like(big, n), "the asynchronous call nobody waited for")
    assert took < 5, f"{took:.2f} s: the call nobody waited for started late"
    # Its future asked for at once: it starts then; the result chains on.
    big.fill_(2)
    fut = dist.all_reduce(big, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    same(fut.wait(), torch.full_like(big, 4 * n), "a future's chained value")
    if rank == 0:
        print(f"deferred on {n} ranks: {before} of 12 calls waited for at once were deferred; "
              f"the call nobody waited for took {took * 1e3:.1f} ms")


def groups(rank, n):
    # Groups of dist.new_group, each a communicator of its own made through
    # the job's store: every pair of ranks, and the ranks but the first (on
    # the testbed, a group whose rank 0 is not on MASTER_ADDR's node), in
    # turn and interleaved with the default group's calls.
    import itertools
    import torch
    import torch.distributed as dist
    pairs = list(itertools.combinations(range(n), 2)) + [tuple(range(1, n))]
    made = [(members, dist.new_group(list(members))) for members in pairs]
    for step in range(3):
        for members, g in made:
            t = torch.full((1000,), float(rank + 1 + step))
            if rank in members:
                dist.all_reduce(t, group=g)
                same(t, torch.full((1000,), float(sum(r + 1 + step for r in members))),
                     f"allreduce on group {members}, step {step}")
            w = torch.full((8,), float(rank))
            dist.all_reduce(w)
            same(w, torch.full((8,), float(sum(range(n)))), f"default group after {members}")
    if rank == 0:
        hosts = os.environ.get("AUTOINFRA_HOST", "one host")
        print(f"groups on {n} ranks (rank 0 on {hosts}): {len(made)} groups agree")


def mismatch(rank, n):
    import torch
    import torch.distributed as dist
    src = 1 if rank == n - 1 else 0
    t = torch.full((1024,), float(rank))
    t0 = time.time()
    errors = []
    try:
        dist.broadcast(t, src)
        # Only a rank whose part needed nothing from the other root may
        # finish, and with its own root's data.
        assert torch.equal(t, torch.full_like(t, float(src))), f"rank {rank}: wrong data {t[:4]}"
    except RuntimeError as e:
        errors.append(str(e))
    try:
        dist.all_reduce(torch.ones(4))
    except RuntimeError as e:
        errors.append(str(e))
    took = time.time() - t0
    assert errors, f"rank {rank}: the mismatched broadcast and the call after it both succeeded"
    msg = errors[0]
    assert "broadcast(root 0, " in msg and "broadcast(root 1, " in msg, msg  # as bytes: u8
    assert took < 10, f"rank {rank}: {took:.1f} s to fail"
    print(f"rank {rank}: raised after {took:.2f} s: {msg[:240]}")
    os._exit(0)  # the communicator is failed; skip torch's teardown


def p2p(rank, n):
    # Point-to-point requests progress on their own: a receive posted
    # before the send it must be matched with by the peer (each rank of a
    # pair does so) completes, as does batch_isend_irecv, and a ring of
    # isends above a shared-memory ring's size (512 KiB) posted before the
    # irecvs. Each must finish in well under the 10 s timeout; gloo does
    # the same exchanges as the reference.
    import torch
    import torch.distributed as dist
    gloo = dist.new_group(backend="gloo")
    peer = rank ^ 1
    for nbytes in (32, 4096, 1 << 20):
        for group, name in ((None, "autoinfra"), (gloo, "gloo")):
            if peer >= n:
                break
            k = nbytes // 4
            u = torch.arange(k, dtype=torch.float32) + 1000 * rank
            t = torch.zeros(k)
            t0 = time.time()
            reqs = [dist.irecv(t, peer, group=group), dist.isend(u, peer, group=group)]
            for r in reqs:
                r.wait()
            took = time.time() - t0
            same(t, torch.arange(k, dtype=torch.float32) + 1000 * peer,
                 f"{name}: irecv before isend, {nbytes} B")
            assert took < 5, f"{name}: irecv before isend of {nbytes} B took {took:.1f} s"
            # batch_isend_irecv: the receive first again
            t.zero_()
            ops = [dist.P2POp(dist.irecv, t, peer, group), dist.P2POp(dist.isend, u + 1, peer, group)]
            t0 = time.time()
            for r in dist.batch_isend_irecv(ops):
                r.wait()
            took = time.time() - t0
            same(t, torch.arange(k, dtype=torch.float32) + 1000 * peer + 1,
                 f"{name}: batch_isend_irecv, {nbytes} B")
            assert took < 5, f"{name}: batch_isend_irecv of {nbytes} B took {took:.1f} s"
    # A ring: every rank sends 1 MiB to the next before it receives from
    # the one before; every send waits for its receiver's irecv.
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    for group, name in ((None, "autoinfra"), (gloo, "gloo")):
        u = torch.full((1 << 18,), float(rank))
        t = torch.zeros(1 << 18)
        t0 = time.time()
        reqs = [dist.isend(u, nxt, group=group), dist.irecv(t, prv, group=group)]
        for r in reqs:
            r.wait()
        took = time.time() - t0
        same(t, torch.full((1 << 18,), float(prv)), f"{name}: ring of 1 MiB isends")
        assert took < 5, f"{name}: ring of 1 MiB isends took {took:.1f} s"
    # Receive from any source, as torch's suite does it: each rank in turn
    # receives 2 * (n - 1) messages with dist.recv and dist.irecv without
    # src while every other rank sends it two; each holds its sender's
    # rank, which recv returns and the Work's _source_rank() names, and
    # every rank hears exactly twice from each other rank.
    for group, name in ((None, "autoinfra"), (gloo, "gloo")):
        heard = []
        for dst in range(n):
            if dst == rank:
                for i in range(2 * (n - 1)):
                    t = torch.full((10, 10), -1.0)
                    if i % 2 == 0:
                        sender = dist.recv(t, group=group)
                    else:
                        w = dist.irecv(t, group=group)
                        w.wait()
                        sender = w._source_rank()
                    assert sender != rank and 0 <= sender < n, f"{name}: recv from any: sender {sender}"
                    same(t, torch.full((10, 10), float(sender)), f"{name}: recv from any source")
                    heard.append(sender)
            else:
                dist.send(torch.full((10, 10), float(rank)), dst, group=group)
                dist.send(torch.full((10, 10), float(rank)), dst, group=group)
        want = sorted(r for r in range(n) if r != rank for _ in range(2))
        assert sorted(heard) == want, f"{name}: rank {rank} heard from {sorted(heard)}, want {want}"
    # A receive from any source posted first matches whichever rank sends
    # first: rank 1 sends only after rank 0 has its first message (from
    # the last rank), so the first names the last rank and the second rank 1.
    if n >= 3 and rank in (0, 1, n - 1):
        if rank == 0:
            a, b = torch.zeros(3), torch.zeros(3)
            wa, wb = dist.irecv(a), dist.irecv(b)
            wa.wait()
            dist.send(torch.ones(1), 1)
            wb.wait()
            assert (wa._source_rank(), wb._source_rank()) == (n - 1, 1), \
                f"any-source receives matched {wa._source_rank()}, {wb._source_rank()}"
            same(a, torch.full((3,), float(n - 1)), "first any-source receive")
            same(b, torch.full((3,), 1.0), "second any-source receive")
        elif rank == 1:
            dist.recv(torch.zeros(1), 0)
            dist.send(torch.full((3,), 1.0), 0)
        else:
            dist.send(torch.full((3,), float(rank)), 0)
    # Collectives after point-to-point calls still meet theirs.
    x = torch.ones(13)
    dist.all_reduce(x)
    same(x, torch.full((13,), float(n)), "allreduce after point-to-point calls")
    if rank == 0:
        print(f"p2p on {n} ranks: irecv before isend, batch_isend_irecv, a ring of isends and "
              "receives from any source done")


def asyncsmall(rank, n):
    # An async_op=True call must return before its peers arrive. Rank 0
    # posts an asynchronous 16-byte allreduce on {0,1}, then a blocking one
    # on {0,2}; rank 1 goes through {1,2} and then {0,1}; rank 2 through
    # {0,2} and then {1,2}. Only rank 0's asynchronous call returning at
    # once lets the cycle finish. The same at 1 MiB, and on gloo groups.
    import torch
    import torch.distributed as dist
    assert n == 3, "asyncsmall runs on 3 ranks"
    limit = datetime.timedelta(seconds=10)
    for backend in ("autoinfra", "gloo"):
        g01 = dist.new_group([0, 1], backend=backend, timeout=limit)
        g02 = dist.new_group([0, 2], backend=backend, timeout=limit)
        g12 = dist.new_group([1, 2], backend=backend, timeout=limit)
        for k in (4, 1 << 18):
            a = torch.full((k,), float(rank + 1))
            b = torch.full((k,), float(rank + 1))
            t0 = time.time()
            if rank == 0:
                w = dist.all_reduce(a, group=g01, async_op=True)
                returned = time.time() - t0
                dist.all_reduce(b, group=g02)
                w.wait()
                same(a, torch.full((k,), 3.0), f"{backend}: async allreduce on {{0,1}}, {4 * k} B")
                same(b, torch.full((k,), 4.0), f"{backend}: allreduce on {{0,2}}, {4 * k} B")
                assert returned < 1, f"{backend}: async_op=True call took {returned:.1f} s to return"
            elif rank == 1:
                dist.all_reduce(b, group=g12)
                dist.all_reduce(a, group=g01)
                same(b, torch.full((k,), 5.0), f"{backend}: allreduce on {{1,2}}, {4 * k} B")
                same(a, torch.full((k,), 3.0), f"{backend}: allreduce on {{0,1}}, {4 * k} B")
            else:
                dist.all_reduce(a, group=g02)
                dist.all_reduce(b, group=g12)
                same(a, torch.full((k,), 4.0), f"{backend}: allreduce on {{0,2}}, {4 * k} B")
                same(b, torch.full((k,), 5.0), f"{backend}: allreduce on {{1,2}}, {4 * k} B")
            took = time.time() - t0
            assert took < 5, f"{backend}: the cycle at {4 * k} B took {took:.1f} s"
    # Small calls waited for at once still compute right in a loop.
    x = torch.ones(2)
    for i in range(50):
        x.fill_(i)
        dist.all_reduce(x)
        same(x, torch.full((2,), float(i * n)), f"blocking small allreduce {i}")
    if rank == 0:
        print("asyncsmall on 3 ranks: the cycle through three groups finished")


def features(rank, n):
    import torch
    import torch.distributed as dist
    from autoinfra import CommError, errors
    gloo = dist.new_group(backend="gloo")
    # all_gather_coalesced: tensors of several shapes at once (one dtype a
    # call, as torch wants), a non-contiguous one and an empty one among them.
    for dt in (torch.float32, torch.int64, torch.uint8):
        def mine(r):
            return [values((5,), dt, r, 7), values((2, 3), dt, r, 8), values((0,), dt, r, 9),
                    values((64, 3), dt, r, 10).t()]
        ins = mine(rank)
        outs = [[torch.empty_like(t).contiguous() for t in ins] for _ in range(n)]
        dist.all_gather_coalesced(outs, ins)
        for r in range(n):
            for i, w in enumerate(mine(r)):
                same(outs[r][i], w, f"all_gather_coalesced {dt}: rank {r}'s tensor {i}")
        for i, t in enumerate(ins):
            if t.numel() == 0:
                continue  # gloo of torch 1.13 dies of SIGFPE on empty allgathers
            g = [[torch.empty_like(t).contiguous()] for _ in range(n)]
            dist.all_gather_coalesced(g, [t.contiguous()], group=gloo)
            for r in range(n):
                same(outs[r][i], g[r][0], f"all_gather_coalesced {dt}: rank {r}'s tensor {i} "
                     "against gloo")
    # Sparse allreduce (SUM, as gloo's): COO tensors with different
    # entries on each rank, duplicates among them, a hybrid one with a
    # dense dimension, and a rank with no entry; against gloo and the dense
    # sum. Another op raises on every rank, naming SUM.
    def sparse(r, hybrid):
        if r == 1:
            idx = torch.zeros((2, 0), dtype=torch.int64)
        else:
            idx = torch.tensor([[r % 4, 0, r % 4], [1, r % 3, 1]])
        k = idx.shape[1]
        shape = (k, 3) if hybrid else (k,)
        val = torch.arange(k * (3 if hybrid else 1), dtype=torch.float64).reshape(shape) + r
        return torch.sparse_coo_tensor(idx, val, (4, 3, 3) if hybrid else (4, 3))
    for hybrid in (False, True):
        mine, theirs = sparse(rank, hybrid), sparse(rank, hybrid)
        dist.all_reduce(mine)
        dist.all_reduce(theirs, group=gloo)
        assert mine.is_sparse, "sparse allreduce returned a dense tensor"
        want = sum(sparse(r, hybrid).to_dense() for r in range(n))
        same(mine.to_dense(), want, f"sparse allreduce (hybrid {hybrid})")
        same(mine.to_dense(), theirs.to_dense(), f"sparse allreduce against gloo (hybrid {hybrid})")
    try:
        dist.all_reduce(sparse(rank, False), op=dist.ReduceOp.MAX)
        raise AssertionError("sparse allreduce with MAX returned")
    except RuntimeError as e:
        assert "SUM" in str(e), str(e)
    # wait(timeout) on a receive whose send comes later: " Timed out ",
    # and the receive still completes once the send comes.
    if rank < 2:
        t = torch.zeros(4)
        if rank == 0:
            w = dist.irecv(t, 1)
            try:
                w.wait(datetime.timedelta(milliseconds=200))
                raise AssertionError("wait(200 ms) on a receive nobody sent returned")
            except RuntimeError as e:
                assert " Timed out " in str(e), str(e)
                assert isinstance(e, CommError) and e.status == errors.ERR_TIMEOUT, repr(e)
                print(f"rank 0: wait(timeout): {e}")
            dist.barrier(group=gloo)
            w.wait()
            same(t, torch.arange(4.0), "the receive after its wait timed out")
        else:
            dist.barrier(group=gloo)
            dist.send(torch.arange(4.0), 0)
    else:
        dist.barrier(group=gloo)
    # monitored_barrier: passes when every rank comes, also waiting for all;
    # on a group that rank 1 leaves out, rank 0 names rank 1 and the others
    # say rank 0 failed them, in gloo's words (torch's tests match them).
    limit = datetime.timedelta(seconds=2)
    dist.monitored_barrier(timeout=limit)
    dist.monitored_barrier(timeout=limit, wait_all_ranks=True)
    x = torch.ones(3)
    dist.all_reduce(x)
    same(x, torch.full((3,), float(n)), "allreduce after monitored_barrier")
    mb = dist.new_group()
    t0 = time.time()
    if rank == 0:
        try:
            dist.monitored_barrier(mb, timeout=datetime.timedelta(seconds=1))
            raise AssertionError("monitored_barrier passed without rank 1")
        except RuntimeError as e:
            assert "Rank 1 failed to pass monitoredBarrier" in str(e), str(e)
            print(f"rank 0: monitored_barrier: {e}")
    elif rank != 1:
        try:
            dist.monitored_barrier(mb, timeout=datetime.timedelta(seconds=1))
            raise AssertionError("monitored_barrier passed without rank 1")
        except RuntimeError as e:
            assert (f"Rank {rank} successfully reached monitoredBarrier, but received errors "
                    "while waiting for send/recv from rank 0") in str(e), str(e)
    took = time.time() - t0
    assert took < 5, f"monitored_barrier took {took:.1f} s to fail"
    dist.barrier(group=gloo)
    # The communicator's own timeout: rank 0 alone in an allreduce of a
    # group whose timeout is 1 s.
    short = dist.new_group(timeout=datetime.timedelta(seconds=1))
    if rank == 0:
        t0 = time.time()
        try:
            dist.all_reduce(torch.ones(4), group=short)
            raise AssertionError("an allreduce nobody joined returned")
        except RuntimeError as e:
            took = time.time() - t0
            assert " Timed out " in str(e), str(e)
            assert isinstance(e, CommError) and e.status == errors.ERR_TIMEOUT, repr(e)
            assert took < 5, f"{took:.1f} s to time out"
            print(f"rank 0: communicator timeout after {took:.2f} s: {str(e)[:160]}")
    dist.barrier(group=gloo)
    os._exit(0)  # the short group failed; skip torch's teardown


def suite(rank, n):
    import torch
    import torch.distributed as dist
    gloo = dist.new_group(backend="gloo")
    # monitored_barrier with a timeout of 0 on rank 0 alone: gloo's words,
    # at once (zero is a timeout, not "unset").
    mb = dist.new_group()
    if rank == 0:
        t0 = time.time()
        try:
            mb.monitored_barrier(datetime.timedelta(seconds=0))
            raise AssertionError("monitored_barrier(0) passed with nobody else there")
        except RuntimeError as e:
            took = time.time() - t0
            assert "Rank 0 timed out in monitoredBarrier" in str(e), str(e)
            assert took < 5, f"monitored_barrier(0) took {took:.1f} s"
            print(f"rank 0: monitored_barrier(0) after {took:.3f} s: {e}")
    dist.barrier(group=gloo)
    # Sequence numbers: every collective counts, point-to-point calls do
    # not; the same on every rank.
    g = dist.new_group()
    b = g._get_backend(torch.device("cpu")) if hasattr(g, "_get_backend") else g
    b._set_sequence_number_for_group()
    s0 = b._get_sequence_number_for_group()
    x = torch.ones(4)
    dist.all_reduce(x, group=g)
    dist.broadcast(x, 0, group=g)
    dist.barrier(group=g)
    if rank == 0:
        dist.send(torch.ones(2), 1, group=g)
    elif rank == 1:
        dist.recv(torch.zeros(2), 0, group=g)
    seq = b._get_sequence_number_for_group() - s0
    assert seq == 3, f"rank {rank}: sequence number moved by {seq} over 3 collectives"
    seqs = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(seqs, torch.tensor([b._get_sequence_number_for_group()]), group=gloo)
    assert len({int(v) for v in seqs}) == 1, f"sequence numbers differ: {seqs}"
    # torch's debug wrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL) checks every
    # collective's sequence number across ranks (torch 2 wraps this
    # backend's groups in it).
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    dg = dist.new_group(backend="autoinfra")
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank, "s": "x" * rank}, group=dg)
    assert objs == [{"rank": r, "s": "x" * r} for r in range(n)], objs
    dist.set_debug_level(dist.DebugLevel.OFF)
    dist.barrier(group=gloo)
    os._exit(0)  # rank 0's monitored_barrier left its receives posted


def child(case, n):
    import torch
    import torch.distributed as dist
    import autoinfra.torch  # noqa: F401 (registers the backend)
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    timeout = datetime.timedelta(seconds=10 if case in ("kill", "p2p", "asyncsmall", "features",
                                                        "suite") else 60)
    dist.init_process_group("autoinfra", timeout=timeout)
    assert dist.get_backend() == "autoinfra" and dist.get_rank() == rank
    {"collectives": collectives, "ddp": ddp, "kill": kill, "revoke": revoke,
     "deferred": deferred, "groups": groups, "mismatch": mismatch, "p2p": p2p,
     "asyncsmall": asyncsmall, "features": features, "suite": suite}[case](rank, n)
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:
        child(sys.argv[1], int(sys.argv[2]))
    else:
        sys.exit(parent(sys.argv[1], int(sys.argv[2])))
