#!/bin/bash
# Why did the warm T1 job's auto calls at 64 KiB (weighted/ch1) take 2.1 ms
# when the same arm took 1.6 ms in that process's confirmation and judgement?
# Each line below is one process on T1 (testbed up by this script).
set -u
cd /work/main || exit 1
D=bench/results/mtu9000/session10/exp-64K
mkdir -p $D
exec 9> /run/lock/autoinfra-testbed.lock; flock -w 3600 9 || exit 1
export AUTOINFRA_BIN=/tmp/s10/build/autoinfra
TB=bench/testbed
trap '$TB down >/dev/null 2>&1' EXIT
$TB up bench/scenarios/T1.json >&2 || exit 1
for k in 1 2 3; do
  for a in weighted ring rabenseifner; do
    echo "== explicit $a/ch1 64K, 40 calls, no warm-up (run $k)"
    $TB run --timeout 300 -- $AUTOINFRA_BIN bench --algo $a --channels 1 --bytes 64K --iters 40 --warmup 0
  done
  cp bench/results/mtu9000/session10/learn-T1-kb.sqlite /tmp/exp-kb.sqlite
  echo "== warm auto 64K first (run $k)"
  $TB run --timeout 300 -- $AUTOINFRA_BIN bench --learn --no-sweep --kb /tmp/exp-kb.sqlite --bytes 64K --calls 32 --json > $D/warm-first-$k.jsonl
  cp bench/results/mtu9000/session10/learn-T1-kb.sqlite /tmp/exp-kb.sqlite
  echo "== auto 32K (not in the KB), then warm auto 64K, one process (run $k)"
  $TB run --timeout 300 -- $AUTOINFRA_BIN bench --learn --no-sweep --kb /tmp/exp-kb.sqlite --bytes 32K:64K --calls 32 --json > $D/warm-second-$k.jsonl
done
