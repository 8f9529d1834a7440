#!/usr/bin/env python3
"""Put a peer's own algorithm timings into the knowledge base.

usage: bench/peer-to-kb.py COMPARE.json FINGERPRINT OUT.json [--system ompi|mpich]
       autoinfra kb import OUT.json --kb KB

COMPARE.json is `bench/compare --json` from a run with the peer's forced
algorithms (not --default-only); FINGERPRINT is the cluster's in the KB
(`autoinfra kb show`). Every correct allreduce row of the system whose algo
is one of its own (not "default" or an export) becomes an arm
"<system>:<algo>" of that fingerprint at the row's size bucket, so that
`autoinfra kb export-ompi` (export-mpich) picks the algorithm Open MPI
(MPICH) itself ran fastest (src/tune/export/ompi.c, mpich.c). Writes the KB's JSON exchange format.

  --system S   the peer whose rows become arms: ompi or mpich (default ompi)
  -h, --help   this text
"""
import json
import sys


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    args = [a for a in argv if not a.startswith("--")]
    system = argv[argv.index("--system") + 1] if "--system" in argv else "ompi"
    if system not in ("ompi", "mpich"):
        print("peer-to-kb: --system: ompi or mpich, not '%s'" % system, file=sys.stderr)
        return 2
    if "--system" in argv:
        args.remove(system)
    if len(args) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, fp, out = args
    if len(fp) != 16:
        print("peer-to-kb: fingerprint '%s' is not 16 hex digits" % fp, file=sys.stderr)
        return 2
    rows = [r for r in json.load(open(src))
            if r.get("system") == system and r.get("coll") == "allreduce" and r.get("correct")
            and r.get("time_us") and r.get("algo") not in ("default", "kb_rules", "kb_json")]
    if not rows:
        print("peer-to-kb: no %s allreduce rows with forced algorithms in %s" % (system, src),
              file=sys.stderr)
        return 1
    arms = []
    for r in rows:
        bucket = 1 << (int(r["bytes"]).bit_length() - 1)
        arms.append({"coll": "allreduce", "bytes": bucket, "algo": "%s:%s" % (system, r["algo"]),
                     "chunk_bytes": 0, "channels": 0,
                     # the calls the row's time is the mean of: exports
                     # count an arm only with enough of them
                     "samples": int(r.get("iters") or 3),
                     "mean_us": r["time_us"] * bucket / r["bytes"], "std_us": 0.05 * r["time_us"]})
    doc = {"format": "autoinfra-kb", "version": 1,
           "fingerprints": [{"id": fp, "nranks": rows[0]["ranks"], "nhosts": rows[0]["nodes"],
                             "description": "", "arms": arms}]}
    json.dump(doc, open(out, "w"), indent=1)
    print("peer-to-kb: %d %s arms for fingerprint %s -> %s" % (len(arms), system, fp, out),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
