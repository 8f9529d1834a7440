"""Pipeline parallelism for the training job (autoinfra.train.job;
docs/train.md "Pipelines").

P stages, k replicas, P x k ranks. Stage s holds a contiguous run of the
GPT's blocks (uneven counts allowed); the first stage also the token and
position embeddings, the last the final norm, the head and the loss.
Replica j is the j-th rank of every stage's rank list; it takes its share
b_j of the step's global batch of B windows (the next b_j after the
shares of replicas 0..j-1) in micro-batches of at most m, and runs them
through its stages in the 1F1B schedule (schedule() below): activations
forward and their gradients backward by dist.send / dist.recv between the
replica's neighbouring stages. Every micro-batch's mean loss is
back-propagated at weight (its windows) / B, each stage's gradients are
summed over its k replicas (one allreduce of the stage's flattened
gradients on a process group of the stage's ranks), so every stage's
update is the one of the mean loss over all B windows, as in the
data-parallel job ("Batch shares").

Point-to-point calls of the autoinfra backend run one at a time in issue
order, and a large send completes only once the receiver takes it; the
schedule is therefore ordered so that on every link the two ranks' calls
pair up in the same order (a send meets the matching receive) and no two
ranks wait on each other: it completes even if every send waits for its
receiver (simulate() checks it).
"""
import datetime
import math
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

SCHEDULE = "1F1B"


# ------------------------------------------------------------ the layout

class Layout:
    """stages: per stage (ranks by replica, blocks); shares: per replica
    its windows per step (sum B); m: the largest micro-batch."""

    def __init__(self, stages, shares, m):
        self.stages = [(list(r), int(n)) for r, n in stages]
        self.P = len(self.stages)
        self.k = len(self.stages[0][0])
        self.shares = list(shares)
        self.B = sum(self.shares)
        self.m = int(m)

    def place(self, rank):
        """(stage, replica) of a rank."""
        for s, (ranks, _) in enumerate(self.stages):
            if rank in ranks:
                return s, ranks.index(rank)
        raise ValueError("rank %d is in no stage" % rank)

    def blocks(self, s):
        lo = sum(n for _, n in self.stages[:s])
        return lo, lo + self.stages[s][1]

    def micro(self, j):
        """Replica j's micro-batch sizes."""
        b = self.shares[j]
        return [min(self.m, b - i) for i in range(0, b, self.m)]

    def micro_batches(self):
        return max(len(self.micro(j)) for j in range(self.k))

    def rank_shares(self, world):
        """The contract's per-rank shares: a replica's at its first-stage
        rank, 0 elsewhere."""
        out = [0] * world
        for j, r in enumerate(self.stages[0][0]):
            out[r] = self.shares[j]
        return out

    def describe(self):
        return {"schedule": SCHEDULE,
                "stages": [{"ranks": r, "layers": n} for r, n in self.stages],
                "micro_batches": self.micro_batches(),
                "micro_batches_per_replica": [len(self.micro(j)) for j in range(self.k)],
                "replica_shares": self.shares}


