#!/usr/bin/env bash
# garbage_pbr.sh - a PBR primary survives garbage.  test_garbage's barrages
# (random bytes; broken text, meta and binary requests; pipelines whose
# replies nobody reads; connections closed, reset or abandoned
# mid-request) go straight to the primary of a PBR(2) group (scripts/cluster:
# one node, a primary and two backups, full sync, its coordinator, no
# restarts).  After every round the primary and both backups must still
# run, a fresh value must store and read back, and every value stored
# before the barrages must come back byte for byte; at the end both backups
# must hold what the primary holds (cocytus-cli verify).  The trap stops
# everything.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
garbage_bin=${COCYTUS_GARBAGE:-$build_dir/test/integration/test_garbage}

need_built "$server_bin" "$garbage_bin" "$build_dir/client/cocytus-cli" "$build_dir/cocytus/cocytus-node"

dir=""
cleanup() {
    cluster_remove "$dir"
    dir=""
}
on_exit cleanup

dir=$(mktemp -d "${TMPDIR:-/tmp}/garbage-pbr.XXXXXX")
# 3 servers and the coordinator: 2 ports each
if ! cluster_up "$dir" 8 12000 20000 --nodes 1 --scheme pbr:2 --no-proxy --restart off; then
    fail "scripts/cluster up --nodes 1 --scheme pbr:2"
    finish
fi
primary=$(awk '$1 == "primary" { print $5; exit }' "$dir/endpoints")
pids=$(awk '$1 == "primary" || $1 == "backup" { printf "%s ", $6 }' "$dir/endpoints")
if [ -z "$primary" ]; then
    fail "no primary in $dir/endpoints"
    finish
fi
echo "primary: $primary; processes that must stay up: $pids"

if GARBAGE_PORT=${primary##*:} GARBAGE_PIDS=$pids "$garbage_bin"; then
    ok "test_garbage at a PBR primary"
else
    fail "test_garbage at a PBR primary"
    for log in "$dir"/primary-*.log "$dir"/backup-*.log; do
        [ -f "$log" ] || continue
        echo "---- $log (tail) ----"
        tail -n 10 "$log"
    done
fi

cluster_check_ok "$dir" verify "after the barrages"
finish
