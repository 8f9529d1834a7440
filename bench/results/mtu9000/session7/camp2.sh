#!/bin/bash
# Session 7 campaign, phase 2 (after phase 1): more T1 small runs; Open MPI's
# forced algorithms on T1-T4; MPICH default and gloo on T2/T4 from 4 MiB;
# the shim on T2/T4; T4 drift.
cd /work/main
while pgrep -f camp1.sh >/dev/null; do sleep 5; done
R=/tmp/s7/r
S6=bench/results/mtu9000/session6
export AUTOINFRA_BIN=/tmp/s7/ai-new
for i in $(seq 6 15); do
  echo "$(date +%T) small $i"
  cp $S6/learn-T1-kb.sqlite /tmp/s7/kb.sqlite; rm -f /tmp/s7/kb.sqlite-*
  AUTOINFRA_KB=/tmp/s7/kb.sqlite bench/compare T1 --bytes 64K:256K --iters 30 --warmup 3 \
      --autoinfra-algos auto,ring,rabenseifner,weighted --forced ompi \
      --systems autoinfra,ompi --json $R/compare-T1-small-$i.json > $R/compare-T1-small-$i.txt 2>&1
done
for t in T1 T2 T3 T4; do
  echo "$(date +%T) forced ompi $t"
  b=64K:64M; [ $t = T4 ] && b=64K:16M; [ $t = T3 ] && b=64K:16M
  bench/compare $t --bytes $b --iters 3 --warmup 1 --systems ompi --forced ompi --timeout 1200 \
      --json $R/peer-ompi-$t.json > $R/peer-ompi-$t.txt 2>&1
done
for t in T2 T4; do
  echo "$(date +%T) mpich,gloo $t"
  bench/compare $t --bytes 4M:64M --iters 3 --warmup 1 --systems mpich,gloo --default-only --timeout 1200 \
      --json $R/peer-mpich-gloo-$t.json > $R/peer-mpich-gloo-$t.txt 2>&1
done
for t in T2 T4; do
  echo "$(date +%T) shim $t"
  cp $S6/learn-$t-kb.sqlite /tmp/s7/kb.sqlite; rm -f /tmp/s7/kb.sqlite-*
  AUTOINFRA_KB=/tmp/s7/kb.sqlite bench/shim-bench $t --build /tmp/s7/shim-build \
      --json $R/shim-bench-$t.json > $R/shim-bench-$t.txt 2>&1
done
echo "$(date +%T) drift T4"
bench/learn-eval T4 --drift-only --calls 64 --drift g1000-0:0.25 --drift-bytes 64K,1M,16M \
    --out $R > $R/learn-eval-T4-drift.txt 2>&1
echo "$(date +%T) done"
