"""A small GPT-style transformer trained with DDP on CPU: the project's main job.

One process per rank; the job comes from torch's env:// variables (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), which `autoinfra launch` and
`bench/testbed run` set. The corpus is the text of /usr/share/common-licenses
(Debian's base-files, on every Debian system), read byte by byte: the
tokenizer is the identity on bytes, a vocabulary of 256.

    PYTHONPATH=python build/autoinfra launch -n 4 -- /usr/bin/python3 -m autoinfra.train \\
        --backend autoinfra --model tiny --steps 40

Every step takes the next --global-batch windows of ctx+1 bytes from one
order of all windows (shuffled by --seed, the same on every rank) and
splits them over the ranks by their batch shares: even, given
(--shares b0,b1,...), a plan's (--plan), or adaptive (--shares auto: every
--rebalance-every steps the balancer re-splits them from each rank's
measured compute time, so that all ranks reach the gradient reduction
together). A rank runs its share in micro-batches of at most --micro-batch,
accumulating gradients under DDP's no_sync but for the last, each
micro-batch's loss scaled so that DDP's averaged gradient is the exact
global-batch mean (docs/train.md, "Batch shares"). AdamW steps. Rank 0
prints step, loss, step time, tokens/s, the shares and every rank's
straggler time; --json FILE writes one object (docs/train.md);
--profile-out FILE measures every rank's compute at the model's shapes
first and writes the compute profile. Same seed, same corpus, same global
batch: the same loss curve whatever the shares (one thread per rank, no
dropout).

--pipeline L0,L1,... (or a plan with a pipeline) runs the model as a
pipeline of stages holding L0, L1, ... blocks instead, 1F1B over
send/recv (autoinfra.train.pipeline, docs/train.md "Pipelines").

--elastic trains through autoinfra.elastic (docs/train.md "Elastic
training"): a rank that dies costs the survivors at most the interrupted
step, and a process started with --join HOST:PORT[,...] (the job's join
door, AUTOINFRA_JOIN_DOOR; under `autoinfra launch --elastic --restarts N`
a replacement joins by itself, through AUTOINFRA_JOIN_ADDR) is taken into
the job at the next step's end and trained on from the others' state. Each step's global batch (--global-batch, by
default --batch x the ranks) is drawn from the step number and split
evenly over the ranks of the moment, in the training process (no loader
workers), so that a redone step sees the same samples.

Needs Debian's python3-torch, installed for /usr/bin/python3 only.
Exit status: 0, 1 training failed (e.g. a peer died: the error is printed
by every rank that saw it), 2 usage error.
"""
import argparse
import contextlib
import datetime
import json
import math
import os
import signal
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import Dataset

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
    p = argparse.ArgumentParser(prog="python -m autoinfra.train", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="autoinfra", choices=("autoinfra", "gloo"))
    p.add_argument("--model", default="tiny", choices=sorted(PRESETS),
                   help="preset of --layers/--dim/--heads/--ctx (default tiny)")
    p.add_argument("--layers", type=int)
    p.add_argument("--dim", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--ctx", type=int)
    p.add_argument("--batch", type=int, default=8,
                   help="sequences per rank and step when --global-batch is not given (default 8)")
    p.add_argument("--global-batch", type=int, metavar="B",
                   help="sequences per step over all ranks (default --batch x ranks)")
    p.add_argument("--shares", metavar="even|auto|b0,b1,...",
                   help="the split of the global batch over the ranks (default even, or the plan's)")
    p.add_argument("--micro-batch", type=int, metavar="M",
                   help="largest micro-batch; a share runs in ceil(b/M) of them (default: one)")
    p.add_argument("--rebalance-every", type=int, default=5, metavar="K",
                   help="--shares auto re-balances every K steps (default 5)")
    p.add_argument("--plan", metavar="FILE",
                   help="a train-plan JSON (autoinfra plan train): its shares, micro_batch, "
                        "bucket_cap_mb and global batch, or its pipeline")
    p.add_argument("--pipeline", metavar="L0,L1,...",
                   help="run a pipeline of stages holding L0, L1, ... blocks (pipeline.py; "
                        "docs/train.md \"Pipelines\")")
    p.add_argument("--micro-batches", type=int, metavar="M",
                   help="a pipeline's micro-batches per replica and step (default 2 x stages)")
    p.add_argument("--profile-out", metavar="FILE",
                   help="measure every rank's compute at the model's shapes first; rank 0 writes "
                        "the compute profile here (--steps 0: only that)")
    p.add_argument("--target-loss", type=float, metavar="X",
                   help="report the time at which the smoothed loss first reaches X")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5,
                   help="steps left out of the step-time median (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--bucket-cap-mb", type=float, help="DDP's gradient buckets (default 25, or the plan's)")
    p.add_argument("--first-bucket-mb", type=float,
                   help="DDP's first bucket, the one reduced first under the backward "
                        "(torch.distributed._DEFAULT_FIRST_BUCKET_BYTES; default torch's 1 MiB)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds a collective may wait for a peer (init_process_group timeout, default 60)")
    p.add_argument("--corpus", default=CORPUS_DIR, help="file or directory of text (default %(default)s)")
    p.add_argument("--json", metavar="FILE", help="rank 0 writes the results here")
    p.add_argument("--quiet", action="store_true", help="no per-step lines")
    p.add_argument("--die-at", type=int, metavar="STEP",
                   help="the last rank kills itself (SIGKILL) at this step: the failure test")
    p.add_argument("--fsdp", action="store_true",
                   help="shard the model with FSDP (torch 2's fully_shard: every block and the "
                        "root; gradients reduce-scattered, parameters all-gathered) instead of DDP "
                        "(default: DDP)")
    p.add_argument("--elastic", action="store_true",
                   help="train on through lost ranks and joiners (autoinfra.elastic; autoinfra backend)")
    p.add_argument("--join", metavar="HOST:PORT",
                   help="join the elastic job whose join door (AUTOINFRA_JOIN_DOOR) is at "
                        "HOST:PORT[,...] (implies --elastic)")
    a = p.parse_args(argv)
    if a.elastic and not a.join and os.environ.get("AUTOINFRA_JOIN_ADDR"):
        a.join = os.environ["AUTOINFRA_JOIN_ADDR"]  # a launcher's replacement
        if a.global_batch is None and os.environ.get("WORLD_SIZE", "").isdigit():
            a.global_batch = a.batch * int(os.environ["WORLD_SIZE"])
    if a.join:
        a.elastic = True
        if a.global_batch is None:
            p.error("--join needs --global-batch (the job's)")
    if a.elastic and a.backend != "autoinfra":
        p.error("--elastic needs --backend autoinfra")
    if a.elastic and (a.shares or a.plan or a.profile_out or a.micro_batch):
        p.error("--elastic splits each step evenly over the ranks of the moment: no --shares, "
                "--plan, --profile-out or --micro-batch")
    if a.fsdp and (a.elastic or a.pipeline or a.profile_out or a.die_at is not None):
        p.error("--fsdp trains the data-parallel job only: no --elastic, --pipeline, "
                "--profile-out or --die-at")
    if a.fsdp and not torch.__version__.startswith("2"):
        p.error("--fsdp needs torch 2 (fully_shard); this is torch %s" % torch.__version__)
    layers, dim, heads, ctx = PRESETS[a.model]
    a.layers = a.layers or layers
    a.dim = a.dim or dim
    a.heads = a.heads or heads
    a.ctx = a.ctx or ctx
    for name in ("layers", "dim", "heads", "ctx", "batch", "threads", "rebalance_every"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if a.steps < 0 or (a.steps == 0 and not a.profile_out):
        p.error("--steps must be at least 1 (0 only with --profile-out)")
    if a.dim % a.heads:
        p.error("--dim (%d) must be a multiple of --heads (%d)" % (a.dim, a.heads))
    if a.steps and (a.warmup < 0 or a.warmup >= a.steps):
        p.error("--warmup must be in 0..steps-1")
    if (a.bucket_cap_mb is not None and a.bucket_cap_mb <= 0) or \
            (a.first_bucket_mb is not None and a.first_bucket_mb <= 0) or a.timeout <= 0 or a.lr <= 0:
        p.error("--bucket-cap-mb, --first-bucket-mb, --timeout and --lr must be positive")
    if a.global_batch is not None and a.global_batch < 1:
        p.error("--global-batch must be at least 1")
    if a.micro_batch is not None and a.micro_batch < 1:
        p.error("--micro-batch must be at least 1")
    a.adapt = a.shares == "auto"
    a.fixed_shares = None
    if a.shares not in (None, "even", "auto"):
        try:
            a.fixed_shares = [int(x) for x in a.shares.split(",")]
        except ValueError:
            p.error("--shares takes even, auto or comma-separated integers, not '%s'" % a.shares)
        if any(b < 0 for b in a.fixed_shares) or not any(a.fixed_shares):
            p.error("--shares %s: every share >= 0, and one at least > 0" % a.shares)
    if a.plan and a.shares not in (None, "auto"):
        p.error("--plan gives the shares: --shares %s goes with no plan (with a plan: auto, to "
                "adapt from the plan's)" % a.shares)
    a.plan_obj = load_plan(p, a.plan) if a.plan else None
    a.pipe_layers = None
    if a.pipeline is not None or a.micro_batches is not None or (
            a.plan_obj and a.plan_obj.get("pipeline") is not None):
        try:
            pipeline_module().check_args(a)
        except ValueError as e:
            p.error(str(e))
    return a


def pipeline_module():
    """autoinfra.train.pipeline: the pipeline's run (imported when used)."""
    from autoinfra.train import pipeline
    return pipeline


def load_plan(p, path):
    """The train-plan JSON of `autoinfra plan train`, checked; its errors
    name the file and the field."""
    try:
        with open(path) as f:
            plan = json.load(f)
    except OSError as e:
        p.error("--plan %s: %s" % (path, e.strerror))
    except ValueError as e:
        p.error("--plan %s: not JSON: %s" % (path, e))
    if not isinstance(plan, dict) or plan.get("kind") != "train-plan" or plan.get("version") != 1:
        p.error("--plan %s: not a train-plan of version 1 (kind, version)" % path)
    for key, typ in (("ranks", int), ("global_batch", int), ("micro_batch", int)):
        if not isinstance(plan.get(key), typ) or isinstance(plan.get(key), bool) or plan[key] < 1:
            p.error("--plan %s: %s must be an integer >= 1, not %r" % (path, key, plan.get(key)))
    cap = plan.get("bucket_cap_mb")
    if not isinstance(cap, (int, float)) or isinstance(cap, bool) or not cap > 0:
        p.error("--plan %s: bucket_cap_mb must be a number > 0, not %r" % (path, cap))
    sh = plan.get("shares")
    if (not isinstance(sh, list) or len(sh) != plan["ranks"]
            or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in sh)
            or sum(sh) != plan["global_batch"] or not any(sh)):
        p.error("--plan %s: shares must be %d integers >= 0 summing to global_batch %d, not %r"
                % (path, plan["ranks"], plan["global_batch"], sh))
    if plan.get("pipeline") is not None:
        try:
            pipeline_module().check_plan(plan, "--plan %s" % path)
        except ValueError as e:
            p.error(str(e))
    return plan


