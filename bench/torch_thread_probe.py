"""Where a torch rank's per-call time goes, by thread (docs/torch.md, Measured).

usage (one process per rank; env:// variables, AUTOINFRA_TORCH_LIB set):
    RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p python bench/torch_thread_probe.py N

N 8-byte calls per path (dist.all_reduce, group.allreduce().wait(), one C
API call per Python call) on the autoinfra backend; every rank prints, per
path, the time per call and each thread's CPU time (10 ms clock ticks, so
+-10 ms over the loop), voluntary and involuntary context switches per
call, from /proc/self/task.
"""
import os, sys, time, json
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import torch, torch.distributed as dist
import autoinfra.torch  # noqa
torch.set_num_threads(1)
N = int(sys.argv[1])
def threads():
    res = {}
    for t in os.listdir(f"/proc/self/task"):
        st = open(f"/proc/self/task/{t}/stat").read()
        name = st[st.index("(") + 1:st.rindex(")")]
        f = st[st.rindex(")") + 2:].split()
        sw = open(f"/proc/self/task/{t}/status").read()
        vol = int(sw.split("\nvoluntary_ctxt_switches:")[1].split()[0])
        nv = int(sw.split("nonvoluntary_ctxt_switches:")[1].split()[0])
        res[int(t)] = (name, int(f[11]) + int(f[12]), vol, nv)
    return res
dist.init_process_group("autoinfra")
g = dist.distributed_c10d._get_default_group()
x = torch.ones(2)
for _ in range(200):
    dist.all_reduce(x)
out = {}
opts = dist.AllreduceOptions()
import autoinfra.torch as ait
for name, call in (("dist.all_reduce", lambda: dist.all_reduce(x)), ("pg.wait", lambda: g.allreduce([x], opts).wait()),
                   ("capi1", lambda: ait.capi_allreduce_loop(g, x, 1))):
    dist.barrier()
    a = threads(); t0 = time.perf_counter()
    for _ in range(N):
        call()
    dt = time.perf_counter() - t0; b = threads()
    rows = {}
    for t, (n, c, v, nv) in b.items():
        if t in a:
            rows[f"{n}/{t}"] = (round((c - a[t][1]) * 1e4 / N, 2), round((v - a[t][2]) / N, 3), round((nv - a[t][3]) / N, 3))
    out[name] = {"us": round(dt / N * 1e6, 1), "threads (cpu us/call, vol/call, invol/call)": {k: v for k, v in rows.items() if v != (0, 0, 0)}}
aff = {t: os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}
print("affinity", aff, "policy", os.sched_getscheduler(0))
print(torch.__version__, "rank", dist.get_rank(), json.dumps(out))
dist.destroy_process_group()
