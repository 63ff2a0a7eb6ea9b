#!/usr/bin/env bash
# memcapable_group.sh - memcached conformance of a coding group's data
# processes: brings up an RS(3,5) group with scripts/cluster, runs
# memccapable in ASCII (27/27 required) and binary mode against every data
# process, then checks with cocytus-cli verify that parity and backup
# metadata still match after all of it.  The trap always stops the group.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_memccapable
cli=$build_dir/client/cocytus-cli
dir=$(mktemp -d "${TMPDIR:-/tmp}/memcapable_group.XXXXXX")
cleanup() {
    cluster_remove "$dir"
}
on_exit cleanup

# memccapable uses its own keys on each data process: no slot routing.  Its
# 5 processes and the coordinator take 12 ports, below the ephemeral range
# (client sockets of other tests live there) and away from other tests'.
cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy \
    || { fail "cluster up"; exit 1; }

for hp in $(awk '$1 == "data" { print $5 }' "$dir/endpoints"); do
    for mode in -a -b; do
        memccapable_check "data process $hp" "$mode" "$hp" 90 10
    done
done

if "$cli" --dir "$dir" verify; then
    ok "verify after memccapable"
else
    fail "verify after memccapable"
fi
finish
