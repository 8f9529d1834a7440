#!/bin/bash
# Drift runs (learn-eval --drift-only --calls 64), A/B interleaved, N runs
# each: two frozen trees (git archive of a commit, build/autoinfra copied
# in), one run after the other, nothing else running on the machine.
#   drift-ab.sh A B N OUTDIR [SCENARIO NODE:GBPS SIZES]
# (default: T4 g1000-0:0.25 64K). Session 11: A = /tmp/s11base (main at
# 1866faa), B = /tmp/s11vote (the same plus every rank's short-window vote,
# drift-T4-64K-vote/vote.patch, landed as f79d52d):
#   drift-ab.sh /tmp/s11base /tmp/s11vote 10 drift-T4-64K-vote
#   drift-ab.sh /tmp/s11base /tmp/s11vote 40 drift-T4-64K-vote40
#   drift-ab.sh /tmp/s11base /tmp/s11vote 3 drift-T1-vote T1 n-3:0.125 64K,1M,16M
#   drift-ab.sh /tmp/s11base /tmp/s11vote 3 drift-T4-vote T4 g1000-0:0.25 1M,16M
A=${1:?usage: drift-ab.sh A B N OUTDIR [SCENARIO NODE:GBPS SIZES]} B=${2:?} N=${3:?} OUT=${4:?}
SCEN=${5:-T4} DRIFT=${6:-g1000-0:0.25} SIZES=${7:-64K}
mkdir -p "$OUT"
for k in $(seq "$N"); do
    for v in "$A" "$B"; do
        tag=$(basename "$v")-$k
        "$v"/bench/learn-eval "$SCEN" --drift-only --calls 64 --drift "$DRIFT" --drift-bytes "$SIZES" \
            --out "$OUT/$tag" > "$OUT/$tag.txt" 2>&1
        echo "$tag rc=$? $(date +%T) $(tail -1 "$OUT/$tag.txt")"
    done
done
