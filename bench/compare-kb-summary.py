#!/usr/bin/env python3
"""Speedups of the knowledge base's exports and of autoinfra's auto over the
peers' defaults, from bench/compare --json files (bench/learn-eval's KB,
`autoinfra kb export-ompi` / `export-mpich`, then
`bench/compare T --systems autoinfra,ompi,mpich --default-only
--autoinfra-algos auto --ompi-rules R --mpich-json J --json F`).

usage: bench/compare-kb-summary.py FILE.json...

Per file and size: Open MPI default / Open MPI with the exported rules
(kb_rules), Open MPI default / autoinfra auto, MPICH default / MPICH with the
exported selection file (kb_json); geometric means per file and over all.
"""
import json
import math
import os
import sys


def gm(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main(paths):
    if paths and paths[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    cols = ([], [], [])
    for p in paths:
        t = {}
        for r in json.load(open(p)):
            if r.get("correct") and r.get("time_us"):
                t[(r["system"], r["algo"], r["bytes"])] = r["time_us"]
        mine = ([], [], [])
        print("%s: bytes, ompi default/kb_rules, ompi default/autoinfra auto, mpich default/kb_json"
              % os.path.basename(p))
        for b in sorted({k[2] for k in t}):
            pairs = ((("ompi", "default"), ("ompi", "kb_rules")),
                     (("ompi", "default"), ("autoinfra", "auto")),
                     (("mpich", "default"), ("mpich", "kb_json")))
            vals = []
            for i, (num, den) in enumerate(pairs):
                n, d = t.get(num + (b,)), t.get(den + (b,))
                vals.append(n / d if n and d else None)
                if vals[-1]:
                    mine[i].append(vals[-1])
                    cols[i].append(vals[-1])
            print("  %10d %s" % (b, " ".join("%6.2f" % v if v else "     -" for v in vals)))
        print("  geomean    %6.3f %6.3f %6.3f" % tuple(gm(m) for m in mine))
    print("all: geomean ompi default/kb_rules %.3f, ompi default/autoinfra auto %.3f, "
          "mpich default/kb_json %.3f" % tuple(gm(c) for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
