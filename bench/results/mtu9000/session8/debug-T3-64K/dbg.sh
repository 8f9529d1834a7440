#!/bin/bash
# T3 64 KiB: a cold job and three warm jobs from its KB, with the learner's debug log.
cd /work/main
exec 9> /run/lock/autoinfra-testbed.lock
flock -w 3600 9 || exit 1
trap 'bench/testbed down >/dev/null 2>&1' EXIT
bench/testbed up bench/scenarios/T3.json >&2 || exit 1
export AUTOINFRA_BIN=/tmp/s8/bin/autoinfra
B=$AUTOINFRA_BIN D=/tmp/s8/dbg
rm -f $D/kb*
AUTOINFRA_LOG=debug bench/testbed run --timeout 600 -- $B bench --learn --kb $D/kb.sqlite --bytes 64K \
    --calls 32 --iters 3 --json > $D/cold.jsonl 2> $D/cold.log
cp $D/kb.sqlite $D/kb-cold.sqlite
for i in 1 2 3; do
  cp $D/kb-cold.sqlite $D/kb-w$i.sqlite
  AUTOINFRA_LOG=debug bench/testbed run --timeout 600 -- $B bench --learn --kb $D/kb-w$i.sqlite --bytes 64K \
      --calls 32 --oracle-from $D/cold.jsonl --json > $D/warm$i.jsonl 2> $D/warm$i.log
done
echo done
