#!/bin/bash
# Session 7 campaign, phase 3 (after phase 2): Open MPI with rules exported
# from each scenario's KB plus Open MPI's own forced timings of phase 2,
# then learn-eval T1 and T3 with the batched KB writes.
cd /work/main
while pgrep -f camp2.sh >/dev/null; do sleep 5; done
R=/tmp/s7/r
S6=bench/results/mtu9000/session6
export AUTOINFRA_BIN=/tmp/s7/ai-new
for t in T1 T2 T3 T4; do
  echo "$(date +%T) rules $t"
  cp $S6/learn-$t-kb.sqlite $R/rules-kb-$t.sqlite; rm -f $R/rules-kb-$t.sqlite-*
  fp=$($AUTOINFRA_BIN kb show --kb $R/rules-kb-$t.sqlite | awk '/^fingerprint/{print $2; exit}')
  bench/peer-to-kb.py $R/peer-ompi-$t.json $fp $R/peer-ompi-$t-kb.json --system ompi &&
  $AUTOINFRA_BIN kb import $R/peer-ompi-$t-kb.json --kb $R/rules-kb-$t.sqlite &&
  $AUTOINFRA_BIN kb export-ompi $R/ompi-rules-$t.txt --kb $R/rules-kb-$t.sqlite --fingerprint $fp &&
  bench/compare $t --systems ompi --default-only --ompi-rules $R/ompi-rules-$t.txt \
      --bytes 64K:16M --iters 3 --warmup 1 --timeout 1200 --json $R/compare-kb-$t.json > $R/compare-kb-$t.txt 2>&1
done
for t in T1 T3; do
  echo "$(date +%T) learn-eval $t"
  bench/learn-eval $t --out $R > $R/learn-eval-$t.txt 2>&1
done
echo "$(date +%T) done"