def parse_layers(text):
    """--pipeline L0,L1,...: the blocks of each stage, 2 stages at least."""
    try:
        layers = [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError("--pipeline takes the blocks of each stage, comma-separated "
                         "integers (e.g. 3,1), not '%s'" % text) from None
    if len(layers) < 2 or min(layers) < 1:
        raise ValueError("--pipeline %s: want 2 stages or more, each of at least 1 block" % text)
    return layers


def check_plan(plan, where):
    """The pipeline block of a train-plan, checked against the rest of the
    plan; raises ValueError naming the field (where: "--plan FILE")."""
    pipe, R = plan["pipeline"], plan["ranks"]
    if not isinstance(pipe, dict) or not isinstance(pipe.get("stages"), list) \
            or len(pipe["stages"]) < 2:
        raise ValueError("%s: pipeline must be null or an object with 2 or more stages, not %r"
                         % (where, pipe))
    seen = []
    for s, st in enumerate(pipe["stages"]):
        ranks = st.get("ranks") if isinstance(st, dict) else None
        n = st.get("layers") if isinstance(st, dict) else None
        if not isinstance(ranks, list) or not ranks or not all(
                isinstance(r, int) and not isinstance(r, bool) and 0 <= r < R for r in ranks):
            raise ValueError("%s: pipeline.stages[%d].ranks must be a list of ranks 0..%d, not %r"
                             % (where, s, R - 1, ranks))
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError("%s: pipeline.stages[%d].layers must be an integer >= 1, not %r"
                             % (where, s, n))
        if len(ranks) != len(pipe["stages"][0]["ranks"]):
            raise ValueError("%s: pipeline.stages[%d].ranks has %d ranks, stage 0 has %d (every "
                             "stage has one rank per replica)"
                             % (where, s, len(ranks), len(pipe["stages"][0]["ranks"])))
        seen += ranks
    if sorted(seen) != list(range(R)):
        raise ValueError("%s: pipeline.stages[].ranks must hold each of the %d ranks once, not %s"
                         % (where, R, [st["ranks"] for st in pipe["stages"]]))
    first = set(pipe["stages"][0]["ranks"])
    for r, b in enumerate(plan["shares"]):
        if b and r not in first:
            raise ValueError("%s: shares[%d] is %d but rank %d is not in the first stage (a "
                             "pipeline's samples are listed at each replica's first-stage rank)"
                             % (where, r, b, r))
    M = pipe.get("micro_batches")
    lay = layout_of_plan(plan, plan["micro_batch"])
    if M != lay.micro_batches():
        raise ValueError("%s: pipeline.micro_batches is %r, but replica shares %s in micro-batches "
                         "of micro_batch %d make %d" % (where, M, lay.shares, lay.m,
                                                        lay.micro_batches()))


def layout_of_plan(plan, m):
    pipe = plan["pipeline"]
    stages = [(st["ranks"], st["layers"]) for st in pipe["stages"]]
    return Layout(stages, [plan["shares"][r] for r in stages[0][0]], m)


def check_args(a):
    """After parse_args: the pipeline of --pipeline or of the plan, or
    None (data parallelism); raises ValueError naming the flag. Sets
    a.pipe_layers (per stage blocks) or None."""
    plan_pipe = a.plan_obj is not None and a.plan_obj.get("pipeline") is not None
    a.pipe_layers = None
    if a.pipeline is not None and a.plan:
        raise ValueError("--pipeline goes with no --plan (a plan gives its own pipeline)")
    if a.pipeline is None and not plan_pipe:
        if a.micro_batches is not None:
            raise ValueError("--micro-batches M is a pipeline's (with --pipeline or a pipeline "
                             "plan); data parallelism takes --micro-batch")
        return
    if a.micro_batches is not None and a.micro_batches < 1:
        raise ValueError("--micro-batches must be at least 1")
    if a.micro_batches is not None and a.micro_batch is not None:
        raise ValueError("--micro-batches and --micro-batch both size the micro-batches: give one")
    what = "--pipeline %s" % a.pipeline if a.pipeline is not None else "--plan %s" % a.plan
    for flag, on in (("--shares", a.shares is not None), ("--elastic", a.elastic),
                     ("--profile-out", a.profile_out is not None)):
        if on:
            raise ValueError("%s runs a pipeline: %s goes with data parallelism only" % (what, flag))
    if a.pipeline is not None:
        layers = parse_layers(a.pipeline)
        field = "--pipeline %s" % a.pipeline
    else:
        layers = [st["layers"] for st in a.plan_obj["pipeline"]["stages"]]
        field = "--plan %s: pipeline.stages[].layers (%s)" % (a.plan, ",".join(map(str, layers)))
    if sum(layers) != a.layers:
        raise ValueError("%s: the stages hold %d blocks, the model has %d (--model, --layers)"
                         % (field, sum(layers), a.layers))
    a.pipe_layers = layers


def layout(a, world, T=None):
    """The run's Layout from the checked arguments; ValueError naming the
    flag when it does not fit the job. T is the train module, whose
    even_shares splits the batch over the replicas without a plan."""
    P = len(a.pipe_layers)
    if a.plan_obj is not None:
        if a.plan_obj["ranks"] != world:
            raise ValueError("--plan %s is for %d ranks, the job has %d"
                             % (a.plan, a.plan_obj["ranks"], world))
        lay = layout_of_plan(a.plan_obj, a.micro_batch or a.plan_obj["micro_batch"])
        if a.micro_batches is not None:
            lay.m = max(1, math.ceil(max(lay.shares) / a.micro_batches))
        return lay
    if world % P:
        raise ValueError("--pipeline %s: %d stages do not divide the job's %d ranks"
                         % (a.pipeline, P, world))
    k = world // P
    B = a.global_batch or a.batch * world
    if B < k:
        raise ValueError("--pipeline %s: a global batch of %d cannot give each of %d replicas a "
                         "sample (--global-batch)" % (a.pipeline, B, k))
    shares = T.even_shares(B, k)
    if a.micro_batch is not None:
        m = a.micro_batch
    else:
        M = a.micro_batches if a.micro_batches is not None else 2 * P
        m = max(1, math.ceil(max(shares) / M))
    return Layout([(list(range(s * k, (s + 1) * k)), n) for s, n in enumerate(a.pipe_layers)],
                  shares, m)


# ---------------------------------------------------------- the schedule

def schedule(P, s, M):
    """Stage s's calls for M micro-batches in 1F1B, a list of (op, i):
    F/B forward/backward of micro-batch i, RF/SB receive its input from /
    send its input's gradient to stage s-1, SF/RB send its output to /
    receive the output's gradient from stage s+1.

    Stage s runs W = min(P-1-s, M) forwards ahead, then alternates one
    forward and one backward, then the remaining backwards: at most W+1
    micro-batches' activations live at once. In the steady phase a stage
    receives micro-batch i's gradient before it sends micro-batch W+i's
    activations: the stage above sends that gradient before it receives
    those activations, so on every link the calls pair up in order."""
    first, last = s == 0, s == P - 1
    W = min(P - 1 - s, M)
    ops = []
    for i in range(W):
        ops += ([] if first else [("RF", i)]) + [("F", i)] + ([] if last else [("SF", i)])
    if W < M and not first:
        ops.append(("RF", W))
    for i in range(M - W):
        f = W + i
        ops.append(("F", f))
        if not last:
            ops += [("RB", i), ("SF", f)]
        ops.append(("B", i))
        if not first:
            ops.append(("SB", i))
            if f + 1 < M:
                ops.append(("RF", f + 1))
    for i in range(M - W, M):
        ops += ([] if last else [("RB", i)]) + [("B", i)] + ([] if first else [("SB", i)])
    return ops


# the call on the other end of a link
_PEER = {"SF": ("RF", 1), "RF": ("SF", -1), "SB": ("RB", -1), "RB": ("SB", 1)}


def simulate(P, M, cost=None):
    """Run the P stages' schedules for M micro-batches against each other,
    every send waiting until its receiver takes it (the strictest
    semantics of the backend's point-to-point calls). Returns (makespan,
    peak live activations per stage) for per-stage costs cost[s] = (f, b)
    (default 1, 2); raises RuntimeError on a deadlock or a mismatched
    pair."""
    cost = cost or [(1.0, 2.0)] * P
    ops = [schedule(P, s, M) for s in range(P)]
    pc, clock, live, peak = [0] * P, [0.0] * P, [0] * P, [0] * P
    while True:
        moved = False
        for s in range(P):
            while pc[s] < len(ops[s]):
                op, i = ops[s][pc[s]]
                if op in ("F", "B"):
                    clock[s] += cost[s][op == "B"]
                    live[s] += 1 if op == "F" else -1
                    peak[s] = max(peak[s], live[s])
                    pc[s] += 1
                    moved = True
                    continue
                want, d = _PEER[op]
                t = s + d
                if pc[t] >= len(ops[t]) or ops[t][pc[t]][0] != want:
                    break
                if ops[t][pc[t]][1] != i:
                    raise RuntimeError("stage %d's %s of micro-batch %d meets stage %d's %s of %d"
                                       % (s, op, i, t, want, ops[t][pc[t]][1]))
                clock[s] = clock[t] = max(clock[s], clock[t])
                pc[s] += 1
                pc[t] += 1
                moved = True
        if all(pc[s] == len(ops[s]) for s in range(P)):
            return max(clock), peak
        if not moved:
            raise RuntimeError("deadlock: %s" % ", ".join(
                "stage %d at %s" % (s, ops[s][pc[s]] if pc[s] < len(ops[s]) else "end")
                for s in range(P)))


# ------------------------------------------------------------- a stage

class Stage(nn.Module):
    """Blocks lo..hi-1 of a GPT (the same parameter objects), with the
    embeddings on the first stage and the norm and head on the last."""

    def __init__(self, model, lo, hi, first, last):
        super().__init__()
        self.first, self.last = first, last
        if first:
            self.tok, self.pos = model.tok, model.pos
        self.blocks = nn.Sequential(*list(model.blocks)[lo:hi])
        if last:
            self.ln, self.head = model.ln, model.head

    def forward(self, x):
        if self.first:
            x = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        x = self.blocks(x)
        return self.head(self.ln(x)) if self.last else x


class PipeRank:
    """This rank's part of the pipeline: its stage, its neighbours in its
    replica, its stage's process group (k > 1), and step()."""

    def __init__(self, model, lay, rank, ctx, dim, timeout_s=60.0):
        self.lay, self.rank, self.ctx, self.dim = lay, rank, ctx, dim
        self.s, self.j = lay.place(rank)
        s, j, P = self.s, self.j, lay.P
        lo, hi = lay.blocks(s)
        self.stage = Stage(model, lo, hi, s == 0, s == P - 1)
        self.params = [p for p in self.stage.parameters() if p.requires_grad]
        self.grad_bytes = sum(p.numel() * p.element_size() for p in self.params)
        self.prev = lay.stages[s - 1][0][j] if s > 0 else None
        self.next = lay.stages[s + 1][0][j] if s < P - 1 else None
        # new_group is called by every rank for every group, in one order;
        # its timeout (default 30 min) becomes the communicator's
        self.group = None
        if lay.k > 1:
            for t in range(P):
                g = dist.new_group(lay.stages[t][0], timeout=datetime.timedelta(seconds=timeout_s))
                if t == s:
                    self.group = g
        self.off = sum(lay.shares[:j])
        self.sizes = lay.micro(j)
        self.ops = schedule(P, s, len(self.sizes))

    def step(self, order, idx):
        """Forward and backward of this replica's share of the global batch
        idx through this stage, then the stage's gradient sum over its
        replicas. Returns (this rank's part of the global loss, sum_i
        (n_i / B) L_i on the last stage, else 0; seconds computing,
        seconds in send/recv, the time the schedule ended, seconds of the
        stage's allreduce)."""
        B = self.lay.B
        mine = idx[self.off:self.off + sum(self.sizes)]
        parts, o = [], 0
        for n in self.sizes:
            parts.append(mine[o:o + n])
            o += n
        inputs, outputs, grads = {}, {}, {}
        contrib, busy, p2p = 0.0, 0.0, 0.0
        for op, i in self.ops:
            t0 = time.perf_counter()
            if op == "RF":
                x = torch.empty(len(parts[i]), self.ctx, self.dim)
                dist.recv(x, self.prev)
                inputs[i] = x.requires_grad_()
            elif op == "F":
                x, y = order.batch(parts[i]) if self.s == 0 or self.next is None else (None, None)
                out = self.stage(x if self.s == 0 else inputs[i])
                if self.next is None:
                    loss = F.cross_entropy(out.view(-1, out.shape[-1]), y.view(-1))
                    contrib += loss.item() * len(parts[i]) / B
                    out = loss * (len(parts[i]) / B)
                outputs[i] = out
            elif op == "SF":
                dist.send(outputs[i].detach(), self.next)
            elif op == "RB":
                g = torch.empty(len(parts[i]), self.ctx, self.dim)
                dist.recv(g, self.next)
                grads[i] = g
            elif op == "B":
                out = outputs.pop(i)
                out.backward(grads.pop(i) if self.next is not None else None)
            elif op == "SB":
                dist.send(inputs.pop(i).grad, self.prev)
            dt = time.perf_counter() - t0
            if op in ("F", "B"):
                busy += dt
            else:
                p2p += dt
        t_end = time.perf_counter()
        if self.group is not None:
            gs = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
            flat = torch.cat([g.reshape(-1) for g in gs])
            dist.all_reduce(flat, group=self.group)
            o = 0
            for p in self.params:  # views of the summed buffer, kept until the next step
                p.grad = flat[o:o + p.numel()].view_as(p)
                o += p.numel()
        return contrib, busy, p2p, t_end, time.perf_counter() - t_end


# ------------------------------------------------------------- the job

def main(a, T):
    """The training job over a pipeline (the job's main for --pipeline or
    a pipeline plan); T is the train module (its model, data, helpers)."""
    rank, world = T.job_from_env()
    data, ds = T.setup(a)
    backend = T.load_backend(a.backend)
    try:
        lay = layout(a, world, T)
    except ValueError as e:
        T.usage_error(str(e))
    B, P, k = lay.B, lay.P, lay.k
    if len(ds) < B:
        sys.exit("train: corpus %s has %d bytes, too few for a global batch of %d windows of %d"
                 % (a.corpus, len(data), B, a.ctx + 1))
    order = T.GlobalOrder(ds, a.seed)
    dist.init_process_group(a.backend, init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=a.timeout))
    # the whole model, the same on every rank (one seed); each keeps its stage
    model = T.GPT(a.layers, a.dim, a.heads, a.ctx)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    pr = PipeRank(model, lay, rank, a.ctx, a.dim, a.timeout)
    opt = torch.optim.AdamW(pr.params, lr=a.lr, weight_decay=0.01)
    tokens = B * a.ctx
    shares = lay.rank_shares(world)
    desc = lay.describe()
    M = desc["micro_batches"]
    if rank == 0:
        print("train: %s, %d ranks, %d layers dim %d heads %d ctx %d, %.2fM parameters (%.1f MiB of "
              "gradients), global batch %d, pipeline of %d stages (blocks %s; ranks %s) x %d "
              "replica%s (shares %s), %s over %d micro-batches of at most %d, corpus %s (%d bytes)"
              % (a.backend, world, a.layers, a.dim, a.heads, a.ctx, params / 1e6,
                 grad_bytes / 2**20, B, P, "+".join(str(n) for _, n in lay.stages),
                 " | ".join(",".join(map(str, r)) for r, _ in lay.stages), k,
                 "s" if k > 1 else "", ",".join(map(str, lay.shares)), SCHEDULE, M, lay.m,
                 a.corpus, len(data)), flush=True)

    times, losses, straggle, computes, waits, busys, p2ps = [], [], [], [], [], [], []
    t_fail = None
    try:
        dist.barrier()
        t_mark = time.perf_counter()
        for step in range(a.steps):
            if a.die_at is not None and step == a.die_at and rank == world - 1:
                T.kill_self(a, rank, step)
            idx = order.next(B)
            opt.zero_grad(set_to_none=True)
            t_fail = time.perf_counter()
            contrib, busy, p2p, t_end, ar = pr.step(order, idx)
            opt.step()
            # compute: from the previous step's end to this rank's last
            # backward (the pipeline's bubble and messages included), as
            # the data-parallel job's is to its gradients' readiness
            row = torch.zeros(world, 6, dtype=torch.float64)
            row[rank] = torch.tensor([t_end - t_mark, shares[rank], contrib, ar, busy, p2p],
                                     dtype=torch.float64)
            dist.all_reduce(row)
            t_now = time.perf_counter()
            dt, t_mark = t_now - t_mark, t_now
            comp = row[:, 0].tolist()
            times.append(dt)
            losses.append(float(row[:, 2].sum()))
            straggle.append([max(comp) - c for c in comp])
            computes.append(comp)
            waits.append(row[:, 3].tolist())
            busys.append(row[:, 4].tolist())
            p2ps.append(row[:, 5].tolist())
            if rank == 0 and not a.quiet:
                print("step %3d/%d  loss %.4f  step %.3f s  %.0f tokens/s  pipeline %s x %d  busy "
                      "%s s" % (step + 1, a.steps, losses[-1], dt, tokens / dt,
                                "+".join(str(n) for _, n in lay.stages), k,
                                " ".join("%.3f" % x for x in busys[-1])), flush=True)
        both = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(both, op=dist.ReduceOp.MAX)
    except Exception as e:  # a dead or stalled peer: named, with how long it took
        return T.step_failed(a, rank, len(times) + 1, t_fail, e)

    # each stage's allreduce: its bytes and what the learner runs for it
    mine = {"stage": pr.s, "replica": pr.j, "grad_bytes": pr.grad_bytes, "learner": None}
    if pr.group is not None and backend is not None and callable(getattr(backend, "choice", None)):
        mine["learner"] = dict(backend.choice(pr.group, "allreduce", pr.grad_bytes),
                               bytes=pr.grad_bytes)
    every = [None] * world
    dist.all_gather_object(every, mine)
    if rank == 0:
        first = {e["stage"]: e for e in every if e["replica"] == 0}
        for s, st in enumerate(desc["stages"]):
            st["grad_bytes"] = first[s]["grad_bytes"]
        step_times = both.tolist()
        med = statistics.median(step_times[a.warmup:])
        kept = straggle[a.warmup:]
        strag = [statistics.median(x[i] for x in kept) for i in range(world)]
        t_target, s_target = T.smoothed_time_to(losses, step_times, a.target_loss)
        result = {
            "setup": a.backend, "backend": a.backend, "world_size": world,
            "model": {"preset": a.model, "layers": a.layers, "dim": a.dim, "heads": a.heads,
                      "ctx": a.ctx, "parameters": params},
            "global_batch": B, "shares": shares, "shares_mode": "plan" if a.plan_obj else "even",
            "shares_history": [[0, shares]], "micro_batch": lay.m,
            "rebalance_every": a.rebalance_every,
            "plan": a.plan, "predicted_step_time_s": a.plan_obj.get("predicted_step_time_s")
            if a.plan_obj else None, "balancer_predicted_s": None,
            "steps": a.steps, "warmup": a.warmup, "seed": a.seed, "lr": a.lr,
            "bucket_cap_mb": None, "threads": a.threads,
            "parallel": "pipeline", "torch": torch.__version__,
            "corpus": a.corpus, "corpus_bytes": len(data),
            "grad_bytes": grad_bytes, "bucket_bytes": [st["grad_bytes"] for st in desc["stages"]]
            if k > 1 else [], "tokens_per_step": tokens,
            "step_times_s": step_times, "losses": losses,
            "step_time_s": med, "tokens_per_s": tokens / med,
            "straggler_s": strag, "straggler_steps_s": straggle, "compute_steps_s": computes,
            "wait_steps_s": waits, "busy_steps_s": busys, "p2p_steps_s": p2ps,
            "target_loss": a.target_loss, "time_to_target_s": t_target, "steps_to_target": s_target,
            "learner": [first[s]["learner"] for s in range(P)] if k > 1 else None,
            "pipeline": desc,
        }
        busy_med = [statistics.median(x[i] for x in busys[a.warmup:]) for i in range(world)]
        print("train: %s, %d ranks, pipeline %s x %d (%s, %d micro-batches): median step %.3f s "
              "after %d warm-up steps, %.0f tokens/s, loss %.4f -> %.4f, median busy %s s%s"
              % (a.backend, world, "+".join(str(n) for _, n in lay.stages), k, SCHEDULE, M, med,
                 a.warmup, tokens / med, losses[0], losses[-1],
                 " ".join("%.3f" % x for x in busy_med),
                 ", loss %.3f reached at %.1f s (step %d)" % (a.target_loss, t_target, s_target)
                 if t_target is not None else ""), flush=True)
    return T.finish(a, result if rank == 0 else None)
