#!/usr/bin/env bash
# memcapable_group.sh - memcached conformance of a coding group's data
# processes: brings up an RS(3,5) group with scripts/cluster, runs
# memccapable in ASCII (27/27 required) and binary mode against every data
# process, then checks with cocytus-cli verify that parity and backup
# metadata still match after all of it.  The trap always stops the group.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
top_srcdir=$script_dir/../..
server_bin=${COCYTUS_SERVER:-$top_srcdir/memcached/cocytus-server}
memccapable=${MEMCCAPABLE:-$(command -v memccapable || true)}
if [ -z "$memccapable" ] || [ ! -x "$memccapable" ]; then
    echo "SKIP: memccapable not installed (apt-get install libmemcached-tools)"
    exit 77
fi
build_dir=$(cd "$(dirname "$server_bin")/.." && pwd)
export COCYTUS_BUILD_DIR=$build_dir
cli=$build_dir/client/cocytus-cli
dir=$(mktemp -d "${TMPDIR:-/tmp}/memcapable_group.XXXXXX")
trap 'bash "$top_srcdir/scripts/cluster" down --dir "$dir" >/dev/null 2>&1; rm -rf "$dir"' EXIT

# A run of 10 ports that nothing uses, below the ephemeral range (client
# sockets of other tests live there) and away from other tests' ranges.
port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null &&
        ! ss -Htan 2>/dev/null | awk '{print $4}' | grep -q ":$1\$"
}
base=
for _ in $(seq 40); do
    b=$((10000 + 10 * (RANDOM % 1000)))
    ok=1
    for ((p = b; p < b + 10; p++)); do port_free "$p" || { ok=0; break; }; done
    if [ $ok = 1 ]; then base=$b; break; fi
done
[ -n "$base" ] || { echo "FAIL: no free port range"; exit 1; }

# memccapable uses its own keys on each data process: no slot routing.
bash "$top_srcdir/scripts/cluster" up --nodes 1 --scheme rs:3:5 --routing off --no-proxy --dir "$dir" --base-port "$base" ||
    { echo "FAIL: cluster up"; exit 1; }

failures=0
for hp in $(awk '$1 == "data" { print $5 }' "$dir/endpoints"); do
    for mode in -a -b; do
        out=$("$memccapable" $mode -h "${hp%:*}" -p "${hp#*:}" -t 10 2>&1)
        rc=$?
        passed=$(printf '%s\n' "$out" | grep -c '\[pass\]')
        if [ $rc -ne 0 ] || [ "$passed" -ne 27 ] || ! printf '%s\n' "$out" | grep -q 'All tests passed'; then
            echo "FAIL: memccapable $mode against data process $hp: $passed/27 passed"
            printf '%s\n' "$out" | grep -v '\[pass\]'
            failures=$((failures + 1))
        else
            echo "ok: memccapable $mode against data process $hp: 27/27"
        fi
    done
done

if "$cli" --dir "$dir" verify; then
    echo "ok: verify after memccapable"
else
    echo "FAIL: verify after memccapable"
    failures=$((failures + 1))
fi
[ $failures -eq 0 ] && echo "memcapable_group: all passed" && exit 0
exit 1
