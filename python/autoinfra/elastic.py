"""Data-parallel training that goes on through a lost rank and takes in
processes that join (docs/torch.md "Elastic training").

    import autoinfra.elastic as elastic
    el = elastic.Trainer(model, opt, global_batch=B)            # a member of the job
    el = elastic.Trainer(model, opt, global_batch=B, join=doors)  # a process that joins it
    while el.step < steps:
        rec = el.run_step(lambda ddp, step, lo, hi: loss_of(ddp, step, lo, hi))

run_step runs one step of the global batch: this rank takes samples lo..hi-1
of the step's B (even shares over the current ranks), fn returns the mean
loss of those samples through ddp (a DistributedDataParallel over the
current group), the helper scales it so that DDP's average is the mean over
the whole global batch, runs backward and the optimizer. When a collective
fails (an autoinfra.CommError whose status is a peer's failure, a stall or
a revoke; it names the dead peer), every survivor revokes the group,
shrinks it to the survivors (autoinfra.torch.shrink), agrees on the
last completed step (the state of a survivor that completed it is broadcast
to the others when they differ), rebuilds DDP on the new group and redoes
the interrupted step: at most that step's work is lost, and no checkpoint
is read. At every step's end one small allreduce gives the global mean loss and,
in the same call, rank 0's count of the processes waiting in join()
(autoinfra.torch.pending_joiners); when some wait, every member grows the
group by that many (autoinfra.torch.grow, as the library's ai_comm_admit
does, without a second collective per step), rank 0 broadcasts the
optimizer state and the step counter (DDP's construction broadcasts the
parameters), and the next step runs on the larger group.

Joining goes through the runtime's join door, not the job's c10d store
(which dies with the first rank's process): set AUTOINFRA_JOIN_DOOR
("host:port[,host:port...]") in every member's environment and pass the
same list as join=; whichever process is rank 0 holds the door, a survivor
that becomes rank 0 after a shrink opens it again, and a waiting joiner
whose door closed retries. Any rank may die, rank 0 included, and the job
goes on and takes joiners after it.

Limits: a rank that fails outside a collective (in its own
compute) is found only by the others' next collective; batches must be a
function of the step (fn gets the step), so that a redone step sees the
same samples.
"""
import gc
import io
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from . import torch as at

# Attempts at a shrink before giving up: each further failure during one
# costs one.
_SHRINK_TRIES = 4


def shares(global_batch, nranks):
    """Even shares of global_batch over nranks (autoinfra.torch.even_shares):
    [(lo, hi)] per rank."""
    out, lo = [], 0
    for b in at.even_shares(global_batch, nranks):
        out.append((lo, lo + b))
        lo += b
    return out


