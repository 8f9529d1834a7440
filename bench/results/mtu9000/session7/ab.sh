#!/bin/bash
# ab.sh RUNS ITERS BYTES: auto old/new and ring, T1, session-6 KB copies
cd /work/main
for r in $(seq 1 $1); do
  for v in old:ai-old:auto new:ai-new:auto ring:ai-new:ring; do
    IFS=: read -r tag bin algo <<<"$v"
    cp bench/results/mtu9000/session6/learn-T1-kb.sqlite /tmp/s7/kb-$tag.sqlite
    rm -f /tmp/s7/kb-$tag.sqlite-*
    t=$(AUTOINFRA_KB=/tmp/s7/kb-$tag.sqlite bench/testbed run --timeout 300 -- /tmp/s7/$bin bench --coll allreduce --bytes $3 --iters $2 --warmup 3 --algo $algo --json 2>/dev/null | grep -o '"time_us":[0-9.]*' | cut -d: -f2 | tr '\n' ' ')
    echo "$r $tag $t"
  done
done
