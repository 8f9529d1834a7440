"""Checks of the training job's batch shares (autoinfra.train.job,
docs/train.md "Batch shares"), run by ctest with /usr/bin/python3:

    check_shares.py exact      3 local ranks on the autoinfra backend train
                               two SGD steps of a global batch of 8 with
                               uneven shares (5,2,1 and 6,0,2, micro-batches
                               of 2 under no_sync): the parameters must be
                               bit-identical across the ranks and equal, within
                               TOL, those of one process that trains on the
                               whole batch of 8 without DDP
    check_shares.py predictor  the balancer through the extension's binding
                               (autoinfra.torch.Shares) on synthetic step
                               times: it learns each rank's t(b) = a + c b,
                               balances the ranks, and re-balances after a
                               rank slows down; the even split the same C
                               one in autoinfra.torch, autoinfra.elastic and train.py
"""
import importlib
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
from autoinfra.ports import rendezvous_port  # noqa: E402

# float32 gradients summed in another order (three ranks' partial sums,
# the allreduce's order) differ by a few ulps; after SGD steps of lr 0.5
# the parameters (of size ~0.1-1) differ by ~1e-8. Plain averaging of the
# ranks' mean gradients (no weighting) moves them by ~1e-3: the check
# fails for it (asserted below, so the tolerance discriminates).
TOL = 1e-6
B, WORLD, MICRO, STEPS, LR = 8, 3, 2, 2, 0.5
CONFIGS = [(5, 2, 1), (6, 0, 2)]
SHAPE = dict(layers=2, dim=32, heads=4, ctx=16)


def load_train():
    return importlib.import_module("autoinfra.train.job")


def corpus():
    import random
    r = random.Random(7)
    return bytes(r.randrange(32, 127) for _ in range(4000))


def model(train):
    import torch
    torch.manual_seed(3)
    return train.GPT(SHAPE["layers"], SHAPE["dim"], SHAPE["heads"], SHAPE["ctx"])


