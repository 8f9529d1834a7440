#!/usr/bin/env python3
"""Summarise `autoinfra bench --learn --json` runs (bench/learn-eval).

usage: bench/learn-summary.py FILE.jsonl...

Files named learn-NAME-cold / -warm / -drift.jsonl are read as such. For each
size: the oracle (the fastest arm once the sweep's best three and the
learner's choice are timed again, interleaved: median of those calls), the
learner's choice after the auto calls and its time against the oracle
(ratio = choice / oracle; the goal is <= 1.05: from the judgement's calls
when the choice is another arm, "judged"), the median of the last 8 auto
calls over the oracle (tail), exploratory calls and the extra seconds the
auto calls took over the oracle's time; a cold run made with --more: the arm
the job settled on after those calls (what a warm run starts from), its
refining calls and their extra seconds over the oracle's time. "mean": the
same ratio by mean times instead of medians (what a job pays over many
calls; from runs that record the calls): the choice's mean over the
smallest mean of the confirmation, or of the judgement when judged. Warm:
exploratory calls (goal 0),
the arm the warm run ran against the oracle (goal <= 1.03; with nothing
explored, every call ran it), the median of all its auto calls, the single
first call and the median of the first five over the oracle (single calls
carry the machine's noise); a warm run made with --no-sweep is compared
with the cold run's sweep. Several warm runs of one scenario (learn-NAME-warm,
-warm2, ...: learn-eval --warm N, the same second job in N processes): each
size's ratio in every run and their median, the figure judged against 3%
(one run's judgement moves by 3-5% between processes at T1's near ties). Drift: the call after the reshape from which
every median of 5 calls stays within 10% of the new oracle (goal < 64).
"""
import json
import math
import os
import re
import sys


