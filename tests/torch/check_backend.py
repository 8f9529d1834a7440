"""Checks of the autoinfra torch.distributed backend, run by ctest
(plugins/torch/CMakeLists.txt) with /usr/bin/python3 (torch 1.13), and with
the Python of torch 2's venv (plugins/torch/torch2.cmake, the torch 2
module):

    check_backend.py collectives N   every collective on N local ranks against
                                     gloo's result and a reference computed here
    check_backend.py ddp N           DDP trains a small model; parameters must be
                                     bit-identical across ranks and equal gloo's
    check_backend.py kill N          rank N-1 dies mid-run; the others must raise
                                     within the timeout, naming it
    check_backend.py revoke N        rank 0 revokes its group with calls queued behind
                                     a running one: they fail at once, naming the
                                     reason, and so does every later call, on every rank
    check_backend.py deferred N      large calls waited for at once are deferred; an
                                     asynchronous one nobody waits for still starts
    check_backend.py groups N        dist.new_group of every pair and of all ranks but
                                     the first, beside the default group

Run with RANK set (bench/testbed run sets it on every node), a case runs
as that one rank: test_testbed runs `groups` so across namespaces.

The parent starts N copies of itself with env:// variables on loopback and
fails if any rank fails or the whole run exceeds its limit.
"""
import datetime
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parent(case, n, limit_s=150):
    env = dict(os.environ, WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1")
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
        print(f"rank {rank}: raised after {took:.2f} s: {msg[:200]}")
    os._exit(0)  # the communicator is failed; skip torch's teardown


def revoke(rank, n):
    import torch
    import torch.distributed as dist
    import autoinfra.torch as at
    big = torch.ones(1 << 20)  # 4 MiB: queued, never run inline
    gloo = dist.new_group(backend="gloo")
    dist.barrier()
    if rank == 0:
        running = dist.all_reduce(big, async_op=True)  # waits for the others' call
        queued = [dist.all_reduce(torch.ones(1 << 18), async_op=True) for _ in range(3)]
        t0 = time.time()
        at.revoke(None, "test reason")
        for w in queued:
            try:
                w.wait()
                raise AssertionError("a call queued on a revoked group completed")
            except RuntimeError as e:
                assert "revoked" in str(e) and "test reason" in str(e), str(e)
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


def child(case, n):
    import torch
    import torch.distributed as dist
    import autoinfra.torch  # noqa: F401 (registers the backend)
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    timeout = datetime.timedelta(seconds=10 if case == "kill" else 60)
    dist.init_process_group("autoinfra", timeout=timeout)
    assert dist.get_backend() == "autoinfra" and dist.get_rank() == rank
    {"collectives": collectives, "ddp": ddp, "kill": kill, "revoke": revoke,
     "deferred": deferred, "groups": groups}[case](rank, n)
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:
        child(sys.argv[1], int(sys.argv[2]))
    else:
        sys.exit(parent(sys.argv[1], int(sys.argv[2])))
