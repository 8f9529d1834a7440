#!/bin/bash
# Session 8 campaign 2: the observation cap (TUNE_CAP 1.5), drift and learn-eval.
cd /work/main
export AUTOINFRA_BIN=/tmp/s8/bin2/autoinfra
R=/tmp/s8/r2
echo "$(date +%T) drift T1"
bench/learn-eval T1 --drift-only --calls 64 --drift n-3:0.125 --drift-bytes 64K,1M,16M --out $R/drift > $R/learn-eval-T1-drift.txt 2>&1
echo "$(date +%T) learn-eval T1 rc=$?"
bench/learn-eval T1 --out $R > $R/learn-eval-T1.txt 2>&1
echo "$(date +%T) drift T4 rc=$?"
bench/learn-eval T4 --drift-only --calls 64 --drift g1000-0:0.25 --drift-bytes 64K,1M,16M --out $R/drift > $R/learn-eval-T4-drift.txt 2>&1
echo "$(date +%T) learn-eval T3 rc=$?"
bench/learn-eval T3 --out $R > $R/learn-eval-T3.txt 2>&1
echo "$(date +%T) done rc=$?"
