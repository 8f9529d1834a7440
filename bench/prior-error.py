#!/usr/bin/env python3
"""How good the learner's prior is: the network model's predicted time of
every arm against the time the sweep of `bench --learn` measured.

usage: bench/prior-error.py LOG LEARN.jsonl [--worst N]

LOG is the standard error of a run with AUTOINFRA_LOG=debug, whose rank 0
prints "learner: COLL BYTES: prior ALGO/CHUNK/CHANNELS T us (sd S)" for
every arm of every bucket it opens (any `auto` run on the same cluster, e.g.
`bench --bytes 64K:64M --iters 1 --warmup 0`). LEARN.jsonl is the output of
`bench --learn --json` (bench/learn-eval's learn-NAME-cold.jsonl).

Prints, over every arm of every size the two have in common:
  - the model's log error on the arm's time (log measured / predicted):
    median and sd; the median is the error the arms share;
  - the log error on the arm's time relative to the fastest arm's (the
    part that decides which arm is explored): sd and largest;
  - chunk/channel variants against their algorithm's default arm: sd;
  - for thresholds X, how many arms the model rated at least X times slower
    than its favourite were measured within 5% of the fastest.

  --worst N    also list the N arms with the largest relative error
               (default: none)
  -h, --help   this text
"""
import json
import math
import re
import statistics
import sys

PRIOR = re.compile(r"\[0\]: debug: learner: (\w+) (\d+): prior (\w+)/(\d+)/(\d+) (\S+) us")


def die(msg):
    print("prior-error: " + msg, file=sys.stderr)
    sys.exit(2)


def main(argv):
    worst = 0
    if "--worst" in argv:
        i = argv.index("--worst")
        try:
            worst = int(argv[i + 1])
        except (IndexError, ValueError):
            die("--worst takes a number")
        del argv[i : i + 2]
    if len(argv) != 2 or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if argv and argv[0] in ("-h", "--help") else 2)
    prior = {}
    try:
        with open(argv[0]) as f:
            for line in f:
                m = PRIOR.search(line)
                if m and m[6] not in ("inf", "nan"):
                    prior[(m[1], int(m[2]), m[3], int(m[4]), int(m[5]))] = float(m[6])
        rows = [json.loads(l) for l in open(argv[1]) if l.strip()]
    except (OSError, ValueError) as e:
        die(str(e))
    if not prior:
        die("%s: no 'prior' lines of rank 0 (was AUTOINFRA_LOG=debug set?)" % argv[0])
    err, rel, var, slow = [], [], [], []
    for d in rows:
        arms = [a for a in d.get("arms", []) if a["time_us"] > 0]
        key = lambda a: (d["coll"], d["bytes"], a["algo"], a["chunk_bytes"], a["channels"])
        known = [(a, prior[key(a)]) for a in arms if key(a) in prior]
        if not known:
            continue
        best = min(a["time_us"] for a in arms)
        pbest = min(p for _, p in known)
        chans = max(a["channels"] for a in arms)
        base = {a["algo"]: a["time_us"] for a in arms if a["chunk_bytes"] == 0 and a["channels"] == chans}
        for a, p in known:
            err.append(math.log(a["time_us"] / p))
            rel.append((math.log(a["time_us"] / best) - math.log(p / pbest), d["bytes"], a))
            slow.append((p / pbest, a["time_us"] / best))
            if a["algo"] in base and (a["chunk_bytes"] or a["channels"] != chans):
                var.append(math.log(a["time_us"] / base[a["algo"]]))
    if not err:
        die("no arm of %s has a prior in %s" % (argv[1], argv[0]))
    sd = lambda xs: statistics.pstdev(xs) if len(xs) > 1 else 0.0
    print("%d arms; log(measured / predicted): median %.3f, sd %.3f" % (len(err), statistics.median(err), sd(err)))
    r = [x[0] for x in rel]
    print("relative to the fastest arm: sd %.3f, largest %.2f" % (sd(r), max(map(abs, r))))
    if var:
        print("chunk/channel variants against their algorithm's default: %d, sd %.3f" % (len(var), sd(var)))
    for x in (1.1, 1.2, 1.3, 1.5, 2.0):
        n = [m for p, m in slow if p >= x]
        print("rated >= %.1fx slower than the model's favourite: %d arms, %d within 5%% of the fastest"
              % (x, len(n), sum(m <= 1.05 for m in n)))
    for e, b, a in sorted(rel, key=lambda x: -abs(x[0]))[:worst]:
        print("  %+.2f  %d %s/%d/%d" % (e, b, a["algo"], a["chunk_bytes"], a["channels"]))


if __name__ == "__main__":
    main(sys.argv[1:])