def job_from_env():
    if "RANK" not in os.environ and "SLURM_PROCID" in os.environ:
        import autoinfra.slurm  # srun: torch's env:// from Slurm's variables
        try:
            autoinfra.slurm.torch_env()
        except ValueError as e:
            sys.exit("train: %s" % e)
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        sys.exit("train: %s not set: start the ranks with `autoinfra launch` or srun, or set torch's "
                 "env:// variables" % ", ".join(missing))
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
    import autoinfra.torch as backend  # noqa: F401 (registers "autoinfra")
    return backend


def even_shares(B, n):
    """B samples over n ranks, the first B % n one more: autoinfra.torch's
    even_shares (ai_shares_split of equal throughputs), on any backend."""
    return load_backend("autoinfra").even_shares(B, n)


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


def usage_error(msg):
    print("train: " + msg, file=sys.stderr)
    sys.exit(2)


def resolve_shares(a, world, backend):
    """(global batch, shares, micro-batch, bucket MiB, balancer or None)."""
    plan = a.plan_obj
    if plan:
        if plan["ranks"] != world:
            usage_error("--plan %s is for %d ranks, the job has %d" % (a.plan, plan["ranks"], world))
        B, shares = plan["global_batch"], list(plan["shares"])
        micro = a.micro_batch or plan["micro_batch"]
        cap = a.bucket_cap_mb or float(plan["bucket_cap_mb"])
    else:
        B = a.global_batch or (sum(a.fixed_shares) if a.fixed_shares else a.batch * world)
        if a.fixed_shares:
            if len(a.fixed_shares) != world or sum(a.fixed_shares) != B:
                usage_error("--shares %s: %d ranks need %d shares summing to the global batch %d"
                            % (a.shares, world, world, B))
            shares = a.fixed_shares
        else:
            if B < world:
                usage_error("a global batch of %d cannot give each of %d ranks a sample" % (B, world))
            shares = even_shares(B, world)
        micro = a.micro_batch or max(shares)
        cap = a.bucket_cap_mb or 25.0
    balancer = None
    if a.adapt:
        if backend is None:
            backend = load_backend("autoinfra")  # the balancer is in the extension
        if B < world:
            usage_error("--shares auto needs a global batch of at least %d (the ranks)" % world)
        balancer = backend.Shares(world, B, 0.03)
        # The balancer gives every rank at least one sample.
        start = shares if min(shares) >= 1 else backend.shares_split([max(b, 0.5) for b in shares], B)
        balancer.set(start)
        shares = list(start)
    return B, shares, micro, cap, balancer


