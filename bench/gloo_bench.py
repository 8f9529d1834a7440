#!/usr/bin/python3
"""PyTorch's gloo backend timed the way `autoinfra bench` times ours.

Per size: warm-up calls, a barrier, then `iters` calls back to back; each
rank's mean per call; `time_us` is the slowest rank's mean. Then the inputs
are refilled, the output preset to 251, the collective runs once more and
every element is compared exactly with a locally computed reference
(`wrong` = wrong elements summed over ranks). One JSON line per size, the
same fields as `autoinfra bench --json` / bench/mpi_bench, system "gloo".

Sizes follow nccl-tests / docs/cli.md: `bytes` is the vector for allreduce,
broadcast, reduce; the whole input for reduce_scatter; the gathered output
for allgather; the whole send buffer for alltoall (split buffers round down
to a multiple of the rank count).

Run one process per rank. The job comes from RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT, or, when those are unset, from the variables
`autoinfra launch` and `bench/testbed run` set (AUTOINFRA_RANK,
AUTOINFRA_SIZE, AUTOINFRA_ADDR=host:port). GLOO_SOCKET_IFNAME picks the
interface (eth0 inside a testbed namespace).

Needs Debian's python3-torch, which is installed for /usr/bin/python3 only:

    bench/testbed run -- env GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 \\
        bench/gloo_bench.py --coll allreduce --bytes 64K:4M --iters 5

Exit status: 0, 1 if any result was wrong, 2 usage error, 3 collective not
supported by this torch's gloo backend (reported on stderr by rank 0).
"""
import argparse
import datetime
import json
import os
import sys
import time

COLLS = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall")


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip()
    if s and s[-1].upper() in mult:
        return int(float(s[:-1]) * mult[s[-1].upper()])
    return int(float(s))


