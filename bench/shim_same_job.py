#!/usr/bin/python3
"""The MPI shim against the MPI it replaces, timed inside one job.

bench/mpi_bench.c --alternate under LD_PRELOAD of the shim: per size, R
rounds of `iters` calls through MPI_X (the shim's entry point) and
`iters` calls of PMPI_X (the library's own collective), the two
alternating and which goes first alternating between rounds, so that both
see the same machine at the same moments. Per round the slowest rank's
mean; per size the median over rounds of each side and the median of the
per-round ratio shim / MPI (the figure judged: at most 1.02 is the goal).
Both sides' results are checked.

One job per (MPI, ranks, collective, size group), on one host (mpirun
--oversubscribe; mpiexec.mpich), the shim's knowledge base one scratch
file per MPI and rank count for the whole run, so later groups start from
what earlier jobs learned, as a deployed job would. Warm-up calls first
(both sides, at least 1200): the learner explores there (the shim starts
its comparison after at most 400 calls of a size) and the shim compares
its way with MPI's once (768 calls below 1 MiB, 96 from 1 MiB;
docs/mpi-shim.md) before the rounds
begin, so that the rounds time the steady state a long job runs in.
Size groups (--scale multiplies the calls; the rounds of mpi_bench
--alternate are cut to 0.25 s where calls take milliseconds):
  bytes <= 8 KiB     10000 calls per round and side (OSU's count)
  bytes <= 256 KiB    1000 calls
  larger               100 calls
and 1200 warm-up calls in every group

A job that fails or passes --run-timeout is reported and the run goes
on; Ctrl-C or SIGTERM writes what ran so far. Output (--out):
same-job.json (every size's rounds) and same-job.txt.
Started as `bench/shim-bench --same-job ...`.
"""
import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

# OSU's counts (osu_util.h: 10000 iterations up to 8 KiB, 1000 above;
# 100 above 256 KiB here, where a call takes 0.1-1 ms on 2 cores)
GROUPS = [(8 << 10, 10000), (256 << 10, 1000), (1 << 62, 100)]
# the shim's SHIM_LEARN_MAX (400) plus its first comparison (768 calls
# below 1 MiB: 12 blocks of 64)
WARM_MIN = 1200
COLLS = ["allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"]


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("B")
    return int(float(s[:-1]) * mult[s[-1]]) if s and s[-1] in mult else int(s)


