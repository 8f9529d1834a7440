#!/bin/bash
# Session 7, phase 5: the drift threshold at 1.25x (working tree, /tmp/s7/ai-drift):
# test_tune on an idle machine, then T4 and T1 drift.
cd /work/main
while pgrep -f camp4.sh >/dev/null; do sleep 5; done
echo "$(date +%T) tests"
for i in 1 2 3; do (cd build && ./test_tune 2>&1 | grep -E "left the|PASSED|FAILED  \]"); done
for i in 1 2; do (cd build-asan && ./test_tune 2>&1 | grep -E "left the|PASSED|FAILED  \]"); done
export AUTOINFRA_BIN=/tmp/s7/ai-drift
R=/tmp/s7/d
echo "$(date +%T) drift T4"
bench/learn-eval T4 --drift-only --calls 64 --drift g1000-0:0.25 --drift-bytes 64K,1M,16M \
    --out $R > $R/learn-eval-T4-drift.txt 2>&1
echo "$(date +%T) drift T1"
bench/learn-eval T1 --drift-only --calls 64 --drift n-3:0.125 --drift-bytes 64K,1M,16M \
    --out $R > $R/learn-eval-T1-drift.txt 2>&1
echo "$(date +%T) done"
