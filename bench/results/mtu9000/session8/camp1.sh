#!/bin/bash
# Session 8 campaign: learn-eval T1-T4 with the judged oracle and the warm
# run's own confirmation (--oracle-from the cold run).
cd /work/main
export AUTOINFRA_BIN=/tmp/s8/bin/autoinfra
R=/tmp/s8/r
for t in T1 T3 T4 T2; do
  echo "$(date +%T) learn-eval $t"
  bench/learn-eval $t --out $R > $R/learn-eval-$t.txt 2>&1
  echo "$(date +%T) rc=$?"
done
echo "$(date +%T) done"
