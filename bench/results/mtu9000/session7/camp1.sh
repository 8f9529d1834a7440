#!/bin/bash
# Session 7 campaign, phase 1: T1 64-256K against Open MPI's best (5 runs), then
# auto and Open MPI's default on T1-T4 64K-64M (#3 geomean). Frozen binary a7ccaa2.
cd /work/main
R=/tmp/s7/r
S6=bench/results/mtu9000/session6
export AUTOINFRA_BIN=/tmp/s7/ai-new
for i in 1 2 3 4 5; do
  echo "$(date +%T) small $i"
  cp $S6/learn-T1-kb.sqlite /tmp/s7/kb.sqlite; rm -f /tmp/s7/kb.sqlite-*
  AUTOINFRA_KB=/tmp/s7/kb.sqlite bench/compare T1 --bytes 64K:256K --iters 30 --warmup 3 \
      --autoinfra-algos auto,ring,rabenseifner,weighted --forced ompi \
      --systems autoinfra,ompi --json $R/compare-T1-small-$i.json > $R/compare-T1-small-$i.txt 2>&1
done
for t in T1 T2 T3 T4; do
  echo "$(date +%T) default $t"
  cp $S6/learn-$t-kb.sqlite /tmp/s7/kb.sqlite; rm -f /tmp/s7/kb.sqlite-*
  AUTOINFRA_KB=/tmp/s7/kb.sqlite bench/compare $t --bytes 64K:64M --iters 3 --warmup 1 \
      --autoinfra-algos auto --default-only --systems autoinfra,ompi --timeout 1200 \
      --json $R/compare-$t.json > $R/compare-$t.txt 2>&1
done
echo "$(date +%T) done"
