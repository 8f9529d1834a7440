#!/bin/bash
cd /work/main
export AUTOINFRA_BIN=/tmp/s7/ai-drift2
R=/tmp/s7/d2
echo "$(date +%T) drift T4"
bench/learn-eval T4 --drift-only --calls 64 --drift g1000-0:0.25 --drift-bytes 64K,1M,16M \
    --out $R > $R/learn-eval-T4-drift.txt 2>&1
echo "$(date +%T) drift T1"
bench/learn-eval T1 --drift-only --calls 64 --drift n-3:0.125 --drift-bytes 64K,1M,16M \
    --out $R > $R/learn-eval-T1-drift.txt 2>&1
echo "$(date +%T) done"
