"""What PyTorch users call every day, through the autoinfra backend and
through gloo on the same inputs, run by ctest with /usr/bin/python3 (torch
1.13, plugins/torch/CMakeLists.txt: torch_everyday_N) and with the Python of
torch 2's venv (plugins/torch/torch2.cmake: torch2_everyday_N):

    check_everyday.py N [PART...]   every part below (or the ones named) on N
                                    local ranks

    objects   all_gather_object, broadcast_object_list, gather_object and
              scatter_object_list of objects of uneven pickled sizes (a
              tensor among them): equal to the objects sent and to gloo's
    hooks     DDP with default_hooks.fp16_compress_hook and powerSGD_hook (a
              PowerSGDState, error feedback and warm start, compression from
              step 2): parameters the same on every rank, equal to gloo's
              under the same hook, and PowerSGD's apart from uncompressed
              DDP's (the hook did run). batched_powerSGD_hook is left out: on
              both torches it fails inside torch, whatever the backend (it
              hands a 2-D matrix to _orthogonalize, which asserts 3-D).
    nosync    gradient accumulation with DDP.no_sync: grads stay local (apart
              across ranks) inside no_sync; after the sync step they equal
              gloo's and a single process's mean over every rank's batches
    zero      ZeroRedundancyOptimizer (Adam) under DDP: parameters after a few
              steps equal gloo's and a single process's Adam on the mean
              gradient; consolidate_state_dict on rank 0 equals gloo's
    join      the Join context manager, rank r with 3 + 2r batches: DDP alone
              (SGD) against a single process that counts a joined rank's
              gradient as zero; DDP with ZeroRedundancyOptimizer joinables
              against gloo

monitored_barrier and batch_isend_irecv are checked by check_backend.py
(features and p2p cases).

The parent starts N copies of itself with env:// variables on loopback and
fails if any rank fails or the whole run exceeds its limit.
"""
import datetime
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
from check_shares import run_ranks  # noqa: E402 (the same local ranks)
PARTS = ("objects", "hooks", "nosync", "zero", "join")


def parent(n, parts, limit_s=150):
    codes = run_ranks(n, [sys.executable, __file__, str(n)] + parts, limit_s)
    if codes != [0] * n:
        print(f"everyday {' '.join(parts)} on {n} ranks: exit codes {codes}", file=sys.stderr)
        return 1
    print(f"everyday {' '.join(parts)} on {n} ranks: ok")
    return 0


# ------------------------------------------------------------------ ranks

def close(a, b, what, rtol=1e-5, atol=1e-6):
    import torch
    try:
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


def flat_params(model):
    import torch
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def flat_grads(model):
    import torch
    return torch.cat([p.grad.detach().reshape(-1) for p in model.parameters()])


def same_on_every_rank(t, n, gloo, what):
    """t bit-identical on every rank (gathered over gloo)."""
    import torch
    everyone = [torch.empty_like(t) for _ in range(n)]
    import torch.distributed as dist
    dist.all_gather(everyone, t, group=gloo)
    for r, o in enumerate(everyone):
        if not torch.equal(o, t):
            raise AssertionError(f"{what}: rank {r} differs from rank {dist.get_rank()} "
                                 f"by {(o - t).abs().max().item():.3g}")


def new_model(seed=0, rank_offset=0.0):
    import torch
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.Tanh(), torch.nn.Linear(48, 40),
                            torch.nn.Tanh(), torch.nn.Linear(40, 6))
    if rank_offset:
        with torch.no_grad():  # ranks start apart: DDP's broadcast must align them
            for p in m.parameters():
                p.add_(rank_offset)
    return m


def batch(rank, step, rows=8):
    import torch
    g = torch.Generator().manual_seed(7919 * rank + step)
    return torch.randn(rows, 24, generator=g), torch.randn(rows, 6, generator=g)


def loss_of(model, x, y):
    import torch
    return torch.nn.functional.mse_loss(model(x), y)


# -------------------------------------------------------------- objects

