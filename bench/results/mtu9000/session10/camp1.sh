#!/bin/bash
# Session 10 campaign: learn-eval T1, T2, T4 with main at a686532+judge calls
# (frozen copy in /tmp/s10). One scenario after another; nothing else runs.
OUT=/work/main/bench/results/mtu9000/session10
for s in T1 T2 T4; do
    echo "== $s start $(date +%T)"
    /tmp/s10/bench/learn-eval $s --out "$OUT" > "$OUT/learn-eval-$s.txt" 2> "$OUT/learn-eval-$s.err"
    echo "== $s rc=$? end $(date +%T)"
done