class GlobalOrder:
    """The windows of step k: the next B of one permutation of all windows
    per epoch (seeded by seed and epoch), the same on every rank; rank i
    takes the slice of its share."""

    def __init__(self, ds, seed):
        self.ds, self.seed, self.epoch, self.pos = ds, seed, 0, 0
        self.perm = self._perm()

    def _perm(self):
        g = torch.Generator().manual_seed(self.seed * 1000003 + self.epoch)
        return torch.randperm(len(self.ds), generator=g)

    def next(self, B):
        if self.pos + B > len(self.perm):
            self.epoch += 1
            self.pos = 0
            self.perm = self._perm()
        idx = self.perm[self.pos:self.pos + B]
        self.pos += B
        return idx

    def batch(self, idx):
        xs, ys = zip(*(self.ds[int(i)] for i in idx))
        return torch.stack(xs), torch.stack(ys)


class Ready:
    """The time the gradients of the current backward are all computed:
    the embeddings' gradients come last in backward (the model's input
    end), so their hooks fire when the local compute reaches the gradient
    reduction (DDP's last bucket)."""

    def __init__(self, model):
        self.t = 0.0
        for p in (model.tok.weight, model.pos.weight):
            p.register_hook(self._hook)

    def _hook(self, grad):
        self.t = max(self.t, time.perf_counter())
        return grad


