#!/usr/bin/env bash
# memcapable_group.sh - memcached conformance of a coding group's data
# processes: brings up an RS(3,5) group with scripts/cluster, runs
# memccapable in ASCII (27/27 required) and binary mode against every data
# process, then checks with cocytus-cli verify that parity and backup
# metadata still match after all of it.  The trap always stops the group.
#
# It does so twice: with the servers' default, where a loop pass's deferred
# writes (replies completed by acknowledgements, the replication links'
# records and acks) go to the kernel in one io_uring submission
# (repl/sendq.h), and with COCYTUS_NO_IO_URING=1, one system call per
# write.  Which one ran is checked, not assumed: a process with a ring
# holds an io_uring descriptor (/proc/PID/fd).  Where the kernel refuses
# io_uring the first pass is the fallback too, and says so.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_memccapable
cli=$build_dir/client/cocytus-cli
dir=""
cleanup() {
    cluster_remove "$dir"
    dir=""
}
on_exit cleanup

# uring_fds PID: io_uring descriptors the process holds.
uring_fds() {
    local n=0 f
    for f in /proc/"$1"/fd/*; do
        case $(readlink "$f" 2>/dev/null) in *io_uring*) n=$((n + 1)) ;; esac
    done
    echo "$n"
}

for mode in batched unbatched; do
    echo "=== $mode writes"
    dir=$(mktemp -d "${TMPDIR:-/tmp}/memcapable_group.XXXXXX")
    # memccapable uses its own keys on each data process: no slot routing.
    # Its 5 processes and the coordinator take 12 ports, below the
    # ephemeral range (client sockets of other tests live there) and away
    # from other tests'.
    if [ "$mode" = batched ]; then
        cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy
    else
        COCYTUS_NO_IO_URING=1 cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 \
            --routing off --no-proxy
    fi || { fail "cluster up ($mode)"; exit 1; }

    rings=0
    for pid in $(awk '$1 == "data" || $1 == "parity" { print $6 }' "$dir/endpoints"); do
        rings=$((rings + $(uring_fds "$pid")))
    done
    if [ "$mode" = unbatched ]; then
        [ "$rings" -eq 0 ] && ok "COCYTUS_NO_IO_URING=1: no process holds an io_uring" \
            || fail "COCYTUS_NO_IO_URING=1, yet $rings io_uring descriptor(s) open"
    elif [ "$rings" -eq 5 ]; then
        ok "each of the 5 processes batches its writes with an io_uring"
    else
        echo "note: $rings of 5 processes hold an io_uring (kernel or sandbox without it?):" \
             "this pass tests the unbatched path as well"
    fi

    for hp in $(awk '$1 == "data" { print $5 }' "$dir/endpoints"); do
        for m in -a -b; do
            memccapable_check "data process $hp ($mode)" "$m" "$hp" 90 10
        done
    done

    if "$cli" --dir "$dir" verify; then
        ok "verify after memccapable ($mode)"
    else
        fail "verify after memccapable ($mode)"
    fi
    cluster_remove "$dir"
    dir=""
done
finish
