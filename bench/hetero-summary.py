#!/usr/bin/env python3
"""The runtime issue's heterogeneity figures from bench/compare JSON files:
autoinfra `auto` against Open MPI's default (geometric mean over sizes and
scenarios), against Open MPI's best forced algorithm, and against the best
of every peer from 4 MiB up; and autoinfra's best against the bound.

    bench/hetero-summary.py [--fastest] bench/results/hetero/compare-T1.json ...

  --fastest   a peer measured in several files is judged by its faster run
              (default: the first file's row counts)
  -h, --help  this text

An argument PEERS.json+AUTOINFRA.json takes the peers' rows from the first
file and autoinfra's from the second (autoinfra re-run alone on the same
scenario); PEERS.json+MORE_PEERS.json+AUTOINFRA.json adds peers run later
(where both ran the same algorithm at the same size, the first counts; with
--fastest, the faster: a peer measured twice, e.g. Open MPI's default in the
run beside `auto` and again with its forced algorithms, is judged by its
better run)."""
import json
import math
import sys


def records(path):
    if "+" in path:
        *peers, ours = path.split("+")
        return [o for p in peers for o in json.load(open(p)) if o["system"] != "autoinfra"] + \
               [o for o in json.load(open(ours)) if o["system"] == "autoinfra"]
    return json.load(open(path))


def load(path, fastest):
    rows = {}
    for o in records(path):
        if not o.get("correct") or o.get("time_us") is None:
            continue
        key, t = (o["system"], o["algo"], o["bytes"]), o["time_us"]
        if key not in rows or (fastest and t < rows[key]):
            rows[key] = t
    return rows


def main(args):
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stdout if args else sys.stderr)
        sys.exit(0 if args else 2)
    fastest = "--fastest" in args
    paths = [a for a in args if a != "--fastest"]
    logs = []
    for path in paths:
        r = load(path, fastest)
        name = path.split("+")[0].rsplit("-", 1)[-1].split(".")[0]
        sizes = sorted({k[2] for k in r})
        print(f"\n{name}: size, auto us, ompi default/auto, ompi best/auto, best peer/auto, autoinfra best / bound")
        bounds = {o["bytes"]: o.get("bound_us") for o in records(path)}
        for b in sizes:
            auto = r.get(("autoinfra", "auto", b))
            dflt = r.get(("ompi", "default", b))
            if not auto or not dflt:
                continue
            ompi_best = min(t for (s, a, bb), t in r.items() if s == "ompi" and bb == b)
            peer_best = min(t for (s, a, bb), t in r.items() if s != "autoinfra" and bb == b)
            ours_best = min(t for (s, a, bb), t in r.items() if s == "autoinfra" and bb == b)
            logs.append(math.log(dflt / auto))
            bound = bounds.get(b)
            print(f"  {b:>9} {auto:>12.0f} {dflt / auto:>8.2f} {ompi_best / auto:>8.2f} {peer_best / auto:>8.2f}"
                  f" {ours_best / bound if bound else float('nan'):>8.2f}")
    if logs:
        print(f"\ngeometric mean of ompi default / autoinfra auto over all: {math.exp(sum(logs) / len(logs)):.2f}"
              f" ({len(logs)} points)")


if __name__ == "__main__":
    main(sys.argv[1:])
