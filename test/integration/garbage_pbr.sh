#!/usr/bin/env bash
# garbage_pbr.sh - a PBR primary survives garbage.  test_garbage's barrages
# (random bytes; broken text, meta and binary requests; pipelines whose
# replies nobody reads; connections closed, reset or abandoned
# mid-request) go straight to the primary of a PBR(2) group (scripts/cluster:
# one node, a primary and two backups, full sync, its coordinator, no
# restarts).  After every round the primary and both backups must still
# run, a fresh value must store and read back, and every value stored
# before the barrages must come back byte for byte.  Meanwhile
# link_garbage.py sends unauthenticated frames and bad HELLOs to both
# backups' link ports (see garbage_links.sh), each of which must be refused
# in time.  At the end each backup's link port holds only the primary's
# link, no log holds a non-printable byte or a forged line, and both
# backups hold what the primary holds (cocytus-cli verify).  The trap stops
# everything.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
garbage_bin=${COCYTUS_GARBAGE:-$build_dir/test/integration/test_garbage}

need_built "$server_bin" "$garbage_bin" "$build_dir/client/cocytus-cli" "$build_dir/cocytus/cocytus-node"
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: python3 is not installed (link_garbage.py)"
    exit 77
fi

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

cluster=$(awk '$1 == "cluster" { print $2 }' "$dir/cluster.conf")
secret=$(awk '$1 == "secret" { print $2 }' "$dir/cluster.conf")
lg_pids=""
lg_ports=""
seed=11
while read -r pid client; do
    port=$(link_port_of "$pid" "$client")
    if [ -z "$port" ]; then
        fail "no link port for the backup with pid $pid"
        continue
    fi
    python3 "$script_dir/link_garbage.py" --port "$port" --cluster "$cluster" --secret "$secret" \
        --seed "$seed" --seconds 4 --conns 8 >"$dir/link-garbage-$port.out" 2>&1 &
    lg_pids="$lg_pids $!"
    lg_ports="$lg_ports $port"
    seed=$((seed + 1))
done < <(awk '$1 == "backup" { n = split($5, a, ":"); print $6, a[n] }' "$dir/endpoints")

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

set -- $lg_ports
for lg in $lg_pids; do
    port=$1
    shift
    if wait "$lg"; then
        ok "link garbage at the backup's link port $port: $(grep -o 'connections.*' "$dir/link-garbage-$port.out")"
    else
        fail "link garbage at the backup's link port $port"
        cat "$dir/link-garbage-$port.out"
    fi
    if wait_for 30 port_holds "$port" 1; then
        ok "the backup's link port $port holds the primary's link and nothing else"
    else
        fail "the backup's link port $port holds $(established "$port") connections, want 1"
    fi
done
logs_printable "$dir"

cluster_check_ok "$dir" verify "after the barrages"
finish
