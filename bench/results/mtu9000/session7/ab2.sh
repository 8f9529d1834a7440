#!/bin/bash
# ab2.sh RUNS ITERS BYTES: auto(new) vs ring on 1 and 2 channels
cd /work/main
for r in $(seq 1 $1); do
  for v in auto:auto: ring1:ring:--channels=1 ring2:ring:--channels=2; do
    IFS=: read -r tag algo ch <<<"$v"
    cp bench/results/mtu9000/session6/learn-T1-kb.sqlite /tmp/s7/kb-$tag.sqlite
    rm -f /tmp/s7/kb-$tag.sqlite-*
    t=$(AUTOINFRA_KB=/tmp/s7/kb-$tag.sqlite bench/testbed run --timeout 300 -- /tmp/s7/ai-new bench --coll allreduce --bytes $3 --iters $2 --warmup 3 --algo $algo ${ch/=/ } --json 2>/dev/null | grep -o '"time_us":[0-9.]*' | cut -d: -f2 | tr '\n' ' ')
    echo "$r $tag $t"
  done
done