@contextlib.contextmanager
def _fsdp_no_sync(model):
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def no_sync(model):
    """Gradients accumulate locally, not reduced: DDP's no_sync, or FSDP's
    set_requires_gradient_sync(False) for the block."""
    return model.no_sync() if hasattr(model, "no_sync") else _fsdp_no_sync(model)


def shard(model):
    """The model under FSDP (torch 2's fully_shard): every block a unit of
    its own, then the root (embeddings, final norm, head), so that a
    block's parameters are all-gathered just before it runs and its
    gradients reduce-scattered as soon as its backward ends. Its
    reduce-scatter averages over the ranks as DDP's allreduce does, so
    run_share's loss scaling holds for both."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch 2.4/2.5 keep it under _composable
        from torch.distributed._composable.fsdp import fully_shard
    for blk in model.blocks:
        fully_shard(blk)
    fully_shard(model)
    return model


class NoReady:
    """FSDP: the gradients' readiness is not hooked (its parameters are
    replaced by shards); compute is timed to the backward's end."""
    t = 0.0


def run_share(ddp, order, idx, B, world, micro, ready):
    """Forward and backward of this rank's share idx of a global batch of
    B: micro-batches of at most micro, all but the last under no_sync,
    each one's mean loss scaled by world x (its samples) / B so that DDP's
    average over the ranks is the mean over all B samples. A rank with no
    share runs one window at scale 0 (DDP needs every rank's backward).
    Returns this rank's part of the global loss, sum_j (m_j / B) L_j."""
    if len(idx) == 0:
        parts, scale0 = [order.perm[:1]], True
    else:
        parts, scale0 = [idx[i:i + micro] for i in range(0, len(idx), micro)], False
    contrib = 0.0
    ready.t = 0.0
    for j, part in enumerate(parts):
        x, y = order.batch(part)
        sync = contextlib.nullcontext() if j == len(parts) - 1 else no_sync(ddp)
        with sync:
            logits = ddp(x)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
            scale = 0.0 if scale0 else world * len(part) / B
            (loss * scale).backward()
        if not scale0:
            contrib += loss.item() * len(part) / B
    return contrib