def groups(lo, hi, scale):
    out, b = [], lo
    while b <= hi:
        for top, iters in GROUPS:
            if b <= top:
                break
        g = b
        while g * 2 <= min(hi, top):
            g *= 2
        # the warm-up covers the learner's exploration and the shim's first duel
        out.append((b, g, max(1, int(iters * scale)), WARM_MIN))
        b = g * 2
    return out


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def summary(dirs, goal):
    """Several runs' same-job.json side by side: per point the median ratio
    over the runs, and per run how many points met the goal."""
    runs = []
    for d in dirs:
        path = os.path.join(d, "same-job.json")
        if not os.path.isfile(path):
            sys.exit(f"shim-bench --summary: {d} holds no same-job.json (give the folders of "
                     f"`shim-bench --same-job --out DIR` runs)")
        with open(path) as f:
            runs.append(json.load(f))
    by = {}
    for run in runs:
        for r in run["rows"]:
            by.setdefault((r["mpi"], r["ranks"], r["coll"], r["bytes"]), []).append(r["ratio"])
    lines = [f"# {len(runs)} runs: " + "; ".join(f"{d} (commit {r['meta']['commit']}, load {r['meta']['load_before']})"
                                                  for d, r in zip(dirs, runs)),
             "# per point the median over the runs of each run's ratio (shim / MPI)",
             f"{'mpi':<6} {'ranks':>5} {'coll':<15} {'bytes':>9} {'median':>7}  runs"]
    for (mpi, ranks, coll, b), v in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1], COLLS.index(kv[0][2]),
                                                                       kv[0][3])):
        m = statistics.median(v)
        lines.append(f"{mpi:<6} {ranks:>5} {coll:<15} {b:>9} {m:>7.3f}  " + " ".join(f"{x:.3f}" for x in v) +
                     ("" if m <= goal else "  >goal"))
    per_run = [sum(r["ratio"] <= goal for r in run["rows"]) for run in runs]
    small = [statistics.median(v) for k, v in by.items() if k[3] <= 2048]
    large = [statistics.median(v) for k, v in by.items() if k[3] > 2048]
    lines.append(f"# medians at most {goal}x MPI's time at {sum(statistics.median(v) <= goal for v in by.values())} "
                 f"of {len(by)} points (8 B-2 KiB: {sum(x <= goal for x in small)} of {len(small)}, median "
                 f"{statistics.median(small) if small else float('nan'):.3f}; from 4 KiB: {sum(x <= goal for x in large)} "
                 f"of {len(large)}, median {statistics.median(large) if large else float('nan'):.3f}); each run alone: "
                 + ", ".join(f"{n} of {len(run['rows'])}" for n, run in zip(per_run, runs)))
    sys.stdout.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--summary", nargs="+", metavar="DIR",
                    help="run nothing: the median per point of earlier runs' DIR/same-job.json")
    ap.add_argument("--build", default="build", help="CMake build folder with plugins/mpi_shim (default build)")
    ap.add_argument("--mpi", default="ompi,mpich", help="ompi (Open MPI), mpich, comma separated (default both)")
    ap.add_argument("--np", default="2,4", help="rank counts (default 2,4)")
    ap.add_argument("--coll", default=",".join(COLLS), help="collectives (default the shim's five)")
    ap.add_argument("--bytes", default="8:1M", help="MIN:MAX, doubling (default 8:1M)")
    ap.add_argument("--rounds", type=int, default=9, help="alternating rounds per size (default 9)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the calls (default 1)")
    ap.add_argument("--goal", type=float, default=1.02, help="shim / MPI ratio judged (default 1.02)")
    ap.add_argument("--out", default="bench/results/mpi-shim", help="output folder (default bench/results/mpi-shim)")
    ap.add_argument("--run-timeout", type=int, default=1200,
                    help="seconds one job may take; then it is killed and reported (default 1200)")
    ap.add_argument("--env", action="append", default=[], help="VAR=VALUE for the shim (repeatable)")
    a = ap.parse_args()
    if a.summary:
        summary(a.summary, a.goal)
        return
    lo, _, hi = a.bytes.partition(":")
    lo, hi = parse_size(lo), parse_size(hi or lo)
    colls = a.coll.split(",")
    for c in colls:
        if c not in COLLS:
            ap.error(f"--coll: {c} is not one of the shim's collectives ({', '.join(COLLS)})")
    flavours = {"ompi": ("mpicc", "libautoinfra-mpi.so"), "mpich": ("mpicc.mpich", "libautoinfra-mpi-mpich.so")}
    scratch = tempfile.mkdtemp(prefix="shim-same-job-")
    os.makedirs(a.out, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], stdout=subprocess.PIPE,
                           text=True).stdout.strip()
    meta = {"command": " ".join(["bench/shim-bench --same-job"] + sys.argv[1:]),
            "commit": commit + ("+dirty" if dirty else ""),
            "machine": f"{platform.node()}, {os.cpu_count()} cpus, {platform.machine()}",
            "load_before": load(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "groups": groups(lo, hi, a.scale), "rounds": a.rounds, "skipped": {}, "failed": []}
    rows = []

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        for mpi in a.mpi.split(","):
            cc, lib = flavours[mpi]
            shim = os.path.abspath(os.path.join(a.build, "plugins", "mpi_shim", lib))
            exe = os.path.join(scratch, "mpi_bench." + mpi)
            if shutil.which(cc) is None or not os.path.exists(shim):
                meta["skipped"][mpi] = f"no {cc} or no {shim}"
                sys.stderr.write(f"shim-bench: skipping {mpi}: {meta['skipped'][mpi]}\n")
                continue
            subprocess.run([cc, "-O2", "-o", exe, "bench/mpi_bench.c"], check=True)
            for np in [int(x) for x in a.np.split(",")]:
                env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
                vars_ = {"LD_PRELOAD": shim, "AUTOINFRA_KB": os.path.join(scratch, f"kb-{mpi}-{np}.sqlite"),
                         "AUTOINFRA_LOG": "info"}
                for kv in a.env:
                    k, _, v = kv.partition("=")
                    vars_[k] = v
                if mpi == "ompi":
                    launch = ["mpirun", "--oversubscribe", "-np", str(np)]
                    for k, v in vars_.items():
                        launch += ["-x", f"{k}={v}"]
                else:
                    launch = ["mpiexec.mpich", "-n", str(np)]
                    for k, v in vars_.items():
                        launch += ["-genv", k, v]
                for coll in colls:
                    for g_lo, g_hi, iters, warm in meta["groups"]:
                        cmd = launch + [exe, "--coll", coll, "--bytes", f"{g_lo}:{g_hi}", "--iters", str(iters),
                                        "--warmup", str(warm), "--alternate", str(a.rounds)]
                        sys.stderr.write(f"shim-bench: {mpi} np {np} {coll} {g_lo}:{g_hi} ({iters} calls x "
                                         f"{a.rounds} rounds)\n")
                        try:
                            p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                               text=True, timeout=a.run_timeout, stdin=subprocess.DEVNULL)
                        except subprocess.TimeoutExpired:
                            why = f"{mpi} np {np} {coll} {g_lo}:{g_hi}: timed out after {a.run_timeout} s"
                            meta["failed"].append(why)
                            sys.stderr.write(f"shim-bench: {why}\n")
                            continue
                        got = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
                        calls = [l for l in p.stderr.splitlines() if "collectives ran in autoinfra" in l]
                        if p.returncode != 0 or not got:
                            tail = " | ".join([l for l in p.stderr.splitlines() if l.strip()][-3:])
                            why = f"{mpi} np {np} {coll} {g_lo}:{g_hi}: exit status {p.returncode}: {tail}"
                            meta["failed"].append(why[:600])
                            sys.stderr.write(f"shim-bench: {why}\n")
                            continue
                        by = {}
                        for o in got:
                            by.setdefault(o["bytes"], {})[o["system"]] = o
                        for b, d in sorted(by.items()):
                            s, m = d["shim"], d["mpi"]
                            if s["wrong"] or m["wrong"]:
                                sys.stderr.write(f"shim-bench: wrong results: {mpi} {np} {coll} {b}\n")
                                sys.exit(1)
                            rows.append({"mpi": mpi, "ranks": np, "coll": coll, "bytes": b, "iters": iters,
                                         "warmup": warm, "shim_us": s["time_us"], "mpi_us": m["time_us"],
                                         "ratio": s["ratio"], "shim_rounds_us": s["rounds_us"],
                                         "mpi_rounds_us": m["rounds_us"],
                                         "calls_line": calls[-1].strip() if calls else None})
    except KeyboardInterrupt:
        meta["interrupted"] = True
        sys.stderr.write("shim-bench: interrupted: writing the results so far\n")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    meta["load_after"] = load()
    ok = sum(r["ratio"] <= a.goal for r in rows)
    lines = [f"# {meta['command']}  (commit {meta['commit']}, {meta['machine']})",
             f"# load average before {meta['load_before']}, after {meta['load_after']}; {a.rounds} alternating "
             "rounds per size in one job; ratio = median over rounds of (shim / MPI) time, below 1: the shim "
             "is faster", f"{'mpi':<6} {'ranks':>5} {'coll':<15} {'bytes':>9} {'mpi us':>10} {'shim us':>10} "
             f"{'ratio':>6}"]
    for r in rows:
        lines.append(f"{r['mpi']:<6} {r['ranks']:>5} {r['coll']:<15} {r['bytes']:>9} {r['mpi_us']:>10.2f} "
                     f"{r['shim_us']:>10.2f} {r['ratio']:>6.3f}" + ("" if r["ratio"] <= a.goal else "  >goal"))
    lines.append(f"# at most {a.goal}x MPI's time at {ok} of {len(rows)} points")
    for mpi, why in meta["skipped"].items():
        lines.append(f"# {mpi}: SKIPPED: {why}")
    for why in meta["failed"]:
        lines.append(f"# FAILED: {why}")
    if meta.get("interrupted"):
        lines.append("# INTERRUPTED: the jobs after the last row did not run")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "same-job.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    with open(os.path.join(a.out, "same-job.txt"), "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
