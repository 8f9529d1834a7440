#!/bin/sh
# A real Slurm (bench/slurm: munged, slurmctld, four slurmd) runs autoinfra:
#  1. srun --autoinfra -N4 autoinfra bench --check: every result right,
#     4 ranks on 4 hosts, and the knowledge base named by --autoinfra grew;
#  2. srun -N4 python -m autoinfra.train (torch's env:// from Slurm's variables, no
#     launcher) on gloo, and with --autoinfra on the autoinfra backend:
#     4 ranks, finite losses;
#  3. a bad --autoinfra option is refused by srun, naming it;
#  4. two jobs at once on one knowledge base both finish right, and what
#     each learned is in it;
#  5. down leaves no daemon running and no line in /etc/hosts.
# Usage: smoke.sh AUTOINFRA_BIN SOURCE_DIR SPANK_PLUGIN
set -eu
[ "$(id -u)" = 0 ] || { echo "slurm smoke: skipped (needs root)"; exit 77; }
BIN=$1 SRC=$2
export AUTOINFRA_SPANK=$3
DIR=$(mktemp -d /tmp/autoinfra-slurm-test.XXXXXX)
export SLURM_STATE="$DIR/state" SLURM_PORT_BASE=${SLURM_PORT_BASE:-26817}
SLURM="$SRC/bench/slurm"
cleanup() {
    "$SLURM" down >/dev/null 2>&1 || true
    rm -rf "$DIR"
}
trap cleanup EXIT
fail() { echo "slurm smoke: $*" >&2; exit 1; }

"$SLURM" up 4
pids=$(cat "$SLURM_STATE"/*.pid | paste -sd' ' -)

# 1. the runtime under srun, with the plugin
"$SLURM" run --timeout 120 -- srun -N4 -n4 --autoinfra=kb:"$DIR/kb.sqlite" \
    "$BIN" bench --coll allreduce --bytes 4K:256K --iters 20 --check > "$DIR/bench.txt" 2>&1 ||
    { cat "$DIR/bench.txt"; fail "srun --autoinfra autoinfra bench --check failed"; }
grep -q "4 ranks on 4 hosts" "$DIR/bench.txt" || { cat "$DIR/bench.txt"; fail "not 4 ranks on 4 hosts"; }
awk '/^ +[0-9]/ { n++; if ($NF != 0) bad++ } END { exit !(n >= 7 && !bad) }' "$DIR/bench.txt" ||
    { cat "$DIR/bench.txt"; fail "wrong results or missing sizes"; }
"$BIN" kb show --kb "$DIR/kb.sqlite" > "$DIR/kb.txt"
grep -q "4 ranks  4 hosts" "$DIR/kb.txt" && grep -q "allreduce" "$DIR/kb.txt" ||
    { cat "$DIR/kb.txt"; fail "the knowledge base did not grow"; }
echo "srun --autoinfra bench: $(grep -c '^ *[0-9]' "$DIR/bench.txt") sizes right; KB $(grep -c allreduce "$DIR/kb.txt") rows"

# 2. training under srun: gloo without the plugin, autoinfra with it
check_train() {
    /usr/bin/python3 - "$1" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))
assert r["world_size"] == 4 and len(r["losses"]) == 3, r
assert all(math.isfinite(x) for x in r["losses"]), r["losses"]
print("srun train %s: 4 ranks, loss %.4f -> %.4f" % (r["backend"], r["losses"][0], r["losses"][-1]))
PY
}
export PYTHONPATH="$SRC/python${PYTHONPATH:+:$PYTHONPATH}"  # autoinfra.train, srun passes it on
TRAIN="/usr/bin/python3 -m autoinfra.train --model tiny --ctx 32 --batch 4 --steps 3 --warmup 1 --seed 1 --quiet"
"$SLURM" run --timeout 150 -- srun -N4 -n4 $TRAIN --backend gloo --json "$DIR/gloo.json" ||
    fail "srun autoinfra.train on gloo failed"
check_train "$DIR/gloo.json"
"$SLURM" run --timeout 150 -- srun -N4 -n4 --autoinfra=kb:"$DIR/kb.sqlite" $TRAIN --backend autoinfra \
    --json "$DIR/autoinfra.json" || fail "srun --autoinfra autoinfra.train on autoinfra failed"
check_train "$DIR/autoinfra.json"

# 3. a bad option names itself
if "$SLURM" run --timeout 60 -- srun -N1 --autoinfra=bogus:1 true > "$DIR/bad.txt" 2>&1; then
    fail "srun --autoinfra=bogus:1 was accepted"
fi
grep -q "unknown option 'bogus:1'" "$DIR/bad.txt" || { cat "$DIR/bad.txt"; fail "no message naming bogus:1"; }

# 4. two jobs at once write one knowledge base (SQLite's lock on a local
#    file; each job's rank 0 writes, never waiting on the other): both
#    finish right and what each learned is in it
for j in 1 2; do
    coll=allreduce nodes=n0,n1
    [ "$j" = 2 ] && coll=allgather nodes=n2,n3
    "$SLURM" run --timeout 120 -- srun -N2 -n2 -w "$nodes" --autoinfra=kb:"$DIR/shared.sqlite" \
        "$BIN" bench --coll "$coll" --bytes 64K:1M --iters 30 --check > "$DIR/job$j.txt" 2>&1 &
    eval "job$j=\$!"
done
wait "$job1" || { cat "$DIR/job1.txt"; fail "the first of two jobs on one KB failed"; }
wait "$job2" || { cat "$DIR/job2.txt"; fail "the second of two jobs on one KB failed"; }
for j in 1 2; do
    awk '/^ +[0-9]/ { n++; if ($NF != 0) bad++ } END { exit !(n >= 5 && !bad) }' "$DIR/job$j.txt" ||
        { cat "$DIR/job$j.txt"; fail "job $j of two on one KB: wrong results or missing sizes"; }
done
"$BIN" kb show --kb "$DIR/shared.sqlite" > "$DIR/shared.txt"
grep -q "allreduce" "$DIR/shared.txt" && grep -q "allgather" "$DIR/shared.txt" ||
    { cat "$DIR/shared.txt"; fail "the shared KB lacks one job's learning"; }
echo "two jobs at once on one KB: both right, both in it"

# 5. nothing left behind
"$SLURM" down
for p in $pids; do
    if [ -r "/proc/$p/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$p/status"; then
        fail "process $p still runs after down"
    fi
done
if grep -qF "$SLURM_STATE" /etc/hosts; then fail "/etc/hosts keeps lines of $SLURM_STATE"; fi
echo "slurm smoke: passed"
