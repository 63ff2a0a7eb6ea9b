#!/usr/bin/env bash
# zk_coordinator.sh - the coordinator on ZooKeeper (docs/operations.md,
# "Coordinators on ZooKeeper"): the default cluster (5 nodes, RS(3,5)) with
# a private ZooKeeper and two coordinators, under the verified load of
# scripts/drill rs.  Twice:
#   1. a data process is SIGKILLed and, 50 ms later, during its recovery,
#      the leading coordinator: the waiting one is elected, reads the state
#      and finishes the takeover, the migration back and the rebuild;
#   2. the leading coordinator is SIGKILLed first and the data process
#      right after: the process dies and comes back while nobody leads, and
#      the new leader must see it from its new pid.
# Each run must end with every slot served, every group healthy, no
# acknowledged write lost, no stale read, no client error, cocytus-cli
# verify and decode-check clean, one leader change, and an epoch (read from
# the leader all along) that never went back.
#   3. a slot move whose leader dies after sending "migrate" (the source is
#      stopped meanwhile): the next leader finds the move in the saved
#      state and commits it once the source reports the move's epoch.  Skipped (77) without
# ZooKeeper (zookeeperd) or a build without libzookeeper-mt-dev.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$build_dir/bench/drill-writer" "$build_dir/bench/cocytus-bench" \
    "$build_dir/client/cocytus-cli" "$build_dir/client/cocytus-proxy" \
    "$build_dir/cocytus/cocytus-node"
if ! grep -q '^#define HAVE_ZOOKEEPER 1' "$build_dir/config.h" 2>/dev/null; then
    echo "SKIP: built without the ZooKeeper C client (apt-get install libzookeeper-mt-dev, configure again)"
    exit 77
fi
if ! why=$(bash "$top_srcdir/scripts/zookeeper" check); then
    echo "SKIP: $why"
    exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/zk_coordinator.XXXXXX")
cleanup() {
    local d
    for d in "$dir"/*/; do
        [ -f "$d/cluster.conf" ] && bash "$top_srcdir/scripts/cluster" down --dir "$d" >/dev/null 2>&1
    done
    rm -rf "$dir"
}
on_exit cleanup

run_drill() {
    local name=$1 out rc line bad
    shift
    out=$(bash "$top_srcdir/scripts/drill" rs --kill dp --during-load --seconds 5 --zookeeper \
        --dir "$dir/$name" "$@" 2>&1)
    rc=$?
    line=$(printf '%s\n' "$out" | grep "^drill rs kill dp")
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        printf '%s\n' "$out" | tail -20
        # the load's own failures (client_errors): what the requests were told
        grep -h "^cocytus-bench: connection" "$dir/$name/bench.out" 2>/dev/null | head -8
        [ -s "$dir/$name/writer.log" ] && tail -5 "$dir/$name/writer.log"
        for f in "$dir/$name"/coordinator*.log; do
            [ -f "$f" ] && { echo "--- $f"; grep -v ZOO_ "$f" | tail -25; }
        done
        fail "$name: drill exited $rc: ${line:-no result line}"
        return
    fi
    case $line in
        *"epoch_back 0, leader_changes "[1-9]*) ok "$name: $line" ;;
        *) fail "$name: no leader change or the epoch went back: $line" ;;
    esac
    bad=$(grep -l -E "AddressSanitizer|LeakSanitizer|runtime error" "$dir/$name"/*.log 2>/dev/null)
    [ -z "$bad" ] || { grep -h -A 20 -E "AddressSanitizer|LeakSanitizer|runtime error" $bad | head -60;
                       fail "$name: sanitizer report in $bad"; }
}

# The coordinator that listens (the leader) among DIR/coordinators.
leader_of() {
    local hp
    for hp in $(cat "$1/coordinators"); do
        if (exec 3<>"/dev/tcp/${hp%:*}/${hp##*:}") 2>/dev/null; then
            echo "$hp"
            return 0
        fi
    done
    return 1
}

admin_line() {  # admin_line DIR HOST:PORT COMMAND: the first reply line (authenticated)
    ctl "$1" "$2" "$3" | head -n 1
}

move_across_leaders() {
    local d=$dir/move leader lpid src reply moves epoch
    if ! bash "$top_srcdir/scripts/cluster" up --zookeeper --scheme plain --nodes 3 --no-proxy \
        --dir "$d" >"$dir/move-up.log" 2>&1; then
        tail -20 "$dir/move-up.log"
        fail "move: cluster up --zookeeper failed"
        return
    fi
    leader=$(leader_of "$d") || { fail "move: no coordinator leads"; return; }
    lpid=$(pgrep -f -- "--role coordinator --cluster $d/cluster.conf -l ${leader%:*} -p ${leader##*:}( |\$)")
    src=$(awk '$3 == 0 && $4 == 0 { print $6 }' "$d/endpoints")
    sleep 1     # every process said hello
    kill -STOP "$src"
    reply=$(admin_line "$d" "$leader" "cocytus move 7 2")
    kill -KILL "$lpid"
    sleep 0.2
    kill -CONT "$src"
    case $reply in
        "OK moving 7 "*) ;;
        *) fail "move: the leader answered '$reply'"; return ;;
    esac
    local new=""
    for _ in $(seq 150); do
        new=$(leader_of "$d") && [ "$new" != "$leader" ] &&
            moves=$(ctl "$d" "$new" "cocytus moves") &&
            grep -q "^move 7 .* done" <<<"$moves" && break
        sleep 0.1
    done
    epoch=$(admin_line "$d" "${new:-$leader}" "cocytus status")
    if grep -q "^move 7 .* done" <<<"${moves:-}" && [ "$epoch" = "epoch 2" ]; then
        ok "move: the next leader ($new) finished the move of slot 7 started by $leader ($epoch)"
    else
        grep -v ZOO_ "$d"/coordinator*.log | tail -20
        fail "move: not finished by the next leader (moves: ${moves:-none}; $epoch)"
    fi
}

run_drill leader-during-recovery --kill-leader --leader-delay-ms 50
run_drill leader-before-death --leader-first --leader-delay-ms 0
move_across_leaders
finish
