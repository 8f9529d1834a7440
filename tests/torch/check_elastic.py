"""The elastic training helper (python/autoinfra/elastic.py) on local ranks,
run by ctest (plugins/torch/CMakeLists.txt) with /usr/bin/python3, and with
torch 2's Python (plugins/torch/torch2.cmake):

    check_elastic.py N [last|rank0|launch]

N ranks train a small model through autoinfra.elastic; rank N-1 SIGKILLs
itself in the middle of step KILL; as soon as it is gone the parent starts a
new process that joins the job (through the join door, AUTOINFRA_JOIN_DOOR).
Checked: the survivors redo at most the interrupted step, train on N-1 ranks
and then on N again, their parameters are bit-identical after every step
(and the joiner's from its first step on), every step's loss equals that of
a one-process reference on the same global batch (to floating-point
rounding), and all of it within LIMIT_S.

rank0: the process of rank 0 (which hosts the job's c10d store and holds
the join door) dies in step KILL instead; once a joiner is in, the new rank
0 dies too, and a second joiner comes: the job goes on through both, the
door reopened by each new rank 0, and ends on N ranks.

launch: the job is started by `autoinfra launch --elastic --restarts 1`
($AUTOINFRA_BIN); rank 0 dies in step KILL and the launcher starts the
process that joins (it finds AUTOINFRA_JOIN_ADDR set); the launcher exits 0.
"""
import datetime
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from autoinfra.ports import rendezvous_port  # noqa: E402

KILL = 4            # the step (0-based) in which the last rank dies
AFTER_GROW = 3      # steps on the full group again before the run ends
MIN_STEPS = 10
MAX_STEPS = 3000    # a bound, should the joiner never come
BATCH = 12          # global batch: even shares on 2 and 3 ranks
LIMIT_S = float(os.environ.get("AUTOINFRA_ELASTIC_LIMIT_S", "50"))  # torch 2's import is slower
LIMIT_RANK0_S = 2 * LIMIT_S
TIMEOUT_S = 10


def model_and_opt():
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def batch(step):
    import torch
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, 16, generator=g)
    return x, torch.randint(0, 4, (BATCH,), generator=g)


def loss_fn(model, step, lo, hi):
    import torch.nn.functional as F
    x, y = batch(step)
    return F.cross_entropy(model(x[lo:hi]), y[lo:hi])


def digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def rank_main(role, n, mode, out):
    import torch
    import torch.distributed as dist
    import autoinfra.elastic as elastic
    torch.set_num_threads(1)
    model, opt = model_and_opt()
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    if mode == "launch" and os.environ.get("AUTOINFRA_JOIN_ADDR"):
        # autoinfra launch --restarts started this process in a dead rank's place.
        role, out = "join", os.path.join(out, "j0.json")
        os.environ.update(JOIN_ADDR=os.environ["AUTOINFRA_JOIN_ADDR"], JOIN_INDEX="1")
    elif mode == "launch":
        out = os.path.join(out, "r%s.json" % os.environ["RANK"])
    if role == "join":
        el = elastic.Trainer(model, opt, BATCH, join=os.environ["JOIN_ADDR"], timeout=TIMEOUT_S)
    else:
        dist.init_process_group("autoinfra", init_method="env://", timeout=timeout)
        el = elastic.Trainer(model, opt, BATCH, timeout=TIMEOUT_S)
    me = int(os.environ.get("RANK", "-1"))
    # How many joiners the job takes in all; this process saw the first
    # join_index of them come in before it.
    want_grows = 2 if mode == "rank0" else 1
    join_index = int(os.environ.get("JOIN_INDEX", "0"))

    def grows():
        return join_index + sum(e["kind"] == "grow" for e in el.events)

    def fn(ddp, step, lo, hi):
        if mode == "last" and me == n - 1 and step == KILL:
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "launch" and me == 0 and step == KILL and join_index == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "rank0" and el.rank == 0 and ((me == 0 and step == KILL) or
                                                  (me == 1 and grows() == 1)):
            os.kill(os.getpid(), signal.SIGKILL)
        return loss_fn(ddp, step, lo, hi)

    steps, last_grow = [], None
    while el.step < MAX_STEPS:
        rec = el.run_step(fn)
        rec["digest"] = digest(model)
        steps.append(rec)
        if last_grow is None and grows() == want_grows:
            last_grow = next(e["step"] for e in reversed(el.events)
                             if e["kind"] in ("grow", "joined"))
        if last_grow is not None and el.step >= max(MIN_STEPS, last_grow + AFTER_GROW):
            break
        time.sleep(0.01)
    with open(out, "w") as f:
        json.dump({"role": role, "rank": me, "steps": steps, "events": el.events,
                   "final_size": el.size}, f)


