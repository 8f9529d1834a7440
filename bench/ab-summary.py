#!/usr/bin/env python3
"""Summarise a bench/ab campaign: two variants, the same command, N rounds.

usage: bench/ab-summary.py DIR

DIR is bench/ab's --out: ab.json names the variants (a, b; without it,
the L of every L-K in DIR); run K of variant L wrote its standard output to DIR/L-K.txt and its files into
DIR/L-K/. Two kinds of runs are summarised:

- `autoinfra bench --json` rows (one JSON object per line of L-K.txt with
  coll, bytes, time_us): per collective, algorithm and size, each variant's
  median time over its runs, and the median over rounds of the per-round
  ratio b / a (below 1: b faster). Rounds pair the two variants' runs of
  the same K, which bench/ab ran next to each other. Where a run times
  several algorithms at one size, a second table gives each algorithm's
  time over the fastest other's in the same run, median over each
  variant's runs.
- drift runs of bench/learn-eval (DIR/L-K/learn-NAME-drift.jsonl): per
  variant and size, the runs back within 10% of the new oracle within 64
  calls and the median of recovered_after (-1, never, counts as 64).

Runs without either kind of row are listed as such; a run whose output
holds no row counts as missing, not as zero.
"""
import glob
import json
import os
import re
import sys


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    if n == 0:
        return float("nan")
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def bench_rows(path):
    rows = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if "time_us" in r and "bytes" in r and r["time_us"] is not None:
                rows[(r.get("coll", "?"), r.get("algo", "?"), r["bytes"])] = r["time_us"]
    return rows


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr if len(sys.argv) != 2 else sys.stdout)
        return 0 if len(sys.argv) == 2 else 2
    d = sys.argv[1]
    meta = {}
    try:
        with open(os.path.join(d, "ab.json")) as f:
            meta = json.load(f)
        labels = [meta["a"], meta["b"]]
    except OSError:
        # runs without bench/ab's ab.json: the variants are the L of L-K
        labels = sorted({re.match(r"(.*)-\d+(\.txt)?$", n).group(1) for n in os.listdir(d)
                         if re.match(r".*-\d+(\.txt)?$", n)}) if os.path.isdir(d) else []
        if not labels:
            print("ab-summary: %s: no ab.json and no runs named LABEL-K" % d, file=sys.stderr)
            return 2
    except (ValueError, KeyError) as e:
        print("ab-summary: %s/ab.json: not bench/ab's (%s)" % (d, e), file=sys.stderr)
        return 2
    print("%s; %s rounds: %s" % (", ".join("%s = %s (%s)" % (n, L, meta.get(n + "_commit", "?"))
                                          for n, L in zip("ab", labels)),
                                meta.get("runs", "?"), " ".join(meta.get("command", []))))

    # bench --json rows: times[label][k][key]
    times = {L: {} for L in labels}
    for L in labels:
        for p in glob.glob(os.path.join(d, glob.escape(L) + "-*.txt")):
            m = re.match(re.escape(L) + r"-(\d+)\.txt$", os.path.basename(p))
            if m:
                rows = bench_rows(p)
                if rows:
                    times[L][int(m.group(1))] = rows
    keys = sorted({k for L in labels for run in times[L].values() for k in run},
                  key=lambda k: (k[0], k[1], k[2]))
    if keys:
        print("%-14s %-22s %10s %6s %12s %12s %8s" % ("coll", "algo", "bytes", "runs", "a: med us",
                                                     "b: med us", "b/a"))
        for key in keys:
            ta = [run[key] for run in times[labels[0]].values() if key in run]
            tb = [run[key] for run in times[labels[-1]].values() if key in run]
            ratios = [times[labels[-1]][k][key] / times[labels[0]][k][key]
                      for k in times[labels[0]] if k in times[labels[-1]]
                      and key in times[labels[0]][k] and key in times[labels[-1]][k]
                      and times[labels[0]][k][key] > 0]
            print("%-14s %-22s %10d %3d/%-2d %12.2f %12.2f %8.3f" % (
                key[0], key[1], key[2], len(ta), len(tb), median(ta), median(tb), median(ratios)))

    # Runs that time several algorithms at one size: each against the
    # fastest of the others in the same run (the same job's neighbours, so
    # the machine's state between rounds cancels), median over the runs.
    groups = {}
    for key in keys:
        groups.setdefault((key[0], key[2]), []).append(key[1])
    if any(len(algos) > 1 for algos in groups.values()):
        print("\nwithin a run: each algorithm's time / the fastest other algorithm's "
              "in the same run, median over runs")
        print("%-14s %-22s %10s %10s %10s" % ("coll", "algo", "bytes", "a", "b"))
        for key in keys:
            others = [o for o in groups[(key[0], key[2])] if o != key[1]]
            if not others:
                continue
            cols = []
            for L in labels:
                rs = [run[key] / min(run[(key[0], o, key[2])] for o in others)
                      for run in times[L].values()
                      if key in run and all((key[0], o, key[2]) in run for o in others)]
                cols.append(median(rs))
            print("%-14s %-22s %10d %10.3f %10.3f" % (key[0], key[1], key[2], cols[0], cols[-1]))

    # learn-eval drift runs
    drift = {}
    for L in labels:
        for f in glob.glob(os.path.join(d, glob.escape(L) + "-*", "learn-*-drift.jsonl")):
            m = re.match(re.escape(L) + r"-(\d+)$", os.path.basename(os.path.dirname(f)))
            if not m:
                continue
            with open(f) as fh:
                for line in fh:
                    if line.strip():
                        r = json.loads(line)
                        drift.setdefault((L, r["bytes"]), []).append((int(m.group(1)), r["recovered_after"]))
    for (L, b), xs in sorted(drift.items(), key=lambda kv: (labels.index(kv[0][0]), kv[0][1])):
        xs.sort()
        rec = [64 if x < 0 else x for _, x in xs]
        print("%-12s %9d: %d of %d within 64 calls; median %.1f calls; recovered %s" % (
            L, b, sum(0 <= x < 64 for _, x in xs), len(xs), median(rec), " ".join(str(x) for _, x in xs)))

    if not keys and not drift:
        print("ab-summary: %s: no bench --json rows and no drift runs found" % d, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
