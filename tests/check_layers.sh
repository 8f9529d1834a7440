#!/bin/sh
# The layering of docs/architecture.md, checked on the #include lines and
# calls of the sources (grep only: well under a second).
#
#  1. src/<layer> includes headers of its own layer or of layers below it,
#     in the order util <- balance <- topo <- model <- comm <- tune <- api
#     <- plan <- sim <- cli.
#  2. Layers above comm reach comm through its narrow headers only
#     (comm/comm.h, comm/algo_registry.h, comm/select/*.h, and the faces
#     of the transport and fault-tolerance rooms, comm/transport/engine.h
#     and comm/ft/ft.h), never the algorithm or kernel rooms nor the
#     transport or ft rooms' own pieces.
#  3. Inside comm, transport/ and kernel/ include nothing of algo/, select/
#     or ft/ (the rooms built on them) nor comm/algo_registry.h; kernel/
#     includes no comm header but its own; of comm's root headers the
#     transport room includes comm/object.h only (the communicator
#     object's layout; never comm/comm.h, the lifecycle), in transport.h
#     only, and engine.h, its face, none.
#  3b. The rest of comm reaches the transport room through its face,
#     comm/transport/engine.h: algo/, select/, coll.c and p2p.c include no
#     other transport header (comm.c, which builds the transports, and
#     ft/, which rebuilds them, use transport.h too).
#  4. plan's two rooms stand apart: plan/spec (the spec planner) and
#     plan/job (the training-job planner) include nothing of each other,
#     and no source sits in src/plan outside them.
#  5. src/cli and plugins/ include autoinfra.h, autoinfra/introspect.h and
#     their own headers only.
#  6. No per-collective algorithm file (src/comm/algo/*.c but core_*.c and
#     registry.c) calls an algorithm another per-collective file defines:
#     shared steps live in the cores.
#  7. The library reads the environment only through util's table of
#     settings (src/util/param.c): no file of a layer outside src/util
#     calls getenv, secure_getenv or the ai_env_* helpers. (The CLI is a
#     program, not the library: its launcher reads PATH and builds its
#     children's environments.)
#
# Usage: check_layers.sh SOURCE_DIR. Exit 1 listing every violation.
root=${1:-.}
cd "$root" || exit 2
order="util balance topo model comm tune api plan sim cli"
bad=0

rank_of() {
    i=0
    for l in $order; do
        [ "$l" = "$1" ] && { echo $i; return; }
        i=$((i + 1))
    done
    echo -1
}

fail() {
    echo "check_layers: $*" >&2
    bad=1
}

# file:line:header for every quoted include under $1.
includes() {
    grep -rn --include='*.c' --include='*.h' --include='*.cc' --include='*.cpp' \
        '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$@" 2>/dev/null |
        sed 's/^\([^:]*:[0-9]*\):.*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1:\2/'
}

