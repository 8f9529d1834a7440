"""The compute profile of the training job (train.py --profile-out FILE).

(Not named profile.py: that would shadow the standard library's module
of that name for everything imported from train.py's directory.)

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
- cores: the CPU seconds per wall second this rank's compute got while it
  measured step[] (a quota's share of a core on the testbed);
- allreduce_cpu_s: the CPU seconds (all of the process's threads) one
  allreduce of the model's gradients costs this rank, all ranks reducing
  together. DDP reduces buckets while the backward runs on the same CPU
  share: the planner counts allreduce_cpu_s / cores of compute time lost;
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


def together(fn, reps=2):
    """(median seconds of fn, CPU seconds per wall second) on this rank,
    every rank calling fn over one window of wall time: after a warm-up
    call, the window is reps x the slowest rank's warm-up, and each rank
    calls fn until it ends (at least reps times), so that no rank measures
    while the others idle."""
    t0 = time.perf_counter()
    fn()
    w = torch.tensor([reps * (time.perf_counter() - t0)], dtype=torch.float64)
    dist.all_reduce(w, op=dist.ReduceOp.MAX)
    dist.barrier()
    ts, cpu0, wall0 = [], time.process_time(), time.perf_counter()
    end = wall0 + float(w)
    while len(ts) < reps or time.perf_counter() < end:
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    cores = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    return statistics.median(ts), cores


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


def measure(a, ddp, opt, order, world, B, micro):
    """This rank's profile entry (without rank and host), measured with
    every rank of the job calling it at once: ddp the job's DDP wrapper of
    a fresh model, opt its optimizer, order the job's GlobalOrder (its
    windows), B the global batch, micro the job's micro-batch."""
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

    steps, shares = [], []
    for b in sorted({1, 2, 4, min(micro, 8)}):
        s, cores = together(micro_batch(b))
        steps.append({"batch": b, "fwd_bwd_s": s})
        shares.append(cores)
    # the reduction of the gradients, every rank at once; CPU seconds of
    # all threads (the backend's progress thread does the work)
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    cpu = []
    opt_s = []
    for k in range(4):
        dist.barrier()
        c0 = time.process_time()
        dist.all_reduce(flat)
        c1 = time.process_time()
        t0 = time.perf_counter()
        opt.step()
        opt_s.append(time.perf_counter() - t0)
        if k:  # the first call names the bucket's arm: a warm-up
            cpu.append(c1 - c0)
    row = torch.zeros(world, 4, dtype=torch.float64)

    def overhead():
        opt.zero_grad(set_to_none=True)
        idx = order.next(B)
        off = (rank * B) // world
        mine = idx[off:off + B // world]
        row.zero_()
        row[rank] = torch.tensor([0.1, float(len(mine)), 0.0, 0.0], dtype=torch.float64)
        dist.all_reduce(row)
    dist.barrier()
    over, _ = together(overhead, reps=5)
    return {"gemm_gflops": gemm, "attention_gflops": attn,
            "optimizer_s": statistics.median(opt_s[1:]), "step": steps,
            "cores": statistics.median(shares), "allreduce_cpu_s": statistics.median(cpu),
            "step_overhead_s": over}