class Trainer:
    def __init__(self, model, optimizer, global_batch, group=None, join=None, timeout=60.0,
                 ddp_kwargs=None, log=None):
        self.model, self.opt = model, optimizer
        self.global_batch = int(global_batch)
        self.timeout = float(timeout)
        self.ddp_kwargs = dict(ddp_kwargs or {})
        self.log = log or (lambda msg: None)
        self.step = 0
        self.events = []
        self.ddp = None
        if join is not None:
            t0 = time.time()
            self.group = at.join(join, timeout=self.timeout)
            t_in = time.time()
            self._sync_state(receive=True)
            self._build()
            self.events.append({"kind": "joined", "step": self.step, "at": t0,
                                "admitted_at": t_in, "ready_at": time.time(),
                                "world_size": self.size, "rank": self.rank})
        else:
            self.group = group if group is not None else dist.distributed_c10d._get_default_group()
            self._build()

    @property
    def rank(self):
        return self.group.rank()

    @property
    def size(self):
        return self.group.size()

    def share(self):
        return shares(self.global_batch, self.size)[self.rank]

    def _build(self):
        if self.size > self.global_batch:
            raise RuntimeError("elastic: %d ranks but a global batch of %d: a rank would have "
                               "no samples" % (self.size, self.global_batch))
        self.ddp = DDP(self.model, process_group=self.group, **self.ddp_kwargs)

    def _drop_ddp(self):
        # The old reducer's autograd hooks go with it; nothing may keep it.
        self.ddp = None
        gc.collect()

    def _allreduce(self, t, op=dist.ReduceOp.SUM):
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        self.group.allreduce([t], opts).wait()
        return t

    def _broadcast(self, t, src):
        opts = dist.BroadcastOptions()
        opts.rootRank = src
        self.group.broadcast([t], opts).wait()
        return t

    def _sync_state(self, receive, src=0, params=False):
        """The optimizer's state and the step counter from rank src, which
        ranks with receive take (the parameters too with params; otherwise
        DDP's construction broadcasts them from rank 0)."""
        n = torch.zeros(1, dtype=torch.int64)
        if self.rank == src:
            buf = io.BytesIO()
            torch.save({"opt": self.opt.state_dict(), "step": self.step,
                        "model": self.model.state_dict() if params else None}, buf)
            data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
            n[0] = data.numel()
        self._broadcast(n, src)
        if self.rank != src:
            data = torch.empty(int(n[0]), dtype=torch.uint8)
        self._broadcast(data, src)
        if self.rank != src and receive:
            state = torch.load(io.BytesIO(data.numpy().tobytes()))
            self.opt.load_state_dict(state["opt"])
            if state["model"] is not None:
                self.model.load_state_dict(state["model"])
            self.step = state["step"]

    def _failure(self, e):
        """The CommError behind e if it is a failure of the group (a peer died
        or stalled, the group was revoked: autoinfra.torch.comm_error), else
        None: e is then not the runtime's to recover from."""
        return at.comm_error(e, self.group)

    def _recover(self, error):
        """Shrink to the survivors after error (a CommError) and make them agree."""
        t_fail = time.time()
        old_size = self.size
        failed = []
        self._drop_ddp()
        for attempt in range(_SHRINK_TRIES):
            old = self.group
            try:
                self.group = at.shrink(old)
                failed = at.failed(old)
                at.forget(old)
                del old
                gc.collect()
                # Agree on the last completed step: a survivor that finished
                # the interrupted step's optimizer step hands its state on.
                t = torch.tensor([self.step, -self.step], dtype=torch.int64)
                self._allreduce(t, dist.ReduceOp.MAX)
                if int(t[0]) != -int(t[1]):
                    me = torch.tensor([self.rank if self.step == int(t[0]) else self.size],
                                      dtype=torch.int64)
                    self._allreduce(me, dist.ReduceOp.MIN)
                    self._sync_state(receive=self.step != int(t[0]), src=int(me[0]), params=True)
                self.opt.zero_grad(set_to_none=True)
                self._build()
                break
            except RuntimeError as e:
                if self._failure(e) is None or attempt == _SHRINK_TRIES - 1:
                    raise
                error = self._failure(e)
                self._drop_ddp()
        ev = {"kind": "shrink", "step": self.step, "at": t_fail, "ready_at": time.time(),
              "from_size": old_size, "world_size": self.size, "failed": failed,
              "error": (str(error).strip().splitlines() or [""])[0],
              "status": error.status_name, "peer": error.peer}
        self.events.append(ev)
        self.log("elastic: step %d: %s; %d -> %d ranks in %.2f s" % (
            self.step + 1, ev["error"], old_size, self.size, ev["ready_at"] - t_fail))

    def _admit(self, joiners):
        """joiners processes waiting in join() (rank 0's count, which every
        member learnt in the step end's allreduce) come in
        (autoinfra.torch.grow); rank 0 hands them the optimizer state and
        the step counter."""
        t0 = time.time()
        old, old_size = self.group, self.size
        try:
            new = at.grow(old, joiners, timeout=self.timeout)
            joined = joiners
            self._drop_ddp()
            self.group = new
            self._sync_state(receive=False)
            self._build()
        except RuntimeError as e:
            error = at.comm_error(e, self.group) or at.comm_error(e, old)
            if error is None:
                raise
            self._drop_ddp()
            self.group = old
            if at.failure(old) is None:
                # The joiners did not come (or one failed): go on without them.
                self.events.append({"kind": "grow-failed", "step": self.step, "at": t0,
                                    "error": (str(error).strip().splitlines() or [""])[0],
                                    "status": error.status_name})
                try:
                    self._build()
                    return
                except RuntimeError as e2:
                    error = self._failure(e2)
                    if error is None:
                        raise
            self._recover(error)  # a member failed: the survivors go on
            return
        at.forget(old)
        del old
        gc.collect()
        self.events.append({"kind": "grow", "step": self.step, "at": t0, "ready_at": time.time(),
                            "from_size": old_size, "world_size": self.size})
        self.log("elastic: step %d: %d joined; %d -> %d ranks in %.2f s" % (
            self.step, joined, old_size, self.size, time.time() - t0))

    def run_step(self, fn):
        """One step (see the module's text). Returns {step, loss (global mean),
        world_size, done_at (time.time()), redone (attempts lost)}."""
        redone = 0
        while True:
            lo, hi = self.share()
            size = self.size
            error = None
            try:
                self.opt.zero_grad(set_to_none=True)
                loss = fn(self.ddp, self.step, lo, hi)
                (loss * (size * (hi - lo) / self.global_batch)).backward()
                self.opt.step()
                local = float(loss.detach())
                del loss
            except RuntimeError as e:
                error = self._failure(e)
                if error is None:
                    raise
            if error is None:
                break
            loss = None
            redone += 1
            self._recover(error)
        self.step += 1
        done_at = time.time()
        # The step's end: one allreduce gives the global mean loss and rank
        # 0's count of newcomers at the join door (a count, not a second
        # collective: a member that died fails it before anyone grows).
        joiners = 0
        try:
            waiting = at.pending_joiners(self.group) if self.rank == 0 else 0
            t = torch.tensor([local * (hi - lo) / self.global_batch, float(waiting)],
                             dtype=torch.float64)
            self._allreduce(t)
            mean = float(t[0])
            joiners = int(round(float(t[1])))
        except RuntimeError as e:
            error = self._failure(e)
            if error is None:
                raise
            # The step itself completed here; the next one runs on the survivors.
            mean = local
            self._recover(error)
        rec = {"step": self.step, "loss": mean, "world_size": size, "done_at": done_at,
               "redone": redone}
        if error is None and joiners > 0:
            self._admit(joiners)
        return rec