def smoothed_time_to(losses, times, target, window=5):
    """(seconds, step): the first step at which the mean of the last
    `window` losses is at or below target, and the job's time until then
    (the sum of the steps' times); (None, None) if never."""
    if target is None:
        return None, None
    total = 0.0
    for k, (l, t) in enumerate(zip(losses, times)):
        total += t
        w = losses[max(0, k - window + 1):k + 1]
        if sum(w) / len(w) <= target:
            return total, k + 1
    return None, None


def profile_compute(a, world, B, cap, ds):
    """This rank's entry of the compute profile (autoinfra.train.compute_profile), on a
    fresh model under DDP with its own AdamW and its own order of the
    windows (the job's own model and order are left as they are)."""
    from autoinfra.train import compute_profile
    torch.manual_seed(a.seed)
    model = GPT(a.layers, a.dim, a.heads, a.ctx)
    ddp = DDP(model, bucket_cap_mb=cap)
    opt = torch.optim.AdamW(ddp.parameters(), lr=a.lr, weight_decay=0.01)
    try:
        return compute_profile.measure(a, ddp, opt, GlobalOrder(ds, a.seed + 1), world, B,
                                       a.micro_batch or B)
    finally:
        del ddp, opt


def kill_self(a, rank, step):
    """--die-at: record when (for bench/train-faults), then SIGKILL."""
    if a.json:
        root, ext = os.path.splitext(a.json)
        with open("%s.killed%s" % (root, ext), "w") as f:
            json.dump({"rank": rank, "step": step + 1, "killed_at": time.time()}, f)
            f.write("\n")
    os.kill(os.getpid(), signal.SIGKILL)


def step_failed(a, rank, step, t_fail, e):
    """A step's collective or message failed (a dead or stalled peer):
    print which, after how long (t_fail: the step's start of compute), and
    with --json write FILE.rankR.json; the job's exit status (1)."""
    after = time.perf_counter() - t_fail if t_fail is not None else None
    error = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
    print("train: rank %d failed at step %d after %s s: %s"
          % (rank, step, "%.2f" % after if after is not None else "?", error),
          file=sys.stderr, flush=True)
    if a.json:
        root, ext = os.path.splitext(a.json)
        with open("%s.rank%d%s" % (root, rank, ext), "w") as f:
            json.dump({"rank": rank, "step": step, "error": error, "error_after_s": after}, f)
            f.write("\n")
    return 1


def setup(a):
    """Threads and seed set; the corpus and its windows."""
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    try:
        data = read_corpus(a.corpus)
    except OSError as e:
        sys.exit("train: cannot read the corpus %s: %s" % (a.corpus, e.strerror))
    return data, Windows(data, a.ctx)


