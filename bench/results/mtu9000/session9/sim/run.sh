#!/bin/bash
# Builds refine.c against src/tune/bandit.c (main: bandit_rival) and prints
# the table of docs/learner.md "Session 9". Needs build/libautoinfra.a.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../../.." && pwd)
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
L="$root/build/libautoinfra.a -lm -lsqlite3 -ljansson -lhwloc -lpthread"
gcc -O2 -std=gnu11 -I"$root/src" -I"$root/include" "$here/refine.c" -o "$w/refine" $L
# The noise prior (TUNE_NOISE) tried lower, not kept: mixed across noise levels.
for nz in 0.08 0.06; do
    sed "s/#define TUNE_NOISE 0.12/#define TUNE_NOISE $nz/" "$root/src/tune/bandit.c" > "$w/b$nz.c"
    gcc -O2 -std=gnu11 -I"$root/src" -I"$root/include" "$here/refine.c" "$w/b$nz.c" -o "$w/refine$nz" \
        -Wl,--allow-multiple-definition $L
done
for c in "0.05 0.025 0.1" "0 0.025 0.1" "0.08 0.03 0.15" "0.05 0.04 0.15" "0.05 0.06 0.15"; do
    echo "== spike clean moderr: $c"
    echo "no refining, 96 more:   $("$w/refine" 3000 $c 96 0 0.02 0.1)"
    echo "main (32, 2%, 0.1):     $("$w/refine" 3000 $c 96 32 0.02 0.1)"
    echo "refine 64 calls:        $("$w/refine" 3000 $c 96 64 0.02 0.1)"
    echo "p 0.05:                 $("$w/refine" 3000 $c 96 32 0.02 0.05)"
    echo "switch 1%:              $("$w/refine" 3000 $c 96 32 0.02 0.1 0.01)"
    echo "192 more:               $("$w/refine" 3000 $c 192 32 0.02 0.1)"
    echo "64 more:                $("$w/refine" 3000 $c 64 32 0.02 0.1)"
    for nz in 0.08 0.06; do echo "TUNE_NOISE $nz:        $("$w/refine$nz" 3000 $c 96 32 0.02 0.1)"; done
done
