#!/usr/bin/env bash
# stale_read_cut.sh - a data process cut off from the coordinator only is
# taken over, and no read it answers after the takeover's first write
# returns an older value.
#
# Cut off from the coordinator, a data process still talks to its parity
# processes and clients: the coordinator declares it dead (no heartbeat for
# 1.5 s) and a parity process takes its keys over, while the process itself
# goes on answering reads from its table.  Its reads are served only within
# a lease from every parity process of its ack set (repl/link.h: 0.7 s from
# a PING they answered), and a parity process that fences it answers the
# coordinator's "prepare" only once any lease it gave has run out, so the
# recovery process takes no write before the cut-off process stopped
# answering reads.  Before 2026-12-05 the cut-off process answered reads
# from its old table for the whole cut: a read that started after a newer
# value was stored through the recovery process returned the old one.
#
# The cut is a test fault: with COCYTUS_TEST_MUTE_DIR set, a process says
# and takes nothing on its coordinator links while DIR/mute-<role>-<g>-<i>
# exists (cluster/coord_client.c).
#
# The same holds for a PBR primary: it serves reads only within a lease
# from every backup of its ack set, and a backup answers the coordinator's
# fence only once that lease ran out.
#
# One node, a coordinator, no proxy, routing off; RS(3,5), then PBR(2).
# k = old through data process 0 (the primary); a reader gets k through it
# in a loop (a new connection each time, 1 s timeout); the process is cut
# off from the coordinator; once parity process 0 serves its keys (a backup
# is promoted), k = new through it.  Then:
#   - a parity process (a backup) waited for the lease before answering;
#   - no get that started after the STORED of new returned old;
#   - the reader got old before the cut, and its gets ended unanswered
#     after the lease ran out.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli"

dir=""
reader_pid=""
cleanup() {
    [ -n "$dir" ] && touch "$dir/stop-reader" 2>/dev/null
    [ -n "$reader_pid" ] && kill "$reader_pid" 2>/dev/null
    cluster_remove "$dir"
}
on_exit cleanup

# reader ADDR: gets k through ADDR until DIR/stop-reader (at most 30 s and
# 3000 gets); one line per get: "<start us> <end us> <value or none>".
reader() {
    local n=0 value t0 t1 end=$((SECONDS + 30))
    while [ ! -e "$dir/stop-reader" ] && [ "$n" -lt 3000 ] && [ "$SECONDS" -lt "$end" ]; do
        n=$((n + 1))
        t0=${EPOCHREALTIME/./}
        value=$(MC_TIMEOUT=1 mc "$1" "get k\r\n" | sed -n 2p)
        t1=${EPOCHREALTIME/./}
        echo "$t0 $t1 ${value:-none}" >>"$dir/reader.out"
    done
}

# promoted_addr SCHEME: the client address of the process that serves the
# cut-off process's keys, once the coordinator says it does ("" before).
promoted_addr() {
    local member
    if [ "$1" = rs ]; then
        grep -q "group 0 dp 0 is served by parity process 0" "$dir/coordinator.log" &&
            group0_addr "$dir" parity 0
    else
        member=$(sed -n 's/.*group 0 is served by member \([0-9]*\).*/\1/p' "$dir/coordinator.log" |
            head -1)
        [ -n "$member" ] && group0_addr "$dir" backup "$member"
    fi
}

# cut SCHEME OPTIONS...: the whole check for one kind of group.
cut() {
    local scheme=$1 victim_role name victim old_before stale after unanswered waited reply stored
    shift
    dir=$(mktemp -d "${TMPDIR:-/tmp}/stale_read_cut.XXXXXX")
    rm -f "$dir"/stop-reader
    export COCYTUS_TEST_MUTE_DIR=$dir
    cluster_up "$dir" 12 10000 20000 --nodes 1 "$@" --routing off --no-proxy ||
        { fail "$scheme: cluster up"; return; }
    if [ "$scheme" = rs ]; then
        victim_role=data name="data process 0"
    else
        victim_role=primary name="primary"
    fi
    victim=$(group0_addr "$dir" "$victim_role" 0)
    reply=$(mc "$victim" "set k 0 0 3\r\nold\r\n")
    [ "$reply" = STORED ] && ok "$scheme: k = old through the $name" ||
        { fail "$scheme: set k: $reply"; return; }
    reader "$victim" &
    reader_pid=$!
    sleep 0.3

    touch "$dir/mute-$victim_role-0-0"
    if wait_for 150 eval '[ -n "$(promoted_addr "$scheme")" ]'; then
        ok "$scheme: $(promoted_addr "$scheme") serves the keys of the $name, cut off from the coordinator"
    else
        grep "group 0" "$dir/coordinator.log" | tail -8
        fail "$scheme: nobody took the keys of the cut-off $name over"
        return
    fi
    reply=$(MC_TIMEOUT=10 mc "$(promoted_addr "$scheme")" "set k 0 0 3\r\nnew\r\n")
    stored=${EPOCHREALTIME/./}
    [ "$reply" = STORED ] && ok "$scheme: k = new through the process that took over" ||
        fail "$scheme: set k through the process that took over: '${reply:-nothing in 10 s}'"
    sleep 2.5
    touch "$dir/stop-reader"
    wait "$reader_pid"
    reader_pid=""

    waited=$(cat "$dir"/*.log | grep -h "may serve reads for" | head -1)
    [ -n "$waited" ] && ok "$scheme: the fence waited for the lease: ${waited#*: }" ||
        fail "$scheme: no fence waited for the cut-off process's lease"
    old_before=$(awk -v s="$stored" '$2 < s && $3 == "old"' "$dir/reader.out" | wc -l)
    stale=$(awk -v s="$stored" '$1 > s && $3 == "old"' "$dir/reader.out" | wc -l)
    after=$(awk -v s="$stored" '$1 > s' "$dir/reader.out" | wc -l)
    unanswered=$(awk -v s="$stored" '$1 > s && $3 == "none"' "$dir/reader.out" | wc -l)
    [ "$old_before" -gt 0 ] && ok "$scheme: the reader got old $old_before times before new was stored" ||
        fail "$scheme: the reader never got old before new was stored: the test proves nothing"
    [ "$stale" -eq 0 ] && ok "$scheme: no get that started after new was stored returned old ($after gets)" ||
        fail "$scheme: $stale of $after gets that started after new was stored returned old (stale reads)"
    [ "$after" -gt 0 ] && [ "$unanswered" -eq "$after" ] &&
        ok "$scheme: the cut-off $name answered none of them (no lease)" ||
        fail "$scheme: of $after gets after new was stored, $unanswered went unanswered, not all"
    rm -f "$dir/mute-$victim_role-0-0"
    cluster_remove "$dir"
    dir=""
}

cut rs --scheme rs:3:5
cut pbr --scheme pbr:2
finish
