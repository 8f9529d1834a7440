#!/usr/bin/env python3
"""Two builds' bench/compare runs, side by side against the lower bound.

usage: bench/compare-ab-summary.py DIR [BEFORE AFTER]

DIR holds `bench/compare --json` files named SCENARIO-LABEL-ROUND.json,
the two builds' runs alternating (LABEL: BEFORE and AFTER, default `old`
and `new`). Prints, per scenario, algorithm and size, the median over
rounds of time / lower bound for each build (with the range), their
ratio, and what `auto` ran in the AFTER build; and the count of results
that failed their check.
"""
import collections
import glob
import json
import os
import statistics
import sys


def main():
    if len(sys.argv) not in (2, 4) or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__.strip())
    d0 = sys.argv[1]
    before, after = sys.argv[2:4] if len(sys.argv) == 4 else ("old", "new")
    res = collections.defaultdict(lambda: collections.defaultdict(list))
    ran = collections.defaultdict(set)
    wrong = 0
    files = sorted(glob.glob(os.path.join(d0, "*.json")))
    if not files:
        sys.exit(f"compare-ab-summary: no *.json in {d0}")
    for f in files:
        parts = os.path.basename(f)[:-5].rsplit("-", 2)
        if len(parts) != 3 or parts[1] not in (before, after):
            continue
        scen, label, _ = parts
        for x in json.load(open(f)):
            if not x.get("correct"):
                wrong += 1
                continue
            res[(scen, x["algo"], x["bytes"])][label].append(x["vs_bound"])
            if x["algo"] == "auto" and label == after:
                ran[(scen, x["bytes"])].add(x["algo_ran"])
    print(f"# {d0}: median over rounds of time / lower bound (min-max); results that failed their check: {wrong}")
    print(f"{'scenario':8s} {'algo':13s} {'bytes':>9s} {before:>22s} {after:>22s} {after + '/' + before:>10s}  auto ran ({after})")
    for k in sorted(res):
        o, n = res[k][before], res[k][after]
        if not o or not n:
            continue
        mo, mn = statistics.median(o), statistics.median(n)
        r = ",".join(sorted(ran[(k[0], k[2])])) if k[1] == "auto" else ""
        print(f"{k[0]:8s} {k[1]:13s} {k[2]:>9d} {mo:6.3f} ({min(o):.3f}-{max(o):.3f}) "
              f"{mn:6.3f} ({min(n):.3f}-{max(n):.3f}) {mn / mo:10.3f}  {r}")


if __name__ == "__main__":
    main()
