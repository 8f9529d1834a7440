#!/usr/bin/python3
"""A small GPT-style transformer trained with DDP on CPU: the project's main job.

One process per rank; the job comes from torch's env:// variables (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), which `autoinfra launch` and
`bench/testbed run` set. The corpus is the text of /usr/share/common-licenses
(Debian's base-files, on every Debian system), read byte by byte: the
tokenizer is the identity on bytes, a vocabulary of 256.

    build/autoinfra launch -n 4 -- /usr/bin/python3 examples/train/train.py \\
        --backend autoinfra --model tiny --steps 40

Each rank reads its own share of the windows (a DistributedSampler over all
windows of ctx+1 bytes, shuffled by --seed) through a DataLoader with worker
processes; DDP averages the gradients in buckets of --bucket-cap-mb; AdamW
steps. Rank 0 prints step, loss, step time and tokens/s as it goes; --json
FILE writes one object (docs/train.md). Same seed, same corpus, same ranks:
the same loss curve for a backend (one thread per rank, no dropout).

--elastic trains through autoinfra.elastic (docs/train.md "Elastic
training"): a rank that dies costs the survivors at most the interrupted
step, and a process started with --join HOST:PORT (the job's MASTER_ADDR
and MASTER_PORT) is taken into the job at the next step's end and trained
on from the others' state. Each step's global batch (--global-batch, by
default --batch x the ranks) is drawn from the step number and split
evenly over the ranks of the moment, in the training process (no loader
workers), so that a redone step sees the same samples.

Needs Debian's python3-torch, installed for /usr/bin/python3 only.
Exit status: 0, 1 training failed (e.g. a peer died: the error is printed
by every rank that saw it), 2 usage error.
"""
import argparse
import datetime
import json
import math
import os
import signal
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

CORPUS_DIR = "/usr/share/common-licenses"
# layers, dim, heads, ctx. medium has 5.1M float32 parameters (19.5 MiB of
# gradients): the size at which the collectives, not the compute, set a
# step's time on the emulated cluster.
PRESETS = {
    "tiny": (2, 64, 4, 64),
    "small": (4, 128, 4, 128),
    "medium": (4, 320, 5, 32),
}


def read_corpus(path):
    """The bytes of a file, or of a directory's regular files (not symlinks,
    which in common-licenses only repeat other files) in name order."""
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path)
                       if os.path.isfile(os.path.join(path, n))
                       and not os.path.islink(os.path.join(path, n)))
        parts = []
        for n in names:
            with open(os.path.join(path, n), "rb") as f:
                parts.append(f.read())
        data = b"\n".join(parts)
    else:
        with open(path, "rb") as f:
            data = f.read()
    return data


