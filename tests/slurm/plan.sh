#!/bin/sh
# autoinfra plan --from-slurm under a real Slurm (bench/slurm, four nodes
# of 2 CPUs, a leaf switch per two nodes):
#  1. plan --from-slurm main asks scontrol for the partition's nodes and
#     switches: the cluster it builds has the 4 nodes in 2 racks, and the
#     srun line it prints runs, under Slurm, the plan's tasks (2 per node
#     on 4 nodes, each node named by SLURMD_NODENAME twice); cluster
#     from-slurm on the slurm.conf and topology.conf Slurm runs on gives
#     the same cluster;
#  2. inside an allocation of whole nodes (salloc -N2 --exclusive),
#     plan --from-slurm-job plans on the allocation's 2 nodes and its srun
#     line runs there;
#  3. a partition Slurm does not have is refused, naming those it has.
# Usage: plan.sh AUTOINFRA_BIN SOURCE_DIR SPANK_PLUGIN
set -eu
[ "$(id -u)" = 0 ] || { echo "slurm plan: skipped (needs root)"; exit 77; }
BIN=$1 SRC=$2
export AUTOINFRA_SPANK=$3
DIR=$(mktemp -d /tmp/autoinfra-slurm-plan.XXXXXX)
export SLURM_STATE="$DIR/state" SLURM_PORT_BASE=${SLURM_PORT_BASE:-27817}
SLURM="$SRC/bench/slurm"
cleanup() {
    "$SLURM" down >/dev/null 2>&1 || true
    rm -rf "$DIR"
}
trap cleanup EXIT
fail() { echo "slurm plan: $*" >&2; exit 1; }

FX="$SRC/tests/slurm/fixtures"
# autoinfra plan on the tiny model, every node's CPUs as ranks, under Slurm
splan() {
    "$SLURM" run --timeout 60 -- "$BIN" plan --device 'n*=cpu' --nic-gbps 1 --intra-GBps 5 \
        --model "$FX/tiny-model.json" --training "$FX/tiny-training.json" \
        --program 'printenv SLURMD_NODENAME' "$@"
}

"$SLURM" up 4

# 1. a partition, from scontrol
splan --from-slurm main --cluster-out "$DIR/c.json" > "$DIR/plan.txt" 2>&1 || { cat "$DIR/plan.txt"; fail "plan --from-slurm main failed"; }
"$BIN" cluster nodes "$DIR/c.json" > "$DIR/nodes.txt"
[ "$(grep -c '^node n-[0-3] n 2 1 ' "$DIR/nodes.txt")" = 4 ] && [ "$(grep -c '^rack ' "$DIR/nodes.txt")" = 2 ] ||
    { cat "$DIR/nodes.txt"; fail "the cluster from scontrol is not 4 nodes of 2 CPUs in 2 racks"; }
# the same cluster from the files Slurm runs on
"$BIN" cluster from-slurm --slurm-conf "$SLURM_STATE/slurm.conf" --topology "$SLURM_STATE/topology.conf" \
    --partition main --device 'n*=cpu' --nic-gbps 1 --intra-GBps 5 > "$DIR/c-files.json" ||
    fail "cluster from-slurm on bench/slurm's slurm.conf and topology.conf failed"
"$BIN" cluster nodes "$DIR/c-files.json" | cmp -s - "$DIR/nodes.txt" ||
    { "$BIN" cluster nodes "$DIR/c-files.json"; cat "$DIR/nodes.txt"; fail "files and scontrol give different clusters"; }
line=$(sed -n 's/^run it: //p' "$DIR/plan.txt")
[ "$line" = "srun -p main -N 4 --ntasks-per-node 2 --autoinfra printenv SLURMD_NODENAME" ] ||
    { cat "$DIR/plan.txt"; fail "unexpected srun line '$line'"; }
# shellcheck disable=SC2086
"$SLURM" run --timeout 60 -- $line > "$DIR/ran.txt" 2>&1 || { cat "$DIR/ran.txt"; fail "'$line' failed"; }
[ "$(sort "$DIR/ran.txt" | paste -sd' ' -)" = "n0 n0 n1 n1 n2 n2 n3 n3" ] ||
    { cat "$DIR/ran.txt"; fail "'$line' did not run 2 tasks on each of n0..n3"; }
echo "plan --from-slurm main: $line (ran 8 tasks on 4 nodes)"

# 2. the current allocation
cat > "$DIR/in-alloc.sh" <<SH
#!/bin/sh
set -e
"$BIN" plan --device 'n*=cpu' --nic-gbps 1 --intra-GBps 5 --model "$FX/tiny-model.json" \\
    --training "$FX/tiny-training.json" --program 'printenv SLURMD_NODENAME' --from-slurm-job \\
    > "$DIR/job.txt" 2>&1
line=\$(sed -n 's/^run it: //p' "$DIR/job.txt")
echo "\$line" > "$DIR/job-line.txt"
\$line
SH
chmod +x "$DIR/in-alloc.sh"
"$SLURM" run --timeout 90 -- salloc -N2 --exclusive "$DIR/in-alloc.sh" > "$DIR/job-ran.txt" 2>&1 ||
    { cat "$DIR/job.txt" "$DIR/job-ran.txt" 2>/dev/null; fail "plan --from-slurm-job in salloc -N2 failed"; }
[ "$(cat "$DIR/job-line.txt")" = "srun -N 2 --ntasks-per-node 2 --autoinfra printenv SLURMD_NODENAME" ] ||
    { cat "$DIR/job.txt"; fail "unexpected srun line in the allocation"; }
[ "$(grep -c '^n[0-3]$' "$DIR/job-ran.txt")" = 4 ] && [ "$(grep '^n[0-3]$' "$DIR/job-ran.txt" | sort -u | wc -l)" = 2 ] ||
    { cat "$DIR/job-ran.txt"; fail "the allocation's srun line did not run 2 tasks on each of 2 nodes"; }
echo "plan --from-slurm-job (salloc -N2): $(cat "$DIR/job-line.txt")"

# 3. a partition that is not there
if splan --from-slurm nope > "$DIR/nope.txt" 2>&1; then
    fail "plan --from-slurm nope was accepted"
fi
grep -q "no partition 'nope' (there is: main)" "$DIR/nope.txt" || { cat "$DIR/nope.txt"; fail "no message naming nope"; }

"$SLURM" down
echo "slurm plan: passed"
