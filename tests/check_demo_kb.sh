#!/bin/sh
# `make demo` and the README agree on the knowledge base the demo learns
# into: the README's `kb` commands after the demo name it with --kb, and
# the demo prints and runs exactly that `kb show`.
#
# Usage: check_demo_kb.sh SOURCE_DIR. Exit 1 naming what disagrees.
root=${1:-.}
cd "$root" || exit 2
bad=0
fail() {
    echo "check_demo_kb: $*" >&2
    bad=1
}
# The demo's KB, with the default build directory.
kb=$(sed -n 's/^export AUTOINFRA_KB="\$BUILD\/\(.*\)"$/build\/\1/p' scripts/demo)
[ -n "$kb" ] || fail "scripts/demo: no 'export AUTOINFRA_KB=\"\$BUILD/...\"' line"
# Every `kb show` / `kb log` / `kb export*` in the README names it.
grep -n 'autoinfra kb \(show\|log\|export\)' README.md | while IFS= read -r line; do
    case "$line" in
    *"--kb $kb"*) ;;
    *) echo "check_demo_kb: README.md:${line%%:*}: a kb command without --kb $kb (the demo's KB)" >&2
       echo x ;;
    esac
done | grep -q x && bad=1
grep -q "autoinfra kb show --kb $kb" README.md ||
    fail "README.md: no 'build/autoinfra kb show --kb $kb'"
# The demo runs `kb show` on its KB and prints that command.
grep -q '"$BIN" kb show --kb "$AUTOINFRA_KB"' scripts/demo ||
    fail "scripts/demo: 'kb show' does not name its KB (--kb \"\$AUTOINFRA_KB\")"
grep -q 'echo .*\$BIN kb show --kb \$AUTOINFRA_KB' scripts/demo ||
    fail "scripts/demo: does not print the kb show command it runs"
exit $bad
