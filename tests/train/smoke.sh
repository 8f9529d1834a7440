#!/bin/sh
# The training job on 2 local ranks per backend: 3 steps run and give
# finite losses, and 20 steps of the tiny model with a fixed seed lower the
# loss (the mean of the last 5 steps below the mean of the first 5). The
# 3-step job sets DDP's first bucket and cap to 0.1 MiB: the 0.5 MiB of
# gradients come in 4 buckets or more (one at torch's 1 MiB first bucket).
# Usage: smoke.sh AUTOINFRA_BIN SOURCE_DIR BACKEND...
set -eu
BIN=$1 SRC=$2
shift 2
DIR=$(mktemp -d /tmp/autoinfra-train-test.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
export GLOO_SOCKET_IFNAME=lo AUTOINFRA_KB="$DIR/kb.sqlite" PYTHONPATH="$SRC/python${PYTHONPATH:+:$PYTHONPATH}"
for backend in "$@"; do
    for steps in 3 20; do
        buckets=
        [ "$steps" = 3 ] && buckets="--bucket-cap-mb 0.1 --first-bucket-mb 0.1"
        # shellcheck disable=SC2086 # $buckets: two flags or none
        "$BIN" launch -n 2 --timeout 120 -- /usr/bin/python3 -m autoinfra.train \
            --backend "$backend" --model tiny --ctx 32 --batch 4 --steps "$steps" --warmup 1 \
            --seed 1 --lr 3e-3 --quiet --json "$DIR/$backend-$steps.json" $buckets
        /usr/bin/python3 - "$DIR/$backend-$steps.json" "$steps" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))
steps = int(sys.argv[2])
l = r["losses"]
assert r["world_size"] == 2 and len(l) == steps and len(r["step_times_s"]) == steps, r
assert all(math.isfinite(x) for x in l), l
assert r["grad_bytes"] > 0 and r["step_time_s"] > 0 and r["tokens_per_s"] > 0, r
if steps == 3:
    assert len(r["bucket_bytes"]) >= 4, r["bucket_bytes"]
if steps >= 20:
    first, last = sum(l[:5]) / 5, sum(l[-5:]) / 5
    assert last < first - 0.1, "loss did not decrease: %.4f -> %.4f" % (first, last)
print("%s, %d steps: loss %.4f -> %.4f, buckets %s" % (r["backend"], steps, l[0], l[-1],
                                                        r["bucket_bytes"]))
PY
    done
done
