#!/bin/bash
# Warm jobs of two frozen trees on copies of one cold knowledge base, A/B
# interleaved, N runs each, on the emulated cluster; each run confirms and
# judges against the cold run's arms in its own process (--oracle-from), as
# learn-eval's warm runs do.
#   warm-ab.sh SCENARIO COLD-KB.sqlite COLD.jsonl OUTDIR N A B
# Writes OUTDIR/$(basename A)/learn-SCENARIO-warm{,2,3..}.jsonl (and B's);
# bench/learn-summary.py OUTDIR/A/*.jsonl tables them.
set -u
SCEN=${1:?usage: warm-ab.sh SCENARIO COLD-KB COLD.jsonl OUTDIR N A B} KB=${2:?} COLD=${3:?} OUT=${4:?}
N=${5:?} A=${6:?} B=${7:?}
TB=$A/bench/testbed
exec 9> /run/lock/autoinfra-testbed.lock
flock -w 3600 9 || { echo "warm-ab: testbed busy" >&2; exit 2; }
W=$(mktemp -d /tmp/warm-ab.XXXXXX)
trap '"$TB" down >/dev/null 2>&1; rm -rf "$W"' EXIT
"$TB" up "$A/bench/scenarios/$SCEN.json" >&2 || exit 2
for k in $(seq "$N"); do
    suffix=$([ "$k" = 1 ] || echo "$k")
    for v in "$A" "$B"; do
        d=$OUT/$(basename "$v")
        mkdir -p "$d"
        rm -f "$W"/kb.sqlite* && for f in "$KB"*; do cp "$f" "$W/kb.sqlite${f##*.sqlite}"; done
        "$TB" run --timeout 3600 -- "$v/build/autoinfra" bench --learn --kb "$W/kb.sqlite" --iters 3 \
            --calls 32 --json --bytes 64K:64M --oracle-from "$COLD" \
            > "$d/learn-$SCEN-warm$suffix.jsonl" 2> "$d/learn-$SCEN-warm$suffix.err"
        echo "$(basename "$v") $k rc=$? $(date +%T)"
    done
done
