#!/bin/bash
# Session 9 campaign: learn-eval T1, T3, T4, T2 with refining (the cold job
# goes on 96 calls per size after its choice is read: --more 96, the default).
cd /work/main
export AUTOINFRA_BIN=/tmp/s9/bin/autoinfra
R=/tmp/s9/r
for t in T1 T3 T4 T2; do
  echo "$(date +%T) learn-eval $t"
  bench/learn-eval $t --out $R > $R/learn-eval-$t.txt 2>&1
  echo "$(date +%T) rc=$?"
done
echo "$(date +%T) done"
