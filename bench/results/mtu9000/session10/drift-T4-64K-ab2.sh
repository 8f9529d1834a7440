#!/bin/bash
# T4's drift at 64 KiB, A/B interleaved: /tmp/s10 (8fe9951) against
# /tmp/s10b (the same, the window after an agreed strike 4 calls).
OUT=/work/main/bench/results/mtu9000/session10/drift-T4-64K-ab2
mkdir -p "$OUT"
for k in 1 2 3 4 5 6 7 8; do
    for v in s10 s10b; do
        /tmp/$v/bench/learn-eval T4 --drift-only --calls 64 --drift g1000-0:0.25 --drift-bytes 64K \
            --out "$OUT/$v-$k" > "$OUT/$v-$k.txt" 2>&1
        echo "$v $k rc=$? $(tail -1 $OUT/$v-$k.txt)"
    done
done
