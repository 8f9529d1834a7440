"""The elastic training helper (python/autoinfra/elastic.py) on local ranks,
run by ctest (plugins/torch/CMakeLists.txt) with /usr/bin/python3, and with
torch 2's Python (plugins/torch/torch2.cmake):

    check_elastic.py N

N ranks train a small model through autoinfra.elastic; rank N-1 SIGKILLs
itself in the middle of step KILL; as soon as it is gone the parent starts a
new process that joins the job. Checked: the survivors redo at most the
interrupted step, train on N-1 ranks and then on N again, their parameters
are bit-identical after every step (and the joiner's from its first step
on), every step's loss equals that of a one-process reference on the same
global batch (to floating-point rounding), and all of it within LIMIT_S.
"""
import datetime
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

KILL = 4            # the step (0-based) in which the last rank dies
AFTER_GROW = 3      # steps on the full group again before the run ends
MIN_STEPS = 10
MAX_STEPS = 3000    # a bound, should the joiner never come
BATCH = 12          # global batch: even shares on 2 and 3 ranks
LIMIT_S = float(os.environ.get("AUTOINFRA_ELASTIC_LIMIT_S", "50"))  # torch 2's import is slower
TIMEOUT_S = 10


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def rank_main(role, n, out):
    import torch
    import torch.distributed as dist
    import autoinfra.elastic as elastic
    torch.set_num_threads(1)
    model, opt = model_and_opt()
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    if role == "join":
        el = elastic.Trainer(model, opt, BATCH, join=os.environ["JOIN_ADDR"], timeout=TIMEOUT_S)
    else:
        dist.init_process_group("autoinfra", init_method="env://", timeout=timeout)
        el = elastic.Trainer(model, opt, BATCH, timeout=TIMEOUT_S)
    me = int(os.environ.get("RANK", "-1"))

    def fn(ddp, step, lo, hi):
        if me == n - 1 and step == KILL:
            os.kill(os.getpid(), signal.SIGKILL)
        return loss_fn(ddp, step, lo, hi)

    steps, grown_at = [], None
    while el.step < MAX_STEPS:
        rec = el.run_step(fn)
        rec["digest"] = digest(model)
        steps.append(rec)
        if grown_at is None:
            grown_at = next((e["step"] for e in el.events if e["kind"] in ("grow", "joined")), None)
        if grown_at is not None and el.step >= max(MIN_STEPS, grown_at + AFTER_GROW):
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


def parent(n):
    work = tempfile.mkdtemp(prefix="autoinfra-elastic-test.")
    env = dict(os.environ, WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, __file__, "member", str(n), f"{work}/r{r}.json"],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r))) for r in range(n)]
    end = time.time() + LIMIT_S
    joiner = None
    try:
        while time.time() < end:
            if joiner is None and procs[-1].poll() is not None:
                joiner = subprocess.Popen([sys.executable, __file__, "join", str(n), f"{work}/j.json"],
                                          env=dict(os.environ, OMP_NUM_THREADS="1",
                                                   JOIN_ADDR="127.0.0.1:" + env["MASTER_PORT"]))
            if joiner is not None and all(p.poll() is not None for p in procs + [joiner]):
                break
            time.sleep(0.05)
    finally:
        for p in procs + ([joiner] if joiner else []):
            if p.poll() is None:
                p.kill()
    codes = [p.wait() for p in procs] + [joiner.wait() if joiner else None]
    want = [0] * (n - 1) + [-9, 0]
    if codes != want:
        return fail(f"exit codes {codes}, want {want} (members, then the joiner)")
    res = [json.load(open(f"{work}/r{r}.json")) for r in range(n - 1)] + [json.load(open(f"{work}/j.json"))]
    for r in res[:-1]:
        sizes = [s["world_size"] for s in r["steps"]]
        if sizes[:KILL] != [n] * KILL or n - 1 not in sizes or sizes[-1] != n:
            return fail(f"rank {r['rank']}: world sizes {sizes}: want {n}, then {n - 1}, then {n}")
        redone = sum(s["redone"] for s in r["steps"])
        if redone > 1:
            return fail(f"rank {r['rank']}: {redone} step attempts lost, want at most 1")
        kinds = [e["kind"] for e in r["events"]]
        if kinds != ["shrink", "grow"]:
            return fail(f"rank {r['rank']}: events {kinds}, want a shrink, then a grow")
        if r["events"][0]["failed"] != [n - 1]:
            return fail(f"rank {r['rank']}: the shrink's failed set {r['events'][0]['failed']}, "
                        f"want [{n - 1}]")
    by_step = {}
    for r in res:
        for s in r["steps"]:
            by_step.setdefault(s["step"], set()).add(s["digest"])
    split = [k for k, v in by_step.items() if len(v) != 1]
    if split:
        return fail(f"parameters differ across ranks after steps {sorted(split)[:5]}")
    j = res[-1]
    if not j["steps"] or j["final_size"] != n or j["steps"][-1]["step"] != res[0]["steps"][-1]["step"]:
        return fail(f"the joiner: {len(j['steps'])} steps, final size {j['final_size']}")
    ref = reference(len(res[0]["steps"]))
    for s in res[0]["steps"]:
        want_loss = ref[s["step"] - 1]
        if abs(s["loss"] - want_loss) > 1e-5 * max(1.0, abs(want_loss)):
            return fail(f"step {s['step']} on {s['world_size']} ranks: loss {s['loss']!r}, the "
                        f"one-process reference {want_loss!r}")
    shrink = res[0]["events"][0]
    print(f"elastic on {n} ranks: ok: {len(res[0]['steps'])} steps; shrink to {n - 1} in "
          f"{shrink['ready_at'] - shrink['at']:.2f} s at step {shrink['step'] + 1}, joined back "
          f"at step {j['events'][0]['step']}; parameters identical, losses as the reference")
    return 0


def fail(msg):
    print("elastic: FAILED: " + msg, file=sys.stderr)
    return 1


if __name__ == "__main__":
    if len(sys.argv) == 2:
        sys.exit(parent(int(sys.argv[1])))
    rank_main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