def arm(d):
    a = d["algo"]
    if d.get("chunk_bytes"):
        a += "/c%dK" % (d["chunk_bytes"] // 1024)
    return a + "/ch%d" % d.get("channels", 0)


def size(b):
    for unit, n in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= n and b % n == 0:
            return "%d%s" % (b // n, unit)
    return str(b)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def mean_ratio(r):
    """The choice / oracle ratio by mean times (nan without recorded calls)."""
    mean = lambda xs: sum(xs) / len(xs)
    j = r.get("judge")
    if j and j.get("choice_calls_us"):
        return mean(j["choice_calls_us"]) / mean(j["oracle_calls_us"])
    conf = [a for a in r.get("confirm") or [] if a.get("calls_us")]
    key = (r["choice"]["algo"], r["choice"]["chunk_bytes"], r["choice"]["channels"])
    mine = [mean(a["calls_us"]) for a in conf if (a["algo"], a["chunk_bytes"], a["channels"]) == key]
    return mine[0] / min(mean(a["calls_us"]) for a in conf) if mine else float("nan")


def fill_from_cold(rows, cold_path):
    """A warm run without its own sweep (--no-sweep) is compared with the
    cold run's sweep of the same scenario: its oracle, and its time for the
    arm the warm run chose."""
    try:
        cold = {r["bytes"]: r for r in (json.loads(l) for l in open(cold_path) if l.strip())}
    except (OSError, ValueError):
        return
    for r in rows:
        c = cold.get(r["bytes"])
        if r["oracle"] is not None or not c:
            continue
        o = c["oracle"]["time_us"]
        r["oracle"] = c["oracle"]
        key = (r["choice"]["algo"], r["choice"]["chunk_bytes"], r["choice"]["channels"])
        # The confirmation's time if the arm was in it, else the sweep's.
        same = [a["time_us"] for a in c.get("confirm", []) + c["arms"]
                if (a["algo"], a["chunk_bytes"], a["channels"]) == key]
        r["choice_ratio"] = same[0] / o if same else float("nan")
        r["tail_ratio"] = r["tail_us"] / o
        r["explore_extra_s"] = sum(t - o for t in r["calls_us"]) * 1e-6


def warm_runs(runs):
    """Several warm runs of one scenario: each size's ratio per run, and
    the median over the runs."""
    for name, files in sorted(runs.items()):
        if len(files) < 2:
            continue
        files.sort(key=lambda f: f[0])
        sizes = sorted({r["bytes"] for _, rows in files for r in rows})
        print("\n== %s: %d warm runs, choice / oracle per run (goal <= 1.03 by the median)" % (
            name, len(files)))
        print("%8s %-30s %s %8s" % ("size", "arm", " ".join("%7s" % ("run%d" % k) for k, _ in files),
                                    "median"))
        ok, arms_differ = 0, 0
        for b in sizes:
            rs = [next((r for r in rows if r["bytes"] == b), None) for _, rows in files]
            ratios = [r["choice_ratio"] if r else float("nan") for r in rs]
            arms = {arm(r["choice"]) for r in rs if r}
            arms_differ += len(arms) > 1
            finite = [x for x in ratios if math.isfinite(x)]
            med = median(finite) if finite else float("nan")
            ok += med <= 1.03
            print("%8s %-30s %s %8.3f" % (size(b), " ".join(sorted(arms)),
                                          " ".join("%7.3f" % x for x in ratios), med))
        print("warm runs: arm within 3%% of the oracle by the median over %d runs: %d of %d; "
              "per run: %s; sizes where the runs ran different arms: %d" % (
                  len(files), ok, len(sizes),
                  ", ".join("%d" % sum(r["choice_ratio"] <= 1.03 for r in rows) for _, rows in files),
                  arms_differ))


def main(paths):
    if paths and paths[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    runs = {}
    for p in paths:
        kind = "cold" if "-cold" in p else "warm" if "-warm" in p else "drift" if "-drift" in p else "run"
        try:
            rows = [json.loads(l) for l in open(p) if l.strip().startswith("{")]
        except (OSError, ValueError) as e:
            print("%s: %s" % (p, e), file=sys.stderr)
            return 1
        if not rows:
            continue
        if kind == "warm" and any(r["oracle"] is None for r in rows):
            fill_from_cold(rows, re.sub(r"-warm\d*", "-cold", p))
        m = re.search(r"(.*)-warm(\d*)\.jsonl$", os.path.basename(p))
        if kind == "warm" and m:
            runs.setdefault(m.group(1), []).append((int(m.group(2) or 1), rows))
        print("\n== %s (%s): %s, %d ranks on %d hosts" % (os.path.basename(p), kind, rows[0]["coll"],
                                                          rows[0]["ranks"], rows[0]["hosts"]))
        if kind == "drift":
            print("%8s %-34s %10s %9s %10s" % ("size", "choice after drift", "oracle_us", "tail", "recovered"))
            for r in rows:
                print("%8s %-34s %10.0f %9.3f %10s" % (size(r["bytes"]), arm(r["choice"]),
                                                      r["oracle"]["time_us"], r["tail_ratio"],
                                                      r["recovered_after"]))
            continue
        print("%8s %-30s %10s %-30s %7s %7s %7s %7s %5s %9s" % (
            "size", "oracle", "us", "choice", "ratio", "mean", "first", "tail", "expl", "extra_s"))
        ok, extra = 0, 0.0
        for r in rows:
            o = r["oracle"]["time_us"]
            ok += r["choice_ratio"] <= 1.05
            extra += r["explore_extra_s"]
            print("%8s %-30s %10.0f %-30s %7.3f %7.3f %7.3f %7.3f %5d %9.3f%s" % (
                size(r["bytes"]), arm(r["oracle"]), o, arm(r["choice"]), r["choice_ratio"],
                mean_ratio(r), r["first_us"] / o, r["tail_ratio"], r["choice"]["explored"], r["explore_extra_s"],
                "  judged" if r.get("judge") else ""))
        print("choice within 5%% of the oracle: %d of %d sizes; geomean choice/oracle %.3f, "
              "tail/oracle %.3f; extra time over the oracle in the auto calls %.2f s" % (
                  ok, len(rows), geomean([r["choice_ratio"] for r in rows]),
                  geomean([r["tail_ratio"] for r in rows]), extra))
        more = [r for r in rows if r.get("more")]
        if more:
            print("%8s %-30s %7s %9s   (after --more %d calls)" % ("size", "choice then", "refined",
                                                               "extra_s", more[0]["more"]["calls"]))
            for r in more:
                m = r["more"]
                print("%8s %-30s %7d %9.3f" % (size(r["bytes"]), arm(m["choice"]),
                                              m["choice"]["explored"] - r["choice"]["explored"],
                                              m["extra_s"]))
            print("then: %d refining calls in %d; extra time over the oracle in those calls %.2f s" % (
                sum(r["more"]["choice"]["explored"] - r["choice"]["explored"] for r in more),
                sum(r["more"]["calls"] for r in more), sum(r["more"]["extra_s"] for r in more)))
        if kind == "warm":
            first5 = [median(r["calls_us"][:5]) / r["oracle"]["time_us"] for r in rows]
            every = [median(r["calls_us"]) / r["oracle"]["time_us"] for r in rows]
            by_mean = [mean_ratio(r) for r in rows]
            if all(math.isfinite(x) for x in by_mean):
                print("warm: arm within 3%% of the oracle by mean times: %d of %d" % (
                    sum(x <= 1.03 for x in by_mean), len(rows)))
            print("warm: exploratory calls %d; arm within 3%% of the oracle: %d of %d; "
                  "median of all its calls within 3%%: %d of %d (geomean %.3f); "
                  "single first call within 3%%: %d of %d; "
                  "median of the first 5 calls within 3%%: %d of %d (geomean %.3f)" % (
                      sum(r["choice"]["explored"] for r in rows),
                      sum(r["choice_ratio"] <= 1.03 for r in rows), len(rows),
                      sum(x <= 1.03 for x in every), len(rows), geomean(every),
                      sum(r["first_us"] <= 1.03 * r["oracle"]["time_us"] for r in rows), len(rows),
                      sum(x <= 1.03 for x in first5), len(rows), geomean(first5)))
    warm_runs(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
