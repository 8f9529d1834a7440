#!/bin/bash
# T4's drift at 64 KiB, A/B interleaved, 8 runs each: /tmp/s10 (main at
# 8fe9951, built and copied with bench/ as for camp1.sh) against
# /tmp/VARIANT (the same with a patch applied). This session ran two
# copies of this script with these values written in:
#   drift-T4-64K-ab.sh s10new drift-T4-64K-ab    (drift-T4-64K-ab/s10new.patch)
#   drift-T4-64K-ab.sh s10b drift-T4-64K-ab2     (drift-T4-64K-ab2/s10b.patch)
VARIANT=${1:?usage: drift-T4-64K-ab.sh VARIANT OUTDIR} OUT=$(dirname "$(readlink -f "$0")")/${2:?}
mkdir -p "$OUT"
for k in 1 2 3 4 5 6 7 8; do
    for v in s10 "$VARIANT"; do
        /tmp/$v/bench/learn-eval T4 --drift-only --calls 64 --drift g1000-0:0.25 --drift-bytes 64K \
            --out "$OUT/$v-$k" > "$OUT/$v-$k.txt" 2>&1
        echo "$v $k rc=$? $(tail -1 "$OUT/$v-$k.txt")"
    done
done
