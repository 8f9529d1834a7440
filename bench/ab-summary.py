#!/usr/bin/env python3
"""A/B drift runs: per variant, runs back within 10% of the new oracle within
64 calls, and the median of recovered_after (-1, never, counts as 64+).
usage: ab-summary.py DIR (runs in DIR/VARIANT-K/learn-*-drift.jsonl)"""
import glob, json, os, re, sys
by = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*-*/learn-*-drift.jsonl"))):
    v, k = re.match(r"(.*)-(\d+)$", os.path.basename(os.path.dirname(f))).groups()
    for l in open(f):
        if l.strip():
            r = json.loads(l)
            by.setdefault((v, r["bytes"]), []).append((int(k), r["recovered_after"], r["tail_ratio"]))
for (v, b), xs in sorted(by.items()):
    xs.sort()
    rec = sorted(64 if x < 0 else x for _, x, _ in xs)
    med = rec[len(rec) // 2] if len(rec) % 2 else 0.5 * (rec[len(rec) // 2 - 1] + rec[len(rec) // 2])
    print("%-10s %9d: %d of %d within 64 calls; median %.1f calls; recovered %s" % (
        v, b, sum(0 <= x < 64 for _, x, _ in xs), len(xs), med, " ".join(str(x) for _, x, _ in xs)))
