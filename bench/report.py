#!/usr/bin/env python3
"""Median per (system, coll, bytes) of JSON-lines benchmark output, and the
autoinfra/peer ratios: bus bandwidth (higher is better) and time."""
import json
import statistics
import sys
from collections import defaultdict


def main(path):
    rows = defaultdict(list)
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            o = json.loads(line)
            rows[(o["system"], o["coll"], int(o["bytes"]))].append(o)
    systems = sorted({k[0] for k in rows})
    peers = [s for s in systems if s != "autoinfra"]
    sizes = sorted({(k[1], k[2]) for k in rows})
    print(f"{'coll':<12}{'bytes':>10}" + "".join(f"{s + ' us':>16}{s + ' GB/s':>16}" for s in systems)
          + "".join(f"{'time ' + p + '/ours':>18}" for p in peers))
    for coll, b in sizes:
        med = {}
        for s in systems:
            v = rows.get((s, coll, b))
            if v:
                med[s] = (statistics.median(x["time_us"] for x in v),
                          statistics.median(x["busbw_GBps"] for x in v),
                          max(x.get("wrong", 0) for x in v))
        line = f"{coll:<12}{b:>10}"
        for s in systems:
            t = med.get(s)
            line += f"{t[0]:>16.2f}{t[1]:>16.4f}" if t else f"{'-':>16}{'-':>16}"
        for p in peers:
            if "autoinfra" in med and p in med:
                line += f"{med[p][0] / med['autoinfra'][0]:>18.2f}"
            else:
                line += f"{'-':>18}"
        print(line)
        for s in systems:
            if s in med and med[s][2] > 0:
                print(f"  WARNING: {s} had {med[s][2]} wrong elements at {b} bytes")


if __name__ == "__main__":
    main(sys.argv[1])