def process_started_at():
    """time.time() of this process's start (Linux: /proc/self/stat), else now."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return time.time() - up + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time()


def elastic_main(a):
    """--elastic, --join: the steps through autoinfra.elastic."""
    if a.join:
        rank, world = None, None
    else:
        rank, world = job_from_env()
    data, ds = setup(a)
    gb = a.global_batch or a.batch * world
    load_backend(a.backend)  # registers the backend
    import autoinfra.elastic as elastic
    model = GPT(a.layers, a.dim, a.heads, a.ctx)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    ddp_kwargs = {"bucket_cap_mb": a.bucket_cap_mb or 25.0}
    if a.join:
        el = elastic.Trainer(model, opt, gb, join=a.join, timeout=a.timeout,
                             ddp_kwargs=ddp_kwargs, log=say)
        ev = el.events[-1]
        say("train: joined at step %d as rank %d of %d: %.2f s from the process's start to "
            "the join door, %.2f s there, %.2f s for the state and DDP"
            % (el.step, el.rank, el.size, ev["at"] - process_started_at(), ev["admitted_at"] - ev["at"],
               ev["ready_at"] - ev["admitted_at"]))
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
            "bucket_cap_mb": ddp_kwargs["bucket_cap_mb"], "grad_bytes": grad_bytes,
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
    if a.first_bucket_mb:  # read by every DDP constructor and bucket rebuild after this
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(a.first_bucket_mb * 2**20)
    if a.elastic:
        return elastic_main(a)
    if a.pipe_layers is not None:
        return pipeline_module().main(a, sys.modules[__name__])
    rank, world = job_from_env()
    data, ds = setup(a)
    backend = load_backend(a.backend)
    B, shares, micro, cap, balancer = resolve_shares(a, world, backend)
    if len(ds) < B:
        sys.exit("train: corpus %s has %d bytes, too few for a global batch of %d windows of %d"
                 % (a.corpus, len(data), B, a.ctx + 1))
    order = GlobalOrder(ds, a.seed)

    dist.init_process_group(a.backend, init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=a.timeout))
    model = GPT(a.layers, a.dim, a.heads, a.ctx)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    model_desc = {"preset": a.model, "layers": a.layers, "dim": a.dim, "heads": a.heads, "ctx": a.ctx}

    if a.profile_out:
        mine = profile_compute(a, world, B, cap, ds)
        mine = dict(rank=rank, host=os.environ.get("AUTOINFRA_HOST") or socket.gethostname(), **mine)
        every = [None] * world
        dist.all_gather_object(every, mine)
        if backend is not None:
            # The learner names the communicator (links probed, the KB's matching
            # fingerprint taken) at its first call of AUTOINFRA_TUNE_MIN (64 KiB) or
            # more: before it the fingerprint is one no timing is stored under.
            dist.all_reduce(torch.zeros(1 << 14))
        fp = backend.fingerprint(None) if backend is not None else None
        if rank == 0:
            prof = {"kind": "compute-profile", "version": 1, "fingerprint": fp,
                    "model": dict(model_desc, params=params, grad_bytes=grad_bytes), "ranks": every}
            with open(a.profile_out, "w") as f:
                json.dump(prof, f, indent=1)
                f.write("\n")
            print("train: compute profile of %d ranks written to %s" % (world, a.profile_out), flush=True)
        if a.steps == 0:
            dist.barrier()
            dist.destroy_process_group()
            return 0

    if a.fsdp:
        ready, ddp = NoReady(), shard(model)
    else:
        ready = Ready(model)
        ddp = DDP(model, bucket_cap_mb=cap)
    opt = torch.optim.AdamW(ddp.parameters(), lr=a.lr, weight_decay=0.01)
    tokens = B * a.ctx
    if rank == 0:
        print("train: %s, %d ranks, %d layers dim %d heads %d ctx %d, %.2fM parameters (%.1f MiB of "
              "gradients), global batch %d, shares %s%s, micro-batch %d, %s, corpus %s "
              "(%d bytes)" % (a.backend, world, a.layers, a.dim, a.heads, a.ctx, params / 1e6,
                              grad_bytes / 2**20, B, ",".join(map(str, shares)),
                              " (adaptive, every %d steps)" % a.rebalance_every if balancer else "",
                              micro, "FSDP (fully_shard per block)" if a.fsdp else "buckets %g MiB" % cap,
                              a.corpus, len(data)), flush=True)

    times, losses, straggle, waits, computes, history = [], [], [], [], [], [[0, list(shares)]]
    predicted = None
    t_fail = None
    try:
        dist.barrier()
        t_mark = time.perf_counter()  # end of the previous step's exchange
        for step in range(a.steps):
            if a.die_at is not None and step == a.die_at and rank == world - 1:
                kill_self(a, rank, step)
            idx = order.next(B)
            off = sum(shares[:rank])
            mine = idx[off:off + shares[rank]]
            opt.zero_grad(set_to_none=True)
            t_fail = time.perf_counter()
            contrib = run_share(ddp, order, mine, B, world, micro, ready)
            t_back = time.perf_counter()
            # Compute: from the previous step's end (its optimizer step
            # included) to this rank's gradients all computed.
            compute = (ready.t or t_back) - t_mark
            opt.step()
            row = torch.zeros(world, 4, dtype=torch.float64)
            row[rank] = torch.tensor([compute, shares[rank], contrib, t_back - (ready.t or t_back)],
                                     dtype=torch.float64)
            dist.all_reduce(row)
            t_now = time.perf_counter()
            dt, t_mark = t_now - t_mark, t_now
            comp = row[:, 0].tolist()
            slowest = max(comp)
            times.append(dt)
            losses.append(float(row[:, 2].sum()))
            straggle.append([slowest - c for c in comp])
            computes.append(comp)
            waits.append(row[:, 3].tolist())
            if rank == 0 and not a.quiet:
                print("step %3d/%d  loss %.4f  step %.3f s  %.0f tokens/s  shares %s  straggler %s s"
                      % (step + 1, a.steps, losses[-1], dt, tokens / dt, ",".join(map(str, shares)),
                         " ".join("%.3f" % x for x in straggle[-1])), flush=True)
            if balancer is not None:
                # Every rank feeds the same times to its own balancer, so
                # every rank computes the same shares. The first step
                # (DDP's bucket rebuild, cold caches) is not a step's time.
                if step > 0:
                    for i in range(world):
                        if shares[i] > 0:
                            balancer.observe(i, shares[i], comp[i])
                if (step + 1) % a.rebalance_every == 0:
                    new, changed, predicted = balancer.rebalance()
                    if changed:
                        shares = list(new)
                        history.append([step + 1, list(shares)])
        both = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(both, op=dist.ReduceOp.MAX)
    except Exception as e:  # a dead or stalled peer: name it and how long it took
        return step_failed(a, rank, len(times) + 1, t_fail, e)

    buckets = [] if a.fsdp else bucket_sizes(ddp)
    choice = learner_choice(backend, buckets)
    if rank == 0:
        step_times = both.tolist()
        med = statistics.median(step_times[a.warmup:])
        kept = straggle[a.warmup:]
        strag = [statistics.median(s[i] for s in kept) for i in range(world)]
        t_target, s_target = smoothed_time_to(losses, step_times, a.target_loss)
        result = {
            "setup": a.backend, "backend": a.backend, "world_size": world,
            "model": dict(model_desc, parameters=params),
            "global_batch": B, "shares": shares, "shares_mode": "auto" if balancer else
            ("plan" if a.plan_obj else ("given" if a.fixed_shares else "even")),
            "shares_history": history, "micro_batch": micro, "rebalance_every": a.rebalance_every,
            "plan": a.plan, "predicted_step_time_s": a.plan_obj.get("predicted_step_time_s")
            if a.plan_obj else None, "balancer_predicted_s": predicted,
            "steps": a.steps, "warmup": a.warmup, "seed": a.seed, "lr": a.lr,
            "bucket_cap_mb": None if a.fsdp else cap, "threads": a.threads,
            "parallel": "fsdp" if a.fsdp else "ddp", "torch": torch.__version__,
            "corpus": a.corpus, "corpus_bytes": len(data),
            "grad_bytes": grad_bytes, "bucket_bytes": buckets, "tokens_per_step": tokens,
            "step_times_s": step_times, "losses": losses,
            "step_time_s": med, "tokens_per_s": tokens / med,
            "straggler_s": strag, "straggler_steps_s": straggle, "compute_steps_s": computes,
            "wait_steps_s": waits,
            "target_loss": a.target_loss, "time_to_target_s": t_target, "steps_to_target": s_target,
            "learner": choice,
        }
        print("train: %s, %d ranks: median step %.3f s after %d warm-up steps, %.0f tokens/s, "
              "loss %.4f -> %.4f, shares %s, median straggler %s s%s"
              % (a.backend, world, med, a.warmup, tokens / med, losses[0], losses[-1],
                 ",".join(map(str, shares)), " ".join("%.3f" % x for x in strag),
                 ", loss %.3f reached at %.1f s (step %d)" % (a.target_loss, t_target, s_target)
                 if t_target is not None else ""), flush=True)
    return finish(a, result if rank == 0 else None)


def finish(a, result):
    """The end of a run that trained: rank 0 (result not None) writes
    --json, then every rank leaves the group. Exit status 0."""
    if result is not None and a.json:
        with open(a.json, "w") as f:
            json.dump(result, f)
            f.write("\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0