class Windows(Dataset):
    """Every window of ctx+1 consecutive bytes: input ctx bytes, target the
    same shifted by one."""

    def __init__(self, data, ctx):
        self.data = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        self.ctx = ctx

    def __len__(self):
        return len(self.data) - self.ctx - 1

    def __getitem__(self, i):
        w = self.data[i:i + self.ctx + 1].long()
        return w[:-1], w[1:]


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads, ctx):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        # A plain attribute, not a buffer: DDP would broadcast buffers, and
        # gloo broadcasts no bool tensors; every rank builds the same mask.
        self.mask = torch.tril(torch.ones(ctx, ctx, dtype=torch.bool))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, dim, heads, ctx):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, ctx)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, layers, dim, heads, ctx, vocab=256):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.blocks = nn.Sequential(*(Block(dim, heads, ctx) for _ in range(layers)))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="autoinfra", choices=("autoinfra", "gloo"))
    p.add_argument("--model", default="tiny", choices=sorted(PRESETS),
                   help="preset of --layers/--dim/--heads/--ctx (default tiny)")
    p.add_argument("--layers", type=int)
    p.add_argument("--dim", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--ctx", type=int)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank and step (default 8)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5,
                   help="steps left out of the step-time median (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's gradient buckets (default 25)")
    p.add_argument("--workers", type=int, default=1, help="DataLoader worker processes (>= 1, default 1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds a collective may wait for a peer (init_process_group timeout, default 60)")
    p.add_argument("--corpus", default=CORPUS_DIR, help="file or directory of text (default %(default)s)")
    p.add_argument("--json", metavar="FILE", help="rank 0 writes the results here")
    p.add_argument("--quiet", action="store_true", help="no per-step lines")
    p.add_argument("--die-at", type=int, metavar="STEP",
                   help="the last rank kills itself (SIGKILL) at this step: the failure test")
    p.add_argument("--elastic", action="store_true",
                   help="train on through lost ranks and joiners (autoinfra.elastic; autoinfra backend)")
    p.add_argument("--join", metavar="HOST:PORT",
                   help="join the elastic job whose store is at HOST:PORT (implies --elastic)")
    p.add_argument("--global-batch", type=int,
                   help="--elastic: sequences per step over all ranks (default --batch x the ranks; "
                        "needed with --join)")
    a = p.parse_args(argv)
    if a.join:
        a.elastic = True
        if a.global_batch is None:
            p.error("--join needs --global-batch (the job's)")
    if a.elastic and a.backend != "autoinfra":
        p.error("--elastic needs --backend autoinfra")
    if a.global_batch is not None and a.global_batch < 1:
        p.error("--global-batch must be at least 1")
    layers, dim, heads, ctx = PRESETS[a.model]
    a.layers = a.layers or layers
    a.dim = a.dim or dim
    a.heads = a.heads or heads
    a.ctx = a.ctx or ctx
    for name in ("layers", "dim", "heads", "ctx", "batch", "steps", "workers", "threads"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name)
    if a.dim % a.heads:
        p.error("--dim (%d) must be a multiple of --heads (%d)" % (a.dim, a.heads))
    if a.warmup < 0 or a.warmup >= a.steps:
        p.error("--warmup must be in 0..steps-1")
    if a.bucket_cap_mb <= 0 or a.timeout <= 0 or a.lr <= 0:
        p.error("--bucket-cap-mb, --timeout and --lr must be positive")
    return a


def job_from_env():
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        sys.exit("train: %s not set: start the ranks with `autoinfra launch` or set torch's env:// "
                 "variables" % ", ".join(missing))
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except ValueError:
        sys.exit("train: RANK and WORLD_SIZE must be integers, not '%s', '%s'"
                 % (os.environ["RANK"], os.environ["WORLD_SIZE"]))
    if not 0 <= rank < world:
        sys.exit("train: RANK=%d outside 0..WORLD_SIZE-1 (%d)" % (rank, world - 1))
    return rank, world


def load_backend(name):
    """The autoinfra backend registers itself with torch.distributed on import."""
    if name != "autoinfra":
        return None
    here = os.path.dirname(os.path.abspath(__file__))
    pkg = os.path.join(here, "..", "..", "python")
    if os.path.isdir(pkg) and pkg not in sys.path:
        sys.path.insert(0, pkg)
    import autoinfra.torch as backend  # noqa: F401 (registers "autoinfra")
    return backend


def bucket_sizes(ddp):
    """The byte sizes of DDP's gradient buckets, as its logging data has
    them: after the first step's rebuild (in backward order, capped by
    --bucket-cap-mb) if it happened, else the first step's single bucket."""
    log = ddp._get_ddp_logging_data()
    text = str(log.get("rebuilt_bucket_sizes") or log.get("bucket_sizes", ""))
    return [int(x) for x in text.replace(" ", "").split(",") if x.isdigit()]


def learner_choice(backend, sizes):
    """What the learner runs for each bucket's allreduce, when the backend
    says (autoinfra.torch.choice); None for a backend without a learner."""
    if backend is None or not callable(getattr(backend, "choice", None)):
        return None
    return [dict(backend.choice(None, "allreduce", n), bytes=n) for n in sorted(set(sizes))]


def kill_self(a, rank, step):
    """--die-at: record when (for bench/train-faults), then SIGKILL."""
    if a.json:
        root, ext = os.path.splitext(a.json)
        with open("%s.killed%s" % (root, ext), "w") as f:
            json.dump({"rank": rank, "step": step + 1, "killed_at": time.time()}, f)
            f.write("\n")
    os.kill(os.getpid(), signal.SIGKILL)


def setup(a):
    """Threads and seed set; the corpus and its windows."""
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    try:
        data = read_corpus(a.corpus)
    except OSError as e:
        sys.exit("train: cannot read the corpus %s: %s" % (a.corpus, e.strerror))
    return data, Windows(data, a.ctx)