def reference(steps):
    """Losses of one process training on the whole global batch."""
    import torch
    model, opt = model_and_opt()
    out = []
    for s in range(steps):
        opt.zero_grad()
        loss = loss_fn(model, s, 0, BATCH)
        loss.backward()
        opt.step()
        out.append(float(loss))
    return out


def parent(n, mode, work):
    door = "127.0.0.1:%d" % rendezvous_port()
    env = dict(os.environ, WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(rendezvous_port()), OMP_NUM_THREADS="1", AUTOINFRA_JOIN_DOOR=door)
    procs = [subprocess.Popen([sys.executable, __file__, "member", str(n), mode, f"{work}/r{r}.json"],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r))) for r in range(n)]
    # The processes whose death calls in a joiner, in order.
    victims = [procs[-1]] if mode == "last" else [procs[0], procs[1]]
    end = time.time() + (LIMIT_S if mode == "last" else LIMIT_RANK0_S)
    joiners = []
    try:
        while time.time() < end:
            k = len(joiners)
            if k < len(victims) and victims[k].poll() is not None:
                joiners.append(subprocess.Popen(
                    [sys.executable, __file__, "join", str(n), mode, f"{work}/j{k}.json"],
                    env=dict(os.environ, OMP_NUM_THREADS="1", JOIN_ADDR=door,
                             AUTOINFRA_JOIN_DOOR=door, JOIN_INDEX=str(k + 1))))
            if len(joiners) == len(victims) and all(p.poll() is not None for p in procs + joiners):
                break
            time.sleep(0.05)
    finally:
        for p in procs + joiners:
            if p.poll() is None:
                p.kill()
    codes = [p.wait() for p in procs] + [p.wait() for p in joiners]
    want = ([0] * (n - 1) + [-9, 0]) if mode == "last" else ([-9, -9] + [0] * (n - 2) + [0, 0])
    if codes != want:
        return fail(f"exit codes {codes}, want {want} (members, then the joiners)")
    alive = [r for r in range(n) if codes[r] == 0]
    return check(n, mode, work, alive, len(victims))


def parent_launch(n, work):
    """The job started by `autoinfra launch --elastic --restarts 1`: rank 0
    dies, the launcher starts its replacement, which joins."""
    cmd = [os.environ["AUTOINFRA_BIN"], "launch", "-n", str(n), "--elastic", "--restarts", "1",
           "--timeout", str(LIMIT_S), "--bind", "none", "--",
           sys.executable, __file__, "member", str(n), "launch", work]
    p = subprocess.run(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"), stderr=subprocess.PIPE,
                       text=True, timeout=LIMIT_S + 30)
    sys.stderr.write(p.stderr)
    if p.returncode != 0:
        return fail(f"autoinfra launch --elastic exited {p.returncode}, want 0")
    if "started pid" not in p.stderr or "in place of rank 0" not in p.stderr:
        return fail("the launcher did not say it started a replacement for rank 0")
    return check(n, "launch", work, list(range(1, n)), 1)