def flat(m):
    import torch
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def reference(train, weighted=True, shares=None):
    """One process, no DDP: SGD on the mean loss of all B windows; or
    (weighted False) on the plain mean of the shares' mean losses."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    m = model(train)
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    order = train.GlobalOrder(train.Windows(corpus(), SHAPE["ctx"]), 11)
    for _ in range(STEPS):
        idx = order.next(B)
        opt.zero_grad()
        parts = [idx] if weighted else [idx[sum(shares[:i]):sum(shares[:i + 1])] for i in range(len(shares))]
        parts = [p for p in parts if len(p)]
        for part in parts:
            x, y = order.batch(part)
            out = m(x)
            (F.cross_entropy(out.view(-1, out.shape[-1]), y.view(-1)) / len(parts)).backward()
        opt.step()
    return flat(m)


def rank_main(out):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import autoinfra.torch  # noqa: F401 (registers the backend)
    torch.set_num_threads(1)
    train = load_train()
    rank = int(os.environ["RANK"])
    dist.init_process_group("autoinfra", rank=rank, world_size=WORLD)
    for k, shares in enumerate(CONFIGS):
        m = model(train)
        ready = train.Ready(m)
        ddp = DDP(m)
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        order = train.GlobalOrder(train.Windows(corpus(), SHAPE["ctx"]), 11)
        for _ in range(STEPS):
            idx = order.next(B)
            off = sum(shares[:rank])
            opt.zero_grad(set_to_none=True)
            train.run_share(ddp, order, idx[off:off + shares[rank]], B, WORLD, MICRO, ready)
            opt.step()
        torch.save(flat(m), os.path.join(out, "c%d-r%d.pt" % (k, rank)))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def run_ranks(world, argv, limit, **extra_env):
    """world local ranks of argv (env://, the repo's python/ on PYTHONPATH),
    killed after limit seconds; their exit codes."""
    env = dict(os.environ, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(rendezvous_port()), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([os.path.abspath(os.path.join(ROOT, "python"))] +
                                          [p for p in [os.environ.get("PYTHONPATH")] if p]),
               **extra_env)
    procs = [subprocess.Popen(argv, env=dict(env, RANK=str(r))) for r in range(world)]
    end = time.time() + limit
    while any(p.poll() is None for p in procs) and time.time() < end:
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            p.kill()
    return [p.wait() for p in procs]


def exact():
    import torch
    with tempfile.TemporaryDirectory(prefix="autoinfra-shares-") as out:
        env = dict(os.environ, WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(rendezvous_port()), OMP_NUM_THREADS="1")
        procs = [subprocess.Popen([sys.executable, __file__, "rank", out], env=dict(env, RANK=str(r)))
                 for r in range(WORLD)]
        end = time.time() + 50
        while any(p.poll() is None for p in procs) and time.time() < end:
            time.sleep(0.05)
        for p in procs:
            if p.poll() is None:
                p.kill()
        codes = [p.wait() for p in procs]
        if codes != [0] * WORLD:
            print("exact: rank exit codes %s" % codes, file=sys.stderr)
            return 1
        train = load_train()
        ref = reference(train)
        bad = 0
        for k, shares in enumerate(CONFIGS):
            got = [torch.load(os.path.join(out, "c%d-r%d.pt" % (k, r))) for r in range(WORLD)]
            same = all(torch.equal(got[0], g) for g in got[1:])
            diff = (got[0] - ref).abs().max().item()
            naive = (reference(train, weighted=False, shares=shares) - ref).abs().max().item()
            print("shares %s: ranks bit-identical %s; max |param - one-process reference| %.2e "
                  "(tolerance %.0e); unweighted averaging would be off by %.2e"
                  % (",".join(map(str, shares)), same, diff, TOL, naive))
            if not same or not diff <= TOL or not naive > 100 * TOL:
                bad = 1
        return bad


def predictor():
    import random
    import autoinfra.torch as ait
    import autoinfra.elastic as elastic
    # The even split is the C one (ai_shares_split), wherever it is asked:
    # the package's, the elastic helper's ranges and the training job's.
    train = load_train()
    for B, n in ((8, 3), (12, 5), (7, 7), (100, 6)):
        even = ait.even_shares(B, n)
        assert even == list(ait.shares_split([1.0] * n, B)), (B, n, even)
        assert sum(even) == B and max(even) - min(even) <= 1 and even == sorted(even, reverse=True), even
        assert [hi - lo for lo, hi in elastic.shares(B, n)] == even, (B, n)
        assert train.even_shares(B, n) == even, (B, n)
    rnd = random.Random(5)
    P, Bg = 4, 48
    a = [0.05, 0.05, 0.05, 0.05]
    c = [0.01, 0.01, 0.02, 0.02]  # two ranks at half speed
    s = ait.Shares(P, Bg, 0.03)
    shares, _, _ = s.rebalance()
    assert shares == [12] * 4, shares

    def run(steps, every=3):
        nonlocal shares
        moved = []
        for k in range(steps):
            for i in range(P):
                s.observe(i, shares[i], (a[i] + c[i] * shares[i]) * (1 + rnd.gauss(0, 0.01)))
            if (k + 1) % every == 0:
                new, changed, pred = s.rebalance()
                if changed:
                    shares = new
                    moved.append(k + 1)
        return moved

    def spread():
        t = [a[i] + c[i] * shares[i] for i in range(P)]
        return max(t) / min(t)

    run(30)
    # Optimum: 16,16,8,8 (every rank 0.21 s). The shares' batch sizes
    # varied, so the model is affine and near the truth.
    assert sum(shares) == Bg and abs(shares[0] - 16) <= 1 and abs(shares[2] - 8) <= 1, shares
    assert spread() < 1.1, (shares, spread())
    for i in range(P):
        fa, fc, affine = s.model(i)
        assert abs(fc - c[i]) / c[i] < 0.15, (i, fa, fc, affine)
    before = list(shares)
    c[0] *= 2  # rank 0 slows to half speed
    moved = run(15)
    assert moved and moved[0] <= 9, (moved, shares)
    assert shares[0] < before[0] and spread() < 1.15, (before, shares, spread())
    # Bad input through the binding is a ValueError naming it.
    for bad, what in ((lambda: s.observe(9, 1, 0.1), "rank 9"), (lambda: s.set([1, 1, 1]), "3 shares"),
                      (lambda: s.observe(0, 1, -1.0), "step time")):
        try:
            bad()
        except ValueError as e:
            assert what in str(e), (what, str(e))
        else:
            raise AssertionError("no error for " + what)
    print("predictor: balanced %s after 30 steps; rank 0 slowed, re-balanced at step %d to %s"
          % (before, moved[0], shares))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["rank"]:
        sys.exit(rank_main(sys.argv[2]))
    sys.exit({"exact": exact, "predictor": predictor}[sys.argv[1]]())