def job_env():
    """Map the autoinfra launcher's variables to torch's env:// ones."""
    env = os.environ
    if "RANK" not in env and "AUTOINFRA_RANK" in env:
        env["RANK"] = env["AUTOINFRA_RANK"]
    if "WORLD_SIZE" not in env and "AUTOINFRA_SIZE" in env:
        env["WORLD_SIZE"] = env["AUTOINFRA_SIZE"]
    if ("MASTER_ADDR" not in env or "MASTER_PORT" not in env) and "AUTOINFRA_ADDR" in env:
        host, _, port = env["AUTOINFRA_ADDR"].rpartition(":")
        env.setdefault("MASTER_ADDR", host)
        env.setdefault("MASTER_PORT", port)
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if k not in env:
            sys.exit(f"gloo_bench: {k} is not set (and no AUTOINFRA_* job to map from)")
    return int(env["RANK"]), int(env["WORLD_SIZE"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--coll", default="allreduce", choices=COLLS + ("bcast",),
                   help="the collective (default allreduce)")
    ap.add_argument("--bytes", default="8:64M",
                   help="sizes MIN:MAX, doubling, nccl-tests conventions (default 8:64M)")
    ap.add_argument("--iters", type=int, default=20,
                   help="timed calls per size (default 20)")
    ap.add_argument("--warmup", type=int, default=5,
                   help="untimed calls per size first (default 5)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds for set-up and each call (default 120)")
    a = ap.parse_args()
    coll = "broadcast" if a.coll == "bcast" else a.coll
    lo, _, hi = a.bytes.partition(":")
    lo = parse_size(lo)
    hi = parse_size(hi) if hi else lo
    if a.iters < 1 or a.warmup < 0 or lo > hi:
        ap.error("bad --iters/--warmup/--bytes")

    rank, size = job_env()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=a.timeout))

    f32 = torch.float32
    bus = {"allreduce": 2.0 * (size - 1) / size, "allgather": (size - 1) / size,
           "reduce_scatter": (size - 1) / size, "alltoall": (size - 1) / size,
           "broadcast": 1.0, "reduce": 1.0}[coll]
    split = coll in ("allgather", "reduce_scatter", "alltoall")

    def idx(n, start=0):
        return torch.arange(start, start + n, dtype=torch.int64)

    # Same data patterns as bench/mpi_bench.c: small integers, exact in f32.
    def v_sum(r, i):
        return ((r + i % 7) % 4).to(f32)

    def v_src(r, i):
        return ((r * 37 + i % 101) % 101).to(f32)

    def v_a2a(s, d, i):
        return ((s * 13 + d * 29 + i % 101) % 101).to(f32)

    def setup(count, per):
        """Fresh input and output tensors and the call that uses them."""
        if coll == "allreduce":
            buf = v_sum(rank, idx(count))
            return buf, lambda: dist.all_reduce(buf)
        if coll == "reduce":
            buf = v_sum(rank, idx(count))
            return buf, lambda: dist.reduce(buf, dst=0)
        if coll == "broadcast":
            buf = v_src(0, idx(count)) if rank == 0 else torch.full((count,), 251.0, dtype=f32)
            return buf, lambda: dist.broadcast(buf, src=0)
        if coll == "allgather":
            inp = v_src(rank, idx(per))
            out = torch.full((count,), 251.0, dtype=f32)
            outs = list(out.split(per)) if per else [out[:0] for _ in range(size)]
            return out, lambda: dist.all_gather(outs, inp)
        if coll == "reduce_scatter":
            inp = v_sum(rank, idx(count))
            out = torch.full((per,), 251.0, dtype=f32)
            ins = list(inp.split(per)) if per else [inp[:0] for _ in range(size)]
            return out, lambda: dist.reduce_scatter(out, ins)
        if coll == "alltoall":
            inp = torch.cat([v_a2a(rank, d, idx(per)) for d in range(size)])
            out = torch.full((count,), 251.0, dtype=f32)
            return out, lambda: dist.all_to_all_single(out, inp)
        raise AssertionError(coll)

    def expected(count, per):
        if coll in ("allreduce", "reduce"):
            i = idx(count)
            return sum(v_sum(r, i) for r in range(size))
        if coll == "reduce_scatter":
            i = idx(per, rank * per)
            return sum(v_sum(r, i) for r in range(size))
        if coll == "broadcast":
            return v_src(0, idx(count))
        if coll == "allgather":
            return torch.cat([v_src(r, idx(per)) for r in range(size)])
        if coll == "alltoall":
            return torch.cat([v_a2a(s, rank, idx(per)) for s in range(size)])

    any_wrong = 0
    req = lo
    while req <= hi:
        count = req // 4
        if split:
            count -= count % size
        per = count // size if split else count
        nbytes = count * 4
        try:
            out, call = setup(count, per)
            for _ in range(a.warmup):
                call()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(a.iters):
                call()
            mean = (time.perf_counter() - t0) / a.iters
            out, call = setup(count, per)
            call()
        except RuntimeError as e:
            if "does not support" in str(e) or "not supported" in str(e).lower():
                if rank == 0:
                    print(f"gloo_bench: {coll} is not supported by this torch's gloo backend "
                          f"(torch {torch.__version__}): {e}", file=sys.stderr)
                sys.exit(3)
            raise
        if coll == "reduce" and rank != 0:
            wrong = 0
        else:
            wrong = int((out != expected(count, per)).sum().item())
        t = torch.tensor([mean], dtype=torch.float64)
        w = torch.tensor([wrong], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dist.all_reduce(w)
        worst, total = t.item(), int(w.item())
        any_wrong += total
        if rank == 0:
            algbw = nbytes / worst / 1e9 if worst > 0 else 0.0
            print(json.dumps({
                "system": "gloo", "algo": "default", "coll": coll, "bytes": nbytes,
                "count": count, "call_count": per, "dtype": "f32",
                "op": "sum" if coll in ("allreduce", "reduce", "reduce_scatter") else "none",
                "ranks": size, "time_us": round(worst * 1e6, 3), "algbw_GBps": algbw,
                "busbw_GBps": algbw * bus, "wrong": total, "iters": a.iters,
                "warmup": a.warmup, "torch": torch.__version__}), flush=True)
        if req == 0:
            break
        req *= 2
    dist.destroy_process_group()
    if any_wrong and rank == 0:
        print(f"gloo_bench: {any_wrong} wrong elements", file=sys.stderr)
    sys.exit(1 if any_wrong else 0)


if __name__ == "__main__":
    main()
