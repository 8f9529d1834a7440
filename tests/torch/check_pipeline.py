"""Checks of the training job's pipelines (autoinfra.train.pipeline,
docs/train.md "Pipelines"), run by ctest with /usr/bin/python3:

    check_pipeline.py schedule  the 1F1B schedule of 2..6 stages and 1..10
                                micro-batches run against itself with every
                                send waiting for its receiver: no deadlock,
                                every send meets the receive of the same
                                micro-batch, the makespan of 1F1B
                                ((M + P - 1) passes at equal stages) and at
                                most min(P - s, M) live activations on stage s
    check_pipeline.py exact N   N (2 or 4) local ranks on the autoinfra
                                backend train two SGD steps through pipelines
                                with uneven blocks per stage, uneven replica
                                shares and micro-batches of uneven size; every
                                step's loss and the parameters after two steps
                                must equal, within TOL, those of one process
                                that trains the whole model on the whole
                                global batch, and the replicas of a stage must
                                be bit-identical
    check_pipeline.py job       autoinfra.train --pipeline on 2 ranks against the
                                data-parallel job on 2 ranks (same seed,
                                corpus, global batch): the same losses, the
                                JSON's fields; bad flags and plans refused
                                with exit 2 naming the flag or field
"""
import contextlib
import importlib
import io
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
PYTHON = os.path.abspath(os.path.join(ROOT, "python"))
sys.path.insert(0, PYTHON)
sys.path.insert(0, HERE)
from check_shares import corpus, run_ranks  # noqa: E402 (the same corpus and ranks)

# float32 gradients summed in another order (micro-batch by micro-batch,
# then over the replicas, against one batch of all B windows) differ by a
# few ulps; after two SGD steps of lr 0.5 the parameters (of size ~0.1-1)
# differ by ~1e-8, the losses (~5) by a few ulps (LOSS_RTOL relative). Weighting every micro-batch
# alike (the plain mean of the micro-batches' mean losses, wrong for
# micro-batches of uneven size) moves them by ~1e-3: the check asserts
# that this is 100 x TOL away, so the tolerance discriminates.
TOL = 1e-6
LOSS_RTOL = 1e-6
SHAPE = dict(layers=5, dim=32, heads=4, ctx=16)
STEPS, LR = 2, 0.5
# per world size: (stages: (ranks by replica, blocks), replica shares, micro-batch)
CONFIGS = {
    2: [([([0], 4), ([1], 1)], [7], 2)],
    4: [([([3, 0], 2), ([1, 2], 3)], [6, 3], 2),
        ([([0], 2), ([1], 1), ([2], 1), ([3], 1)], [7], 2)],
}


def load(name):
    """autoinfra.train's module: "train" (the job) or "pipeline"."""
    return importlib.import_module("autoinfra.train." + ("job" if name == "train" else name))


def model(train):
    import torch
    torch.manual_seed(3)
    return train.GPT(SHAPE["layers"], SHAPE["dim"], SHAPE["heads"], SHAPE["ctx"])


def flat(params):
    import torch
    return torch.cat([p.detach().reshape(-1) for p in params])


