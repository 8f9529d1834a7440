#!/bin/sh
# bench/chaos end to end: a few faults of every kind into 3 local ranks
# (the sanitized chaos-rank when ctest runs it from build-asan), bounded in
# time; the JSON has the documented fields, every fault was detected or (a
# slowed link) completed correctly, and nothing hung, crashed or returned
# wrong data. Usage: smoke.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1 build=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM
start=$(date +%s)
rc=0
"$src/bench/chaos" --local 3 --faults 6 --seed 1 --timeout 1 --grace 3 --build "$build" --no-training \
    --json "$out/chaos.json" --svg "$out/chaos.svg" --quiet || rc=$?
elapsed=$(( $(date +%s) - start ))
python3 - "$out/chaos.json" "$out/chaos.svg" "$rc" "$elapsed" <<'PY'
import json, sys
path, svg, rc, elapsed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
d = json.load(open(path))
need = ["faults", "detected", "hangs", "crashes", "wrong", "timeout_s", "detect_p50_s",
        "detect_p99_s", "by_kind", "training"]
missing = [k for k in need if k not in d]
assert not missing, "missing fields %s" % missing
assert d["faults"] == 6, d["faults"]
assert d["hangs"] == 0 and d["crashes"] == 0 and d["wrong"] == 0, \
    [r for r in d["records"] if r.get("hung") or r.get("crashed") or r.get("wrong")]
assert d["false_failures"] == 0 and d["missed"] == 0, d["records"]
for r in d["records"]:
    assert r["kind"] == "slow" and r["correct"] or r["detected"], r
assert sum(v["faults"] for v in d["by_kind"].values()) == 6, d["by_kind"]
assert len(d["by_kind"]) >= 2, d["by_kind"]
assert d["detect_p99_s"] is not None and d["detect_p99_s"] <= d["timeout_s"] + 1, d["detect_p99_s"]
assert open(svg).read().startswith("<svg"), "no SVG"
assert rc == 0, "bench/chaos exited %d" % rc
assert elapsed < 40, "took %d s" % elapsed
print("chaos smoke: %d faults, %s, p99 %.3f s, %d s" % (d["faults"], {k: v["faults"] for k, v in
      d["by_kind"].items()}, d["detect_p99_s"], elapsed))
PY
