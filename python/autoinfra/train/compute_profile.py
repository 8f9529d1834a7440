"""The compute profile of the training job (python -m autoinfra.train --profile-out FILE).

(Not named profile.py: that would shadow the standard library's module
of that name wherever this folder is on sys.path.)

Every rank measures its own compute at the model's shapes under the job's
conditions, and rank 0 writes the compute profile (docs/formats.md,
"Compute profile") that `autoinfra profile import` stores in the
knowledge base for the planner:

- gemm_gflops, attention_gflops: the model's GEMM and attention shapes on
  their own (figures of the device);
- step[]: forward and backward of one micro-batch of b samples as a step
  of the job runs it: through the DDP wrapper (under no_sync: the
  reduction is a term of its own), the job's windows of the corpus and its
  loss scaling, the gradients accumulating; every rank timing the same
  batch size in one window of wall time, so that all ranks compute at once
  as they do in training (on the testbed they share the host's cores and
  each node's CPU quota throttles in periods);
- optimizer_s: one AdamW step right after a gradient reduction, where the
  job runs it (after the wait for the reduction, a rank under a CPU quota
  starts it with its period's quota unspent);
- allreduce_beside_s: the seconds a micro-batch's forward and backward
  take longer while an allreduce of the model's gradients runs beside it
  (issued at its start), all ranks at once: DDP reduces buckets while the
  backward runs, on the same CPU share (the backend's progress thread in
  this process; on the testbed under the node's quota);
- step_overhead_s: the job step's work outside forward, backward and the
  optimizer: zero_grad, drawing the step's windows, and the step's
  bookkeeping allreduce of every rank's times.
"""
import math
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


def timed(fn, min_s=0.2, reps=3):
    """Median seconds of fn over at least reps calls and min_s, after one warm-up."""
    fn()
    ts, t_all = [], time.perf_counter()
    while len(ts) < reps or time.perf_counter() - t_all < min_s:
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        if len(ts) >= 50:
            break
    return statistics.median(ts)


def together(fn, reps=2, min_s=2.0):
    """Seconds per call of fn on this rank, every rank calling fn (no
    collective in it: the ranks call it a different number of times) over
    one window of wall time: after a warm-up call, the window is reps x the
    slowest rank's warm-up and at least min_s, and each rank calls fn until
    it ends (at least reps times), so that no rank measures while the
    others idle. The window's time over its calls, not a median of the
    calls: under a CPU quota (the testbed's nodes, a container's cgroup) a
    call shorter than the quota's period runs at the host's speed until
    the period's quota is spent and the next call waits out the period, so
    the median call is the unthrottled one. min_s spans twenty 100 ms
    periods (the CFS default): the window ends within a period, which
    leaves the mean off the quota's rate by up to a period's share."""
    t0 = time.perf_counter()
    fn()
    w = torch.tensor([max(min_s, reps * (time.perf_counter() - t0))], dtype=torch.float64)
    dist.all_reduce(w, op=dist.ReduceOp.MAX)
    dist.barrier()
    n, start = 0, time.perf_counter()
    end = start + float(w)
    while n < reps or time.perf_counter() < end:
        fn()
        n += 1
    return (time.perf_counter() - start) / n


def batch_points(lo, B, largest):
    """The profile's batch points past 1, 2, 4, 8: powers of two up to the
    share the fastest rank is likely to get, from every rank's seconds at
    the base points lo (a ranks x points tensor, the same on every rank, so
    every rank picks the same points): B x its speed over the sum of the
    speeds, a rank's speed 1 / its seconds at the largest base point, with
    20% to spare; at most largest (the job's largest micro-batch) and B.
    The planner then reads every share it may give from measured points,
    not from the line through small batches."""
    speed = [1.0 / row[-1] for row in lo.tolist()]
    top = min(largest, B, math.ceil(1.2 * B * max(speed) / sum(speed)))
    pts, b = [], 16
    while b < top:
        pts.append(b)
        b *= 2
    return pts + [top] if top > 8 else pts