def objects(rank, n, gloo):
    import torch
    import torch.distributed as dist

    def obj(r):  # pickles of different sizes on every rank, a tensor inside
        return {"rank": r, "text": "x" * (37 * r + 1), "t": torch.arange(3 * r + 1.0),
                "nested": [r, (r, "a" * r)]}

    def eq(a, b):
        if isinstance(a, torch.Tensor):
            return isinstance(b, torch.Tensor) and torch.equal(a, b)
        if isinstance(a, dict):
            return isinstance(b, dict) and a.keys() == b.keys() and all(eq(a[k], b[k]) for k in a)
        if isinstance(a, (list, tuple)):
            return type(a) is type(b) and len(a) == len(b) and all(eq(x, y) for x, y in zip(a, b))
        return a == b

    got = {}
    for group, name in ((None, "autoinfra"), (gloo, "gloo")):
        res = {}
        out = [None] * n
        dist.all_gather_object(out, obj(rank), group=group)
        for r in range(n):
            assert eq(out[r], obj(r)), f"{name}: all_gather_object: rank {r}'s object {out[r]}"
        res["all_gather_object"] = out
        for src in range(n):
            lst = [obj(rank), "pad" * rank, None] if rank == src else [None, None, None]
            dist.broadcast_object_list(lst, src=src, group=group)
            want = [obj(src), "pad" * src, None]
            assert eq(lst, want), f"{name}: broadcast_object_list from {src}: {lst}"
            res[f"broadcast_object_list {src}"] = lst
        dst = n - 1
        g = [None] * n if rank == dst else None
        dist.gather_object(obj(rank), g, dst=dst, group=group)
        if rank == dst:
            assert eq(g, [obj(r) for r in range(n)]), f"{name}: gather_object: {g}"
        res["gather_object"] = g
        outl = [None]
        dist.scatter_object_list(outl, [obj(10 + r) for r in range(n)] if rank == 0 else None,
                                 src=0, group=group)
        assert eq(outl[0], obj(10 + rank)), f"{name}: scatter_object_list: {outl}"
        res["scatter_object_list"] = outl
        got[name] = res
    for k in got["autoinfra"]:
        assert eq(got["autoinfra"][k], got["gloo"][k]), f"{k}: autoinfra and gloo differ"
    if rank == 0:
        print(f"objects on {n} ranks: {len(got['autoinfra'])} calls equal to gloo's and the objects")


# ---------------------------------------------------------------- hooks

