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
# the leader all along) that never went back.  Skipped (77) without
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

run_drill leader-during-recovery --kill-leader --leader-delay-ms 50
run_drill leader-before-death --leader-first --leader-delay-ms 0
finish
