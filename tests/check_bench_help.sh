#!/bin/sh
# Every flag of every bench/ driver says what it does: each option line of
# `--help` carries words after the flag (argparse's help=, or the usage
# text of the shell drivers), and the drivers that take no argparse parser
# answer --help with status 0.
#
# Usage: check_bench_help.sh SOURCE_DIR. Exit 1 listing every bare flag.
root=${1:-.}
cd "$root/bench" || exit 2
bad=0
for d in ab chaos compare learn-eval plan-baselines plan-fidelity shim-bench testbed testbed-speed \
         torch-overhead train-compare train-faults vs-ompi regime-ab gloo_bench.py ab-summary.py \
         compare-kb-summary.py hetero-summary.py learn-summary.py peer-to-kb.py prior-error.py; do
    case $d in *.py) cmd="/usr/bin/python3 ./$d" ;; *) cmd="./$d" ;; esac
    out=$($cmd --help 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "check_bench_help: bench/$d --help: exit status $rc" >&2
        bad=1
        continue
    fi
    # An option line: two spaces, a dash. Bare when it holds nothing past
    # the flag and its metavar, and the next line is not its indented text.
    bare=$(printf '%s\n' "$out" | awk '
        function flush() { if (pending != "") print pending; pending = "" }
        /^  -?-[A-Za-z]/ {
            flush()
            line = $0
            sub(/^ +/, "", line)
            # flag [METAVAR][, flag [METAVAR]] then two spaces and words
            if (line !~ /  +[^ ]/) pending = line
            next
        }
        /^        +[^ ]/ { pending = ""; next }
        { flush() }
        END { flush() }')
    if [ -n "$bare" ]; then
        printf '%s\n' "$bare" | while IFS= read -r l; do
            echo "check_bench_help: bench/$d: '$l' says nothing" >&2
        done
        bad=1
    fi
done
[ $bad -eq 0 ] && echo "check_bench_help: ok"
exit $bad