def check(n, mode, work, alive, rounds):
    from autoinfra import errors
    failure_names = {errors.STATUS_NAMES[s] for s in errors.FAILURES}
    named = {}  # shrink k -> the peers the survivors' errors named
    res = ([json.load(open(f"{work}/r{r}.json")) for r in alive] +
           [json.load(open(f"{work}/j{k}.json")) for k in range(rounds)])
    for r in res[:len(alive)]:
        sizes = [s["world_size"] for s in r["steps"]]
        if sizes[:KILL] != [n] * KILL or n - 1 not in sizes or sizes[-1] != n:
            return fail(f"rank {r['rank']}: world sizes {sizes}: want {n}, then {n - 1}, then {n}")
        redone = sum(s["redone"] for s in r["steps"])
        if redone > rounds:
            return fail(f"rank {r['rank']}: {redone} step attempts lost, want at most {rounds}")
        kinds = [e["kind"] for e in r["events"]]
        if kinds != ["shrink", "grow"] * rounds:
            return fail(f"rank {r['rank']}: events {kinds}, want {rounds} x (a shrink, then a grow)")
        want_failed = [[n - 1]] if mode == "last" else [[0]] * rounds
        got_failed = [e["failed"] for e in r["events"] if e["kind"] == "shrink"]
        if got_failed != want_failed:
            return fail(f"rank {r['rank']}: the shrinks' failed sets {got_failed}, want {want_failed}")
        # Each shrink followed a typed failure (autoinfra.CommError): a
        # failure's status, and the peer the dead rank where it was known.
        for k, e in enumerate(e for e in r["events"] if e["kind"] == "shrink"):
            if e["status"] not in failure_names or \
                    e["peer"] not in (-1, want_failed[k][0]):
                return fail(f"rank {r['rank']}: shrink {k} after {e['status']} naming peer "
                            f"{e['peer']}: want a failure's status and peer {want_failed[k][0]}")
            named.setdefault(k, set()).add(e["peer"])
    for k, peers in named.items():
        if want_failed[k][0] not in peers:
            return fail(f"shrink {k}: no survivor's CommError named the dead rank "
                        f"{want_failed[k][0]} (peers {sorted(peers)})")
    by_step = {}
    for r in res:
        for s in r["steps"]:
            by_step.setdefault(s["step"], set()).add(s["digest"])
    split = [k for k, v in by_step.items() if len(v) != 1]
    if split:
        return fail(f"parameters differ across ranks after steps {sorted(split)[:5]}")
    for j in res[len(alive):]:
        if not j["steps"] or j["final_size"] != n or j["steps"][-1]["step"] != res[0]["steps"][-1]["step"]:
            return fail(f"a joiner: {len(j['steps'])} steps, final size {j['final_size']}")
    ref = reference(len(res[0]["steps"]))
    for s in res[0]["steps"]:
        want_loss = ref[s["step"] - 1]
        if abs(s["loss"] - want_loss) > 1e-5 * max(1.0, abs(want_loss)):
            return fail(f"step {s['step']} on {s['world_size']} ranks: loss {s['loss']!r}, the "
                        f"one-process reference {want_loss!r}")
    ev = res[0]["events"]
    what = {"last": "rank %d" % (n - 1), "rank0": "rank 0, then the new rank 0,",
            "launch": "rank 0 (autoinfra launch --elastic --restarts 1)"}[mode]
    print(f"elastic on {n} ranks ({mode}): ok: {len(res[0]['steps'])} steps; {what} killed; " +
          "; ".join(f"shrink to {n - 1} after {a['status']} (peer {a['peer']}) in "
                    f"{a['ready_at'] - a['at']:.2f} s at step {a['step'] + 1}, "
                    f"grown back at step {b['step']} in {b['ready_at'] - b['at']:.2f} s"
                    for a, b in zip(ev[0::2], ev[1::2])) +
          "; parameters identical, losses as the reference")
    return 0


def fail(msg):
    print("elastic: FAILED: " + msg, file=sys.stderr)
    return 1


if __name__ == "__main__":
    if len(sys.argv) in (2, 3):
        mode = sys.argv[2] if len(sys.argv) == 3 else "last"
        if mode not in ("last", "rank0", "launch"):
            sys.exit(f"check_elastic.py: mode {mode!r}: want last, rank0 or launch")
        work = tempfile.mkdtemp(prefix="autoinfra-elastic-test.")
        try:
            rc = (parent_launch(int(sys.argv[1]), work) if mode == "launch"
                  else parent(int(sys.argv[1]), mode, work))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        sys.exit(rc)
    rank_main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
