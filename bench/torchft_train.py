"""One replica group (one process) of the training job under torchft, for
bench/train-faults --peer torchft (bench/train-faults-torchft).

The model, corpus and per-step samples are the training job's
(examples/train/train.py --elastic): GPT of --model, byte windows of
/usr/share/common-licenses, step k's global batch of --global-batch
windows drawn from seed and k, split evenly over the replicas taking part
in the step. torchft runs it as its README's DDP example does: a
Manager (lighthouse quorum, gloo process group that it reconfigures on
every membership change, live recovery of a newcomer from a peer's state
over HTTP), torchft.DistributedDataParallel, and OptimizerWrapper (the
quorum starts in zero_grad; step commits only if every member's
collectives succeeded, else the step is redone).

Each step waits for its quorum before the forward pass to learn its share
(participating_rank, num_participants); torchft's own example overlaps the
quorum with the forward pass instead and keeps a fixed batch per replica.
The loss of each sample is scaled so that the average torchft's allreduce
takes over the participants is the mean over the global batch, as
autoinfra.elastic does; one more 8-byte allreduce per step gives the
global loss (autoinfra.elastic's step end has one too).

usage (environment TORCHFT_LIGHTHOUSE=http://HOST:PORT):
  torchft_train.py --replica I --replicas N --model small --global-batch B --steps S
                   --json FILE [--die-at STEP] [--timeout S] [--start-dir DIR]
--die-at: the process SIGKILLs itself at the start of that step (0-based,
after its quorum, before the forward pass) and writes FILE's .killed.json
first. --start-dir: every replica waits there for all N to have made their
Manager before the first quorum, so that the first quorum holds them all.
"""
import argparse
import datetime
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from autoinfra.train import job  # noqa: E402  (the training job's model and data)

from torchft import DistributedDataParallel, Manager, ProcessGroupGloo  # noqa: E402
from torchft.optim import OptimizerWrapper  # noqa: E402


class FtDDP(DistributedDataParallel):
    """torchft 0.2.0's DDP with a comm hook that survives a failed
    allreduce: its own hook asserts on the future of a failed or skipped
    allreduce (AssertionError / AttributeError '_fut', torchft issues 295
    and 304), which ends the process on the first peer failure. This one
    returns the bucket as it is then; the manager has recorded the error,
    so the step is not committed and is redone."""

    @staticmethod
    def _comm_hook(state, bucket):
        work = state.allreduce(bucket.buffer())
        ok = work.wait()
        fut = work.get_future()
        inner = getattr(fut, "_fut", None)
        if ok and inner is not None:
            return inner
        if type(fut) is torch.futures.Future:  # _DummyWork's, already completed
            return fut
        done = torch.futures.Future()
        done.set_result(bucket.buffer())
        return done


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--replica", type=int, required=True)
    p.add_argument("--replicas", type=int, required=True)
    p.add_argument("--model", default="small")
    p.add_argument("--global-batch", type=int, required=True)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--json", required=True)
    p.add_argument("--die-at", type=int)
    p.add_argument("--start-dir")
    p.add_argument("--joiner", action="store_true")
    a = p.parse_args()
    layers, dim, heads, ctx = job.PRESETS[a.model]
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    data = job.read_corpus(job.CORPUS_DIR)
    ds = job.Windows(data, ctx)
    model = job.GPT(layers, dim, heads, ctx)
    params = sum(q.numel() for q in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)

    def state_dict():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    t_made = time.time()
    manager = Manager(pg=ProcessGroupGloo(timeout=datetime.timedelta(seconds=a.timeout)),
                      load_state_dict=load_state_dict, state_dict=state_dict,
                      min_replica_size=1, rank=0, world_size=1,
                      store_addr="127.0.0.1", store_port=store.port, hostname="127.0.0.1",
                      replica_id="replica%d%s" % (a.replica, "-joiner" if a.joiner else ""),
                      timeout=datetime.timedelta(seconds=a.timeout),
                      quorum_timeout=datetime.timedelta(seconds=max(60.0, a.timeout)))
    ddp = FtDDP(manager, model)
    optim = OptimizerWrapper(manager, opt)
    if a.start_dir:
        open(os.path.join(a.start_dir, "ready%d" % a.replica), "w").close()
        end = time.time() + 300
        while len([n for n in os.listdir(a.start_dir) if n.startswith("ready")]) < a.replicas:
            if time.time() > end:
                sys.exit("torchft_train: the other replicas did not start within 300 s")
            time.sleep(0.05)
    records, events = [], []
    attempts, t_prev, last_quorum = 0, time.time(), None
    while manager.current_step() < a.steps:
        step = manager.current_step()
        optim.zero_grad()
        rank, n = manager.participating_rank(), manager.num_participants()
        q = (manager._quorum_id if hasattr(manager, "_quorum_id") else None, n)
        if q != last_quorum:
            events.append({"kind": "quorum", "step": step, "at": time.time(), "participants": n,
                           "participating": rank is not None})
            last_quorum = q
        if a.die_at is not None and step == a.die_at:
            root, ext = os.path.splitext(a.json)
            with open("%s.killed%s" % (root, ext), "w") as f:
                json.dump({"rank": a.replica, "step": step + 1, "killed_at": time.time()}, f)
            os.kill(os.getpid(), signal.SIGKILL)
        gb = a.global_batch
        g = torch.Generator().manual_seed(a.seed * 1000003 + step)
        idx_all = torch.randint(0, len(ds), (gb,), generator=g).tolist()
        if rank is None:
            # Healing: torchft zeroes this replica's gradients in the
            # allreduce; it still runs a forward and backward for DDP.
            lo, hi = 0, 1
            scale = 0.0
        else:
            base, extra = divmod(gb, n)
            lo = rank * base + min(rank, extra)
            hi = lo + base + (1 if rank < extra else 0)
            scale = n * (hi - lo) / gb
        idx = idx_all[lo:hi]
        x = torch.stack([ds[i][0] for i in idx])
        y = torch.stack([ds[i][1] for i in idx])
        logits = ddp(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        (loss * scale).backward()
        contrib = torch.tensor([loss.item() * (hi - lo) / gb * n if rank is not None else 0.0])
        manager.allreduce(contrib).wait()
        optim.step()
        attempts += 1
        if manager.current_step() > step:
            now = time.time()
            records.append({"step": manager.current_step(), "loss": contrib.item(), "world_size": n,
                            "done_at": now, "step_time_s": now - t_prev, "redone": attempts - 1})
            t_prev, attempts = now, 0
            if a.replica == 0:
                r = records[-1]
                print("step %3d/%d  loss %.4f  replicas %d  step %.3f s%s"
                      % (r["step"], a.steps, r["loss"], n, r["step_time_s"],
                         "  (redone %d)" % r["redone"] if r["redone"] else ""), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"setup": "torchft", "replica": a.replica, "joiner": a.joiner,
                       "model": {"preset": a.model, "layers": layers, "dim": dim, "heads": heads,
                                 "ctx": ctx, "parameters": params},
                       "global_batch": a.global_batch, "steps": a.steps, "seed": a.seed,
                       "made_at": t_made,
                       "first_step": records[0]["step"] if records else None,
                       "losses": [r["loss"] for r in records],
                       "world_sizes": [r["world_size"] for r in records],
                       "done_at": [r["done_at"] for r in records],
                       "step_times_s": [r["step_time_s"] for r in records],
                       "redone": [r["redone"] for r in records], "events": events}, f)
    manager.shutdown(wait=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