def kernels(a, model):
    """GEMM and attention GFLOP/s at the model's shapes."""
    d, t, h = a.dim, a.ctx, a.heads
    M = 4 * t
    shapes = [(M, d, 3 * d), (M, d, d), (M, d, 4 * d), (M, 4 * d, d), (M, d, 256)]
    mats = [(torch.randn(m, k), torch.randn(k, n)) for m, k, n in shapes]
    gemm_s = timed(lambda: [x @ w for x, w in mats])
    gemm_flops = sum(2.0 * m * k * n for m, k, n in shapes)
    q, k, v = (torch.randn(4, h, t, d // h) for _ in range(3))
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))

    def attention():
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        return att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
    attn_s = timed(attention)
    attn_flops = 4.0 * 4 * h * t * t * (d // h)
    return gemm_flops / gemm_s / 1e9, attn_flops / attn_s / 1e9


def measure(a, ddp, opt, order, world, B, largest):
    """This rank's profile entry (without rank and host), measured with
    every rank of the job calling it at once: ddp the job's DDP wrapper of
    a fresh model, opt its optimizer, order the job's GlobalOrder (its
    windows), B the global batch, largest the job's largest micro-batch
    (--micro-batch, else B)."""
    model = ddp.module
    gemm, attn = kernels(a, model)
    rank = dist.get_rank()

    def micro_batch(b):
        def run():
            x, y = order.batch(order.next(b))
            with ddp.no_sync():
                logits = ddp(x)
                loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
                (loss * (world * b / B)).backward()
            loss.item()
        return run

    steps = [{"batch": b, "fwd_bwd_s": together(micro_batch(b))}
             for b in sorted({1, 2, 4, min(largest, 8)})]
    lo = torch.zeros(world, len(steps), dtype=torch.float64)
    lo[rank] = torch.tensor([pt["fwd_bwd_s"] for pt in steps], dtype=torch.float64)
    dist.all_reduce(lo)
    steps += [{"batch": b, "fwd_bwd_s": together(micro_batch(b))}
              for b in batch_points(lo, B, largest)]
    # the optimizer where the job runs it: right after a reduction of the
    # gradients, every rank at once
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    opt_s, red_s = [], []
    for k in range(4):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(flat)
        t1 = time.perf_counter()
        opt.step()
        opt_s.append(time.perf_counter() - t1)
        red_s.append(t1 - t0)
    # the compute an allreduce of the gradients takes from a micro-batch
    # running beside it (DDP reduces buckets during the backward, on the
    # same CPU share): the smallest batch point that outlasts the
    # reduction on every rank, alone and with the reduction issued at its
    # start, alternately, every rank the same calls (collectives in them)
    red = torch.tensor([statistics.median(red_s[1:])], dtype=torch.float64)
    dist.all_reduce(red, op=dist.ReduceOp.MAX)
    least = torch.tensor([[pt["fwd_bwd_s"] for pt in steps]], dtype=torch.float64)
    dist.all_reduce(least, op=dist.ReduceOp.MIN)
    pick = next((i for i, t in enumerate(least[0].tolist()) if t >= 1.5 * float(red)), len(steps) - 1)
    run = micro_batch(steps[pick]["batch"])
    alone, beside = [], []
    for _ in range(3):
        dist.barrier()
        t0 = time.perf_counter()
        run()
        alone.append(time.perf_counter() - t0)
        dist.barrier()
        t0 = time.perf_counter()
        work = dist.all_reduce(flat, async_op=True)
        run()
        beside.append(time.perf_counter() - t0)
        work.wait()
    row = torch.zeros(world, 4, dtype=torch.float64)

    def overhead():
        opt.zero_grad(set_to_none=True)
        idx = order.next(B)
        off = (rank * B) // world
        mine = idx[off:off + B // world]
        row.zero_()
        row[rank] = torch.tensor([0.1, float(len(mine)), 0.0, 0.0], dtype=torch.float64)
        dist.all_reduce(row)
    # a collective in it: every rank the same number of calls (not a window)
    dist.barrier()
    over = []
    for _ in range(6):
        t0 = time.perf_counter()
        overhead()
        over.append(time.perf_counter() - t0)
    return {"gemm_gflops": gemm, "attention_gflops": attn,
            "optimizer_s": statistics.median(opt_s[1:]), "step": steps,
            "allreduce_beside_s": max(0.0, statistics.median(beside) - statistics.median(alone)),
            "step_overhead_s": statistics.median(over[1:])}
