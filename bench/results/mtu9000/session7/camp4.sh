#!/bin/bash
# Session 7 campaign, phase 4 (after phase 3): Open MPI's forced algorithms
# at 32-64 MiB on T4 and T3.
cd /work/main
while pgrep -f camp3.sh >/dev/null; do sleep 5; done
R=/tmp/s7/r
for t in T4 T3; do
  echo "$(date +%T) forced ompi big $t"
  bench/compare $t --bytes 32M:64M --iters 3 --warmup 1 --systems ompi --forced ompi --timeout 1200 \
      --json $R/peer-ompi-$t-big.json > $R/peer-ompi-$t-big.txt 2>&1
done
echo "$(date +%T) done"
