#!/bin/bash
# Builds sim.c against src/tune/bandit.c of commit 194e935 (base), the two
# variants tried as patches to it (clip: every observation capped; look:
# second looks), and main's (the cap while exploring) and prints the table of docs/learner.md
# "Session 8". Needs build/libautoinfra.a (for ai_rng and the rest).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../../.." && pwd)
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
git -C "$root" show 194e935:src/tune/bandit.c > "$w/bandit_old.c"
sed -i 's/^int bandit_next(tune_bandit \*b, double bound)/int bandit_next_old(tune_bandit *b, double bound)/' "$w/bandit_old.c"
cp "$w/bandit_old.c" "$w/bandit_new.c" && patch -s "$w/bandit_new.c" "$here/second-look.diff"
cp "$w/bandit_old.c" "$w/bandit_clip.c" && patch -s "$w/bandit_clip.c" "$here/clip.diff"
# The second-look variant's bandit_next takes the calls left.
mkdir -p "$w/inc/tune"
sed 's/^int bandit_next(tune_bandit \*b, double bound);/int bandit_next(tune_bandit *b, double bound, long left);/' \
    "$root/src/tune/tune.h" > "$w/inc/tune/tune.h"
I="-I$root/src -I$root/include"
L="$root/build/libautoinfra.a -lm -lsqlite3 -ljansson -lhwloc -lpthread"
gcc -O2 -std=gnu11 $I -DOLD "$here/sim.c" "$w/bandit_old.c" -o "$w/base" -Wl,--allow-multiple-definition $L
gcc -O2 -std=gnu11 $I -DOLD -DCLIPK=1.5 "$here/sim.c" "$w/bandit_clip.c" -o "$w/clip" -Wl,--allow-multiple-definition $L
gcc -O2 -std=gnu11 -I"$w/inc" $I "$here/sim.c" "$w/bandit_new.c" -o "$w/look" -Wl,--allow-multiple-definition $L
gcc -O2 -std=gnu11 $I -DCAP_EXPLORING "$here/sim.c" -o "$w/main" $L
gcc -O2 "$here/uni.c" -o "$w/uni" -lm
for args in "3000 0.05 0.025 0.1" "3000 0 0.025 0.1" "3000 0.08 0.03 0.15" "3000 0.05 0.04 0.15"; do
    echo "== runs spike clean moderr: $args"
    for v in base clip main look; do printf '%-6s' "$v"; "$w/$v" $args; done
    printf '%-6s' "budget 28"; "$w/base" $args 28
    printf '%-6s' "budget 20"; "$w/base" $args 20
    "$w/uni" ${args% *}
done