def elastic_main(a):
    """--elastic, --join: the steps through autoinfra.elastic."""
    if a.join:
        rank, world = None, None
    else:
        rank, world = job_from_env()
    data, ds = setup(a)
    gb = a.global_batch or a.batch * world
    backend = load_backend(a.backend)
    import autoinfra.elastic as elastic
    model = GPT(a.layers, a.dim, a.heads, a.ctx)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    ddp_kwargs = {"bucket_cap_mb": a.bucket_cap_mb}
    if a.join:
        el = elastic.Trainer(model, opt, gb, join=a.join, timeout=a.timeout,
                             ddp_kwargs=ddp_kwargs, log=say)
        say("train: joined at step %d as rank %d of %d" % (el.step, el.rank, el.size))
    else:
        dist.init_process_group(a.backend, init_method="env://", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=a.timeout))
        el = elastic.Trainer(model, opt, gb, timeout=a.timeout, ddp_kwargs=ddp_kwargs, log=say)
    if el.rank == 0 and not a.join:
        print("train: %s elastic, %d ranks, %d layers dim %d heads %d ctx %d, %.2fM parameters "
              "(%.1f MiB of gradients), global batch %d, corpus %s (%d bytes)"
              % (a.backend, el.size, a.layers, a.dim, a.heads, a.ctx, params / 1e6,
                 grad_bytes / 2**20, gb, a.corpus, len(data)), flush=True)

    def step_fn(ddp, step, lo, hi):
        if a.die_at is not None and step == a.die_at and rank is not None and rank == world - 1:
            kill_self(a, rank, step)
        # The step's global batch, drawn from the step number: every world
        # size and every redo sees the same samples.
        g = torch.Generator().manual_seed(a.seed * 1000003 + step)
        idx = torch.randint(0, len(ds), (gb,), generator=g)[lo:hi].tolist()
        x = torch.stack([ds[i][0] for i in idx])
        y = torch.stack([ds[i][1] for i in idx])
        logits = ddp(x)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))

    records = []
    t_prev = time.time()
    try:
        while el.step < a.steps:
            rec = el.run_step(step_fn)
            rec["step_time_s"] = rec["done_at"] - t_prev
            t_prev = time.time()
            records.append(rec)
            if el.rank == 0 and not a.quiet:
                print("step %3d/%d  loss %.4f  ranks %d  step %.3f s%s"
                      % (rec["step"], a.steps, rec["loss"], rec["world_size"], rec["step_time_s"],
                         "  (redone %d)" % rec["redone"] if rec["redone"] else ""), flush=True)
        el.group.barrier().wait()
    except Exception as e:
        print("train: rank %d failed at step %d: %s: %s"
              % (el.rank, el.step + 1, type(e).__name__, str(e).strip().splitlines()[0]),
              file=sys.stderr, flush=True)
        return 1
    if el.rank == 0 and a.json:
        result = {
            "setup": "autoinfra-elastic", "backend": a.backend, "elastic": True,
            "joined": bool(a.join), "world_size": el.size,
            "model": {"preset": a.model, "layers": a.layers, "dim": a.dim, "heads": a.heads,
                      "ctx": a.ctx, "parameters": params},
            "global_batch": gb, "steps": a.steps, "seed": a.seed, "lr": a.lr,
            "bucket_cap_mb": a.bucket_cap_mb, "grad_bytes": grad_bytes,
            "corpus": a.corpus, "corpus_bytes": len(data), "tokens_per_step": gb * a.ctx,
            "first_step": records[0]["step"] if records else None,
            "losses": [r["loss"] for r in records],
            "world_sizes": [r["world_size"] for r in records],
            "done_at": [r["done_at"] for r in records],
            "step_times_s": [r["step_time_s"] for r in records],
            "redone": [r["redone"] for r in records],
            "events": el.events,
        }
        with open(a.json, "w") as f:
            json.dump(result, f)
            f.write("\n")
    return 0


