#!/bin/bash
# T4's drift at 64 KiB, the marginal case of sessions 7-9, five more runs
# with the session-9 learner (frozen copy in /tmp/s10).
OUT=/work/main/bench/results/mtu9000/session10/drift-T4-64K
mkdir -p "$OUT"
for k in 1 2 3 4 5; do
    /tmp/s10/bench/learn-eval T4 --drift-only --calls 64 --drift g1000-0:0.25 --drift-bytes 64K \
        --out "$OUT/run$k" > "$OUT/run$k.txt" 2>&1
    echo "run $k rc=$? $(date +%T)"
done