def train_ddp(rank, group, hook=None, make_state=None, steps=6):
    """DDP over group (None: the default, autoinfra) with hook registered;
    the flat parameters after steps of SGD. One bucket (the model is 14 KB):
    PowerSGD issues a bucket's later allreduces from the callbacks of its
    futures, on whatever thread completed the call before, so with several
    buckets their order beside the next bucket's first allreduce would
    differ across ranks, on gloo as here."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(new_model(rank_offset=float(rank)), process_group=group)
    if hook is not None:
        m.register_comm_hook(make_state(group) if make_state else group, hook)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for s in range(steps):
        x, y = batch(rank, s)
        opt.zero_grad()
        loss_of(m, x, y).backward()
        opt.step()
    return flat_params(m)


def hooks(rank, n, gloo):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    def state(group):
        return psgd.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                  start_powerSGD_iter=2, use_error_feedback=True,
                                  warm_start=True, random_seed=0)
    plain = train_ddp(rank, gloo)
    for name, hook, mk, rtol, atol in (
            ("fp16_compress_hook", default_hooks.fp16_compress_hook, None, 1e-3, 1e-4),
            ("powerSGD_hook", psgd.powerSGD_hook, state, 1e-4, 1e-5)):
        mine = train_ddp(rank, None, hook, mk)
        theirs = train_ddp(rank, gloo, hook, mk)
        same_on_every_rank(mine, n, gloo, f"{name}: autoinfra's parameters")
        same_on_every_rank(theirs, n, gloo, f"{name}: gloo's parameters")
        close(mine, theirs, f"{name}: autoinfra against gloo", rtol, atol)
        apart = (mine - plain).abs().max().item()
        if "powerSGD" in name:  # rank 1 from step 2: far from the full gradient
            assert apart > 1e-3, f"{name}: parameters within {apart:.3g} of uncompressed DDP's"
        else:
            close(mine, plain, f"{name}: against uncompressed DDP", 1e-2, 1e-3)
        if rank == 0:
            print(f"hooks on {n} ranks: {name}: equal to gloo's within "
                  f"{(mine - theirs).abs().max().item():.2g}, {apart:.2g} from uncompressed")


# --------------------------------------------------------------- nosync

def nosync(rank, n, gloo):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    micro = 3
    grads = {}
    for group, name in ((None, "autoinfra"), (gloo, "gloo")):
        m = DDP(new_model(rank_offset=float(rank)), process_group=group, bucket_cap_mb=0.002)
        for rnd in range(2):  # two accumulation rounds: the second after a sync
            m.zero_grad()
            with m.no_sync():
                for k in range(micro - 1):
                    x, y = batch(rank, 10 * rnd + k)
                    loss_of(m, x, y).backward()
            local = flat_grads(m)
            everyone = [torch.empty_like(local) for _ in range(n)]
            dist.all_gather(everyone, local, group=gloo)
            assert not torch.equal(everyone[0], everyone[1]), \
                f"{name}: grads equal across ranks inside no_sync (it communicated)"
            x, y = batch(rank, 10 * rnd + micro - 1)
            loss_of(m, x, y).backward()  # the sync step
            g = flat_grads(m)
            same_on_every_rank(g, n, gloo, f"{name}: grads after the sync step {rnd}")
            grads[(name, rnd)] = g
            with torch.no_grad():  # move on so round 1 starts from other weights
                for p in m.parameters():
                    p.sub_(0.1 * p.grad)
    ref = new_model()
    for rnd in range(2):
        ref.zero_grad()
        for r in range(n):
            for k in range(micro):
                x, y = batch(r, 10 * rnd + k)
                (loss_of(ref, x, y) / n).backward()
        want = flat_grads(ref)
        for name in ("autoinfra", "gloo"):
            close(grads[(name, rnd)], want, f"{name}: accumulated grads, round {rnd}, "
                  "against one process")
        close(grads[("autoinfra", rnd)], grads[("gloo", rnd)],
              f"accumulated grads, round {rnd}, autoinfra against gloo")
        with torch.no_grad():
            for p in ref.parameters():
                p.sub_(0.1 * p.grad)
    if rank == 0:
        print(f"nosync on {n} ranks: {micro} micro-batches, 2 rounds: grads equal gloo's "
              "and one process's")


# ----------------------------------------------------------------- zero

def zero(rank, n, gloo):
    import torch
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    steps = 5
    finals, states = {}, {}
    for group, name in ((None, "autoinfra"), (gloo, "gloo")):
        m = DDP(new_model(rank_offset=float(rank)), process_group=group, bucket_cap_mb=0.002)
        opt = ZeroRedundancyOptimizer(m.parameters(), optimizer_class=torch.optim.Adam,
                                      process_group=group, lr=0.01)
        for s in range(steps):
            x, y = batch(rank, s)
            opt.zero_grad()
            loss_of(m, x, y).backward()
            opt.step()
        finals[name] = flat_params(m)
        same_on_every_rank(finals[name], n, gloo, f"{name}: ZeRO's parameters")
        opt.consolidate_state_dict(to=0)
        if rank == 0:
            sd = opt.state_dict()
            states[name] = torch.cat([v.reshape(-1) for i in sorted(sd["state"])
                                      for k, v in sorted(sd["state"][i].items()) if k != "step"])
            assert len(sd["state"]) == len(list(m.parameters())), \
                f"{name}: consolidated state of {len(sd['state'])} parameters"
        dist.barrier(group=gloo)
    ref = new_model()
    ropt = torch.optim.Adam(ref.parameters(), lr=0.01)
    for s in range(steps):
        ropt.zero_grad()
        for r in range(n):
            x, y = batch(r, s)
            (loss_of(ref, x, y) / n).backward()
        ropt.step()
    for name in ("autoinfra", "gloo"):
        close(finals[name], flat_params(ref), f"{name}: ZeRO against one process's Adam")
    close(finals["autoinfra"], finals["gloo"], "ZeRO: autoinfra against gloo")
    if rank == 0:
        close(states["autoinfra"], states["gloo"], "ZeRO consolidated state: autoinfra against gloo")
        print(f"zero on {n} ranks: {steps} Adam steps equal gloo's and one process's; "
              "consolidated state equal to gloo's")


# ----------------------------------------------------------------- join

def join(rank, n, gloo):
    import torch
    from torch.distributed.algorithms.join import Join
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    counts = [3 + 2 * r for r in range(n)]  # uneven inputs: rank r has 3 + 2r batches
    # DDP alone, SGD: a joined rank's gradient counts as zero, the sum still
    # divided by the world size; everyone ends with the last joiner's model.
    finals = {}
    for group, name in ((None, "autoinfra"), (gloo, "gloo")):
        m = DDP(new_model(rank_offset=float(rank)), process_group=group, bucket_cap_mb=0.002)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        t0 = time.time()
        with Join([m]):
            for s in range(counts[rank]):
                x, y = batch(rank, s)
                opt.zero_grad()
                loss_of(m, x, y).backward()
                opt.step()
        assert time.time() - t0 < 30, f"{name}: Join took {time.time() - t0:.1f} s"
        finals[name] = flat_params(m)
        same_on_every_rank(finals[name], n, gloo, f"{name}: parameters after Join")
    ref = new_model()  # rank 0's start, which DDP broadcasts
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for s in range(max(counts)):
        ropt.zero_grad()
        for r in range(n):
            if s < counts[r]:
                x, y = batch(r, s)
                (loss_of(ref, x, y) / n).backward()
        ropt.step()
    for name in ("autoinfra", "gloo"):
        close(finals[name], flat_params(ref), f"{name}: DDP under Join against one process")
    close(finals["autoinfra"], finals["gloo"], "DDP under Join: autoinfra against gloo")
    # DDP and ZeroRedundancyOptimizer both joinable (Adam).
    zfinals = {}
    for group, name in ((None, "autoinfra"), (gloo, "gloo")):
        m = DDP(new_model(rank_offset=float(rank)), process_group=group, bucket_cap_mb=0.002)
        opt = ZeroRedundancyOptimizer(m.parameters(), optimizer_class=torch.optim.Adam,
                                      process_group=group, lr=0.01)
        with Join([m, opt]):
            for s in range(counts[rank]):
                x, y = batch(rank, s)
                opt.zero_grad()
                loss_of(m, x, y).backward()
                opt.step()
        zfinals[name] = flat_params(m)
        same_on_every_rank(zfinals[name], n, gloo, f"{name}: ZeRO parameters after Join")
    close(zfinals["autoinfra"], zfinals["gloo"], "DDP+ZeRO under Join: autoinfra against gloo")
    apart = (zfinals["autoinfra"] - flat_params(new_model())).abs().max().item()
    assert apart > 1e-3, f"DDP+ZeRO under Join: parameters moved only {apart:.3g}"
    if rank == 0:
        print(f"join on {n} ranks: inputs {counts}: DDP equal to one process's and gloo's; "
              "DDP+ZeRO equal to gloo's")


def child(n, parts):
    import torch
    import torch.distributed as dist
    import autoinfra.torch  # noqa: F401 (registers the backend)
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("autoinfra", timeout=datetime.timedelta(seconds=30))
    assert dist.get_backend() == "autoinfra" and dist.get_rank() == rank
    gloo = dist.new_group(backend="gloo")
    fns = {"objects": objects, "hooks": hooks, "nosync": nosync, "zero": zero, "join": join}
    for part in parts:
        t0 = time.time()
        fns[part](rank, n, gloo)
        if rank == 0:
            print(f"  {part}: {time.time() - t0:.1f} s", flush=True)
    dist.barrier(group=gloo)
    dist.destroy_process_group()


if __name__ == "__main__":
    n = int(sys.argv[1])
    parts = sys.argv[2:] or list(PARTS)
    bad = [p for p in parts if p not in PARTS]
    if bad:
        sys.exit(f"unknown part {bad[0]}; the parts are {', '.join(PARTS)}")
    if "RANK" in os.environ:
        child(n, parts)
    else:
        sys.exit(parent(n, parts))