def main(argv):
    a = parse_args(argv)
    if a.elastic:
        return elastic_main(a)
    rank, world = job_from_env()
    data, ds = setup(a)
    if len(ds) < world * a.batch:
        sys.exit("train: corpus %s has %d bytes, too few for %d ranks x %d windows of %d"
                 % (a.corpus, len(data), world, a.batch, a.ctx + 1))
    # The sampler is given rank and size itself, so the worker processes are
    # forked before the process group (and its threads) exist.
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=a.seed,
                                 drop_last=True)
    loader = DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers,
                        drop_last=True, persistent_workers=True)
    batches = iter(loader)
    epoch = 0

    backend = load_backend(a.backend)
    dist.init_process_group(a.backend, init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=a.timeout))
    model = GPT(a.layers, a.dim, a.heads, a.ctx)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    ddp = DDP(model, bucket_cap_mb=a.bucket_cap_mb)
    opt = torch.optim.AdamW(ddp.parameters(), lr=a.lr, weight_decay=0.01)
    tokens = world * a.batch * a.ctx
    if rank == 0:
        print("train: %s, %d ranks, %d layers dim %d heads %d ctx %d, %.2fM parameters (%.1f MiB of "
              "gradients), batch %d x %d ranks, corpus %s (%d bytes)"
              % (a.backend, world, a.layers, a.dim, a.heads, a.ctx, params / 1e6, grad_bytes / 2**20,
                 a.batch, world, a.corpus, len(data)), flush=True)

    times, losses = [], []
    error = None
    t_fail = None
    try:
        dist.barrier()
        for step in range(a.steps):
            if a.die_at is not None and step == a.die_at and rank == world - 1:
                kill_self(a, rank, step)
            t0 = time.perf_counter()
            try:
                x, y = next(batches)
            except StopIteration:
                epoch += 1
                sampler.set_epoch(epoch)
                batches = iter(loader)
                x, y = next(batches)
            logits = ddp(x)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
            opt.zero_grad(set_to_none=True)
            t_fail = time.perf_counter()
            loss.backward()
            opt.step()
            dt = time.perf_counter() - t0
            times.append(dt)
            losses.append(loss.item())
            if rank == 0 and not a.quiet:
                print("step %3d/%d  loss %.4f  step %.3f s  %.0f tokens/s"
                      % (step + 1, a.steps, losses[-1], dt, tokens / dt), flush=True)
        # Per step: the mean loss over ranks and the slowest rank's time
        # (one collective after the timed steps).
        both = torch.tensor([losses, times], dtype=torch.float64)
        mean_loss = both[0].clone()
        dist.all_reduce(mean_loss)
        mean_loss /= world
        slowest = both[1].clone()
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    except Exception as e:  # a dead or stalled peer: name it and how long it took
        after = time.perf_counter() - t_fail if t_fail is not None else None
        error = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
        print("train: rank %d failed at step %d after %s s: %s"
              % (rank, len(times) + 1, "%.2f" % after if after is not None else "?", error),
              file=sys.stderr, flush=True)
        if a.json:
            root, ext = os.path.splitext(a.json)
            with open("%s.rank%d%s" % (root, rank, ext), "w") as f:
                json.dump({"rank": rank, "step": len(times) + 1, "error": error,
                           "error_after_s": after}, f)
                f.write("\n")
        return 1

    buckets = bucket_sizes(ddp)
    choice = learner_choice(backend, buckets)
    if rank == 0:
        step_times = slowest.tolist()
        med = statistics.median(step_times[a.warmup:])
        result = {
            "setup": a.backend, "backend": a.backend, "world_size": world,
            "model": {"preset": a.model, "layers": a.layers, "dim": a.dim, "heads": a.heads,
                      "ctx": a.ctx, "parameters": params},
            "batch": a.batch, "steps": a.steps, "warmup": a.warmup, "seed": a.seed, "lr": a.lr,
            "bucket_cap_mb": a.bucket_cap_mb, "workers": a.workers, "threads": a.threads,
            "corpus": a.corpus, "corpus_bytes": len(data),
            "grad_bytes": grad_bytes, "bucket_bytes": buckets, "tokens_per_step": tokens,
            "step_times_s": step_times, "losses": mean_loss.tolist(), "losses_rank0": losses,
            "step_time_s": med, "tokens_per_s": tokens / med,
            "learner": choice,
        }
        print("train: %s, %d ranks: median step %.3f s after %d warm-up steps, %.0f tokens/s, "
              "loss %.4f -> %.4f" % (a.backend, world, med, a.warmup, tokens / med,
                                     result["losses"][0], result["losses"][-1]), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(result, f)
                f.write("\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
