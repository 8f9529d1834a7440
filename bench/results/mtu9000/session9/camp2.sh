#!/bin/bash
# Session 9 campaign 2: refining plus the settled-window spike hold and the
# warm start on the last exploited arm: drift on T1 and T4 first (the hold
# delays a lasting change by one window), then learn-eval T1 and T3.
cd /work/main
export AUTOINFRA_BIN=/tmp/s9/bin2/autoinfra
R=/tmp/s9/r2
echo "$(date +%T) drift T1"
bench/learn-eval T1 --drift-only --calls 64 --drift n-3:0.125 --drift-bytes 64K,1M,16M --out $R/drift > $R/learn-eval-T1-drift.txt 2>&1
echo "$(date +%T) drift T4 rc=$?"
bench/learn-eval T4 --drift-only --calls 64 --drift g1000-0:0.25 --drift-bytes 64K,1M,16M --out $R/drift > $R/learn-eval-T4-drift.txt 2>&1
echo "$(date +%T) learn-eval T1 rc=$?"
bench/learn-eval T1 --out $R > $R/learn-eval-T1.txt 2>&1
echo "$(date +%T) learn-eval T3 rc=$?"
bench/learn-eval T3 --out $R > $R/learn-eval-T3.txt 2>&1
echo "$(date +%T) done rc=$?"
