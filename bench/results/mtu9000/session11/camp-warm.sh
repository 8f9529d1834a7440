#!/bin/bash
# Session 11: learn-eval with N warm runs (--warm N) from a frozen tree,
# one scenario after another; nothing else runs.
#   [TREE=/tmp/s11] [WARM=3] camp-warm.sh SCENARIO...
# Ran: camp-warm.sh T1 (TREE /tmp/s11: main at f79d52d, every rank's
# short-window vote, with learn-eval --warm); TREE=/tmp/s11lvl WARM=2
# camp-warm.sh T4 (the level on every known arm, the KB keeping the rows
# of arms a job did not run), into t4/.
TREE=${TREE:-/tmp/s11} WARM=${WARM:-3}
OUT=${OUT:-/work/main/bench/results/mtu9000/session11}
for s in "$@"; do
    echo "== $s start $(date +%T)"
    "$TREE"/bench/learn-eval "$s" --warm "$WARM" --out "$OUT" > "$OUT/learn-eval-$s.txt" 2> "$OUT/learn-eval-$s.err"
    echo "== $s rc=$? end $(date +%T)"
done