def reference(train, B, parts_of=None):
    """One process, the whole model: SGD on the mean loss of all B windows
    (parts_of None), or on the plain mean of the mean losses of the parts
    parts_of(idx) gives. Returns (losses, parameters)."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    m = model(train)
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    order = train.GlobalOrder(train.Windows(corpus(), SHAPE["ctx"]), 11)
    losses = []
    for _ in range(STEPS):
        idx = order.next(B)
        opt.zero_grad()
        parts = [idx] if parts_of is None else parts_of(idx)
        total = 0.0
        for part in parts:
            x, y = order.batch(part)
            out = m(x)
            loss = F.cross_entropy(out.view(-1, out.shape[-1]), y.view(-1))
            total += loss.item() * len(part) / B
            (loss / len(parts)).backward()
        losses.append(total)
        opt.step()
    return losses, flat(m.parameters())


def rank_main(out):
    import torch
    import torch.distributed as dist
    import autoinfra.torch  # noqa: F401 (registers the backend)
    torch.set_num_threads(1)
    train, pipeline = load("train"), load("pipeline")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("autoinfra", rank=rank, world_size=world)
    for c, (stages, shares, m) in enumerate(CONFIGS[world]):
        lay = pipeline.Layout(stages, shares, m)
        pr = pipeline.PipeRank(model(train), lay, rank, SHAPE["ctx"], SHAPE["dim"])
        opt = torch.optim.SGD(pr.params, lr=LR)
        order = train.GlobalOrder(train.Windows(corpus(), SHAPE["ctx"]), 11)
        losses = []
        for _ in range(STEPS):
            idx = order.next(lay.B)
            opt.zero_grad(set_to_none=True)
            contrib = pr.step(order, idx)[0]
            opt.step()
            t = torch.tensor([contrib], dtype=torch.float64)
            dist.all_reduce(t)
            losses.append(t.item())
        torch.save({"stage": pr.s, "replica": pr.j, "params": flat(pr.params), "losses": losses},
                   os.path.join(out, "c%d-r%d.pt" % (c, rank)))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def exact(world):
    import torch
    world = int(world)
    with tempfile.TemporaryDirectory(prefix="autoinfra-pipeline-") as out:
        codes = run_ranks(world, [sys.executable, __file__, "rank", out], 90)
        if codes != [0] * world:
            print("exact: rank exit codes %s" % codes, file=sys.stderr)
            return 1
        train, pipeline = load("train"), load("pipeline")
        bad = 0
        for c, (stages, shares, m) in enumerate(CONFIGS[world]):
            lay = pipeline.Layout(stages, shares, m)
            ref_losses, ref = reference(train, lay.B)

            def micro_parts(idx):
                parts, o = [], 0
                for j in range(lay.k):
                    for n in lay.micro(j):
                        parts.append(idx[o:o + n])
                        o += n
                return parts
            _, naive = reference(train, lay.B, micro_parts)
            got = [torch.load(os.path.join(out, "c%d-r%d.pt" % (c, r))) for r in range(world)]
            same, diff = True, 0.0
            for j in range(lay.k):
                mine = sorted((g for g in got if g["replica"] == j), key=lambda g: g["stage"])
                whole = torch.cat([g["params"] for g in mine])
                diff = max(diff, (whole - ref).abs().max().item())
                for g in got:
                    twin = next(h for h in got if h["stage"] == g["stage"] and h["replica"] == 0)
                    same = same and torch.equal(g["params"], twin["params"])
            ldiff = max(abs(a - b) / b for g in got for a, b in zip(g["losses"], ref_losses))
            off = (naive - ref).abs().max().item()
            print("%d ranks, blocks %s x %d replicas, shares %s, micro-batches %s: replicas "
                  "bit-identical %s; max |param - one-process reference| %.2e (tolerance %.0e), "
                  "relative loss error %.2e (tolerance %.0e); weighting micro-batches alike would be off by %.2e"
                  % (world, "+".join(str(n) for _, n in stages), lay.k, shares,
                     [lay.micro(j) for j in range(lay.k)], same, diff, TOL, ldiff, LOSS_RTOL, off))
            if not same or not diff <= TOL or not ldiff <= LOSS_RTOL or not off > 100 * TOL:
                bad = 1
        return bad


def schedule():
    pipeline = load("pipeline")
    for P in range(2, 7):
        for M in range(1, 11):
            for s in range(P):
                ops = pipeline.schedule(P, s, M)
                for op in ("F", "B") + (("RF", "SB") if s else ()) + (("SF", "RB") if s < P - 1 else ()):
                    assert sorted(i for o, i in ops if o == op) == list(range(M)), (P, s, M, op)
                for i in range(M):
                    assert ops.index(("F", i)) < ops.index(("B", i)), (P, s, M, i)
            span, peak = pipeline.simulate(P, M)
            assert span == (M + P - 1) * 3.0, (P, M, span)
            assert all(peak[s] <= min(P - s, M) for s in range(P)), (P, M, peak)
    # stages of unequal speed still complete, no faster than the slowest's work
    span, _ = pipeline.simulate(3, 4, [(1, 2), (2, 4), (1, 2)])
    assert span >= 4 * 6, span
    print("schedule: 2..6 stages x 1..10 micro-batches complete with rendezvous sends, makespan "
          "(M+P-1) passes, live activations <= min(P-s, M)")
    return 0


def job():
    py = sys.executable
    common = ["--model", "tiny", "--layers", "3", "--steps", "3", "--warmup", "1",
              "--global-batch", "6", "--quiet", "--lr", "0.01"]
    with tempfile.TemporaryDirectory(prefix="autoinfra-pipejob-") as out:
        pj, dj = os.path.join(out, "pipe.json"), os.path.join(out, "dp.json")
        codes = run_ranks(2, [py, "-m", "autoinfra.train", "--pipeline", "2,1", "--micro-batches", "3", "--json", pj]
                          + common, 90)
        codes += run_ranks(2, [py, "-m", "autoinfra.train", "--json", dj] + common, 90)
        if codes != [0] * 4:
            print("job: exit codes %s" % codes, file=sys.stderr)
            return 1
        with open(pj) as f:
            p = json.load(f)
        with open(dj) as f:
            d = json.load(f)
        missing = sorted(set(d) - set(p))
        diff = max(abs(a - b) for a, b in zip(p["losses"], d["losses"]))
        print("job: pipeline 2+1 losses %s, data parallel %s (max diff %.1e); fields missing from "
              "the pipeline's JSON: %s" % (["%.5f" % x for x in p["losses"]],
                                           ["%.5f" % x for x in d["losses"]], diff, missing or "none"))
        pipe = p["pipeline"]
        ok = (not missing and diff <= 1e-4 and len(p["losses"]) == 3 and p["step_time_s"] > 0
              and pipe["schedule"] == "1F1B" and pipe["micro_batches"] == 3
              and [s["layers"] for s in pipe["stages"]] == [2, 1] and p["shares"] == [6, 0])
        # bad input: exit 2 and a message naming the flag or field
        plan = {"kind": "train-plan", "version": 1, "fingerprint": "0", "ranks": 2,
                "global_batch": 6, "shares": [6, 0], "micro_batch": 2, "bucket_cap_mb": 25,
                "pipeline": {"stages": [{"ranks": [0], "layers": 2}, {"ranks": [1], "layers": 1}],
                             "micro_batches": 3}, "predicted_step_time_s": 1, "explain": []}

        def bad_plan(**kw):
            q = json.loads(json.dumps(plan))
            for k, v in kw.items():
                if k.startswith("pipe_"):
                    q["pipeline"][k[5:]] = v
                else:
                    q[k] = v
            path = os.path.join(out, "plan-%d.json" % len(os.listdir(out)))
            with open(path, "w") as f:
                json.dump(q, f)
            return ["--plan", path]
        cases = [
            (["--pipeline", "2,2"], "the stages hold 4 blocks, the model has 3"),
            (["--pipeline", "3"], "want 2 stages or more"),
            (["--pipeline", "2,x"], "--pipeline takes the blocks"),
            (["--pipeline", "1,1,1", "--shares", "3,3"], "--shares goes with data parallelism"),
            (["--micro-batches", "2"], "--micro-batches M is a pipeline's"),
            (["--first-bucket-mb", "0"], "--first-bucket-mb, --timeout and --lr must be positive"),
            (bad_plan(pipe_micro_batches=2), "pipeline.micro_batches is 2"),
            (bad_plan(shares=[3, 3]), "shares[1] is 3 but rank 1 is not in the first stage"),
            (bad_plan(pipe_stages=[{"ranks": [0], "layers": 2}, {"ranks": [0], "layers": 1}]),
             "must hold each of the 2 ranks once"),
            (bad_plan(pipe_stages=[{"ranks": [0], "layers": 1}, {"ranks": [1], "layers": 1}]),
             "pipeline.stages[].layers (1,1): the stages hold 2 blocks, the model has 3"),
        ]
        # parsed in this process (train.parse_args exits 2 through argparse)
        T = load("train")
        for argv, want in cases:
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err):
                    T.parse_args(common + argv)
                code = 0
            except SystemExit as e:
                code = e.code
            good = code == 2 and want in err.getvalue()
            print("job: %s -> exit %s%s" % (" ".join(argv[:2]), code,
                                            "" if good else ", stderr: " + err.getvalue()[-300:]))
            ok = ok and good
        # the job's rank count must be a multiple of the stages
        try:
            load("pipeline").layout(T.parse_args(common + ["--pipeline", "1,1,1"]), 2)
            good = False
        except ValueError as e:
            good = "3 stages do not divide the job's 2 ranks" in str(e)
        print("job: --pipeline 1,1,1 on 2 ranks refused: %s" % good)
        ok = ok and good
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["rank"]:
        sys.exit(rank_main(sys.argv[2]))
    sys.exit({"exact": exact, "schedule": schedule, "job": job}[sys.argv[1]](*sys.argv[2:]))
