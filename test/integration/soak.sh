#!/usr/bin/env bash
# soak.sh - make-check run of the randomized kill drills (scripts/drill soak,
# docs/recovery.md): three rounds on the default cluster (5 nodes, RS(3,5),
# coordinator, proxy, nodes that restart dead processes), one of each kind
# in turn: SIGKILL to a data process, to a parity process, and to a whole
# node that is started again.  Each round must end with every group back at
# full redundancy by itself, every acknowledged write found, no stale read
# and cocytus-cli verify clean; no server may report a sanitizer error.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$build_dir/bench/drill-writer" "$build_dir/bench/cocytus-bench" \
    "$build_dir/client/cocytus-cli" "$build_dir/client/cocytus-proxy" \
    "$build_dir/cocytus/cocytus-node"
dir=$(mktemp -d "${TMPDIR:-/tmp}/soak.XXXXXX")
cleanup() {
    bash "$top_srcdir/scripts/cluster" down --dir "$dir/soak" >/dev/null 2>&1
    pkill -KILL -f -- "--cluster $dir/soak/cluster.conf" 2>/dev/null
    rm -rf "$dir"
}
on_exit cleanup

out=$(COCYTUS_BUILD_DIR=$build_dir bash "$top_srcdir/scripts/drill" soak --rounds 3 \
    --kinds dp,pp,node --cycle --seconds 6 --records 3000 --full-timeout 40 --seed 11 \
    --dir "$dir/soak" --keep 2>&1)
rc=$?
printf '%s\n' "$out" | grep -E "^drill soak round" | while IFS= read -r line; do ok "$line"; done
summary=$(printf '%s\n' "$out" | grep "^drill soak: 3 rounds")
if [ $rc -ne 0 ] || [ -z "$summary" ]; then
    printf '%s\n' "$out" | tail -30
    tail -20 "$dir/soak/coordinator.log" 2>/dev/null
    fail "drill soak exited $rc: ${summary:-no summary}"
else
    ok "$summary"
fi
rows=$(grep -c '' "$dir/soak/soak.csv" 2>/dev/null)
[ "${rows:-0}" = 4 ] || fail "soak.csv has ${rows:-no} lines, want a header and 3 rows"
bad=$(grep -l -E "AddressSanitizer|LeakSanitizer|runtime error" "$dir/soak"/*.log 2>/dev/null)
[ -z "$bad" ] || { grep -h -A 20 -E "AddressSanitizer|LeakSanitizer|runtime error" $bad | head -60;
                   fail "drill soak: sanitizer report in $bad"; }
finish