for layer in $order; do
    [ -d "src/$layer" ] || continue
    me=$(rank_of "$layer")
    for hit in $(includes "src/$layer"); do
        where=${hit%:*}
        hdr=${hit##*:}
        case "$hdr" in
        autoinfra/introspect.h) # the unstable public header
            continue ;;
        */*) ;;
        *) # a header next to the file (cli.h) or the public one
            continue ;;
        esac
        dep=${hdr%%/*}
        them=$(rank_of "$dep")
        if [ "$them" -lt 0 ]; then
            fail "$where: includes \"$hdr\", not a layer's header"
            continue
        fi
        if [ "$them" -gt "$me" ]; then
            fail "$where: layer $layer includes \"$hdr\" of $dep, a layer above it"
        fi
        if [ "$dep" = comm ] && [ "$me" -gt "$(rank_of comm)" ]; then
            case "$hdr" in
            comm/comm.h | comm/algo_registry.h | comm/select/*.h | comm/ft/ft.h | \
                comm/transport/engine.h) ;;
            *) fail "$where: $layer includes comm's private \"$hdr\"" ;;
            esac
        fi
    done
done

for hit in $(includes src/comm/transport src/comm/kernel); do
    case "${hit##*:}" in
    comm/algo/* | comm/select/* | comm/ft/* | comm/algo_registry.h)
        fail "${hit%:*}: includes \"${hit##*:}\" of a comm room above it" ;;
    esac
done
for hit in $(includes src/comm/kernel); do
    case "${hit##*:}" in
    comm/kernel/*) ;;
    comm/*) fail "${hit%:*}: includes \"${hit##*:}\"; the kernels include only their own headers" ;;
    esac
done
for hit in $(includes src/comm/transport); do
    where=${hit%:*}
    case "${hit##*:}" in
    comm/transport/* | comm/kernel/*) ;;
    comm/object.h)
        [ "${where%%:*}" = src/comm/transport/transport.h ] ||
            fail "$where: includes \"comm/object.h\"; in the transport room only transport.h does (the object's layout)" ;;
    comm/*) fail "$where: includes \"${hit##*:}\", a comm header above the transport room" ;;
    esac
done
for hit in $(includes src/comm/algo src/comm/select src/comm/coll.c src/comm/p2p.c); do
    case "${hit##*:}" in
    comm/transport/engine.h) ;;
    comm/transport/*) fail "${hit%:*}: includes \"${hit##*:}\"; the rest of comm reaches the transports through comm/transport/engine.h" ;;
    esac
done

for room in spec job; do
    [ -d "src/plan/$room" ] || fail "src/plan/$room: missing"
    for hit in $(includes "src/plan/$room"); do
        case "${hit##*:}" in
        plan/"$room"/*) ;;
        plan/*) fail "${hit%:*}: plan/$room includes \"${hit##*:}\" of another plan room" ;;
        esac
    done
done
for f in src/plan/*.c src/plan/*.h; do
    [ -e "$f" ] && fail "$f: plan's sources live in its rooms (src/plan/spec, src/plan/job)"
done

for hit in $(includes src/cli plugins); do
    case "${hit##*:}" in
    autoinfra/introspect.h) ;;
    */*) fail "${hit%:*}: includes \"${hit##*:}\"; cli and plugins use autoinfra.h (and autoinfra/introspect.h) only" ;;
    esac
done

algos=src/comm/algo/algos.h
if [ -f "$algos" ]; then
    files=$(ls src/comm/algo/*.c | grep -v -e '/core_[^/]*\.c$' -e '/registry\.c$')
    # One awk over algos.h and the files: an algos.h name called in a file
    # that does not define it.
    out=$(awk '
        FNR == 1 { nfile++ }
        nfile == 1 { if (match($0, /^ai_status_t comm_[a-z0-9_]*\(/))
                         algo[substr($0, 13, RLENGTH - 13)] = 1
                     next }
        match($0, /^ai_status_t comm_[a-z0-9_]*\(/) { def[FILENAME, substr($0, 13, RLENGTH - 13)] = 1 }
        { line = $0
          while (match(line, /comm_[a-z0-9_]*\(/)) {
              n = substr(line, RSTART, RLENGTH - 1)
              if (n in algo) use[FILENAME, n] = 1
              line = substr(line, RSTART + RLENGTH)
          } }
        END { for (k in use) if (!(k in def)) { split(k, a, SUBSEP); print a[1] ": calls " a[2] } }
    ' "$algos" $files)
    if [ -n "$out" ]; then
        echo "$out" | while read -r l; do
            echo "check_layers: $l, an algorithm of another per-collective file (use a core)" >&2
        done
        bad=1
    fi
else
    fail "$algos: missing"
fi

for layer in $order; do
    [ "$layer" = util ] || [ "$layer" = cli ] || [ ! -d "src/$layer" ] && continue
    hits=$(grep -rnE --include='*.c' --include='*.h' '(^|[^a-z_])(secure_)?getenv[[:space:]]*\(|ai_env_[a-z]+[[:space:]]*\(' "src/$layer")
    if [ -n "$hits" ]; then
        echo "$hits" | cut -d: -f1,2 | while IFS= read -r h; do
            echo "check_layers: $h: reads the environment; use util_param_* (src/util/param.c)" >&2
        done
        bad=1
    fi
done

[ $bad -eq 0 ] && echo "check_layers: ok"
exit $bad
