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
#     after the lease ran out;
#   - a set through the cut-off process is not acknowledged.
# In RS(3,5), then the recovery process itself (parity process 0) is cut
# off the same way: parity process 1 takes data process 0's keys over in
# turn, and fences the recovery process's stream.  Before 2026-12-05 it did
# not (a "prepare" fenced a stream only the first time), so the cut-off
# recovery process's writes were still acknowledged.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli"

dir=""
reader_pid=""
cleanup() {
    [ -n "$reader_pid" ] && kill "$reader_pid" 2>/dev/null
    cluster_remove "$dir"
}
on_exit cleanup

# reader ADDR NAME: gets k through ADDR until DIR/stop-reader-NAME (at most
# 30 s and 3000 gets); one line per get in DIR/reader-NAME.out:
# "<start us> <end us> <value or none>".
reader() {
    local n=0 value t0 t1 end=$((SECONDS + 30))
    while [ ! -e "$dir/stop-reader-$2" ] && [ "$n" -lt 3000 ] && [ "$SECONDS" -lt "$end" ]; do
        n=$((n + 1))
        t0=${EPOCHREALTIME/./}
        value=$(MC_TIMEOUT=1 mc "$1" "get k\r\n" | sed -n 2p)
        t1=${EPOCHREALTIME/./}
        echo "$t0 $t1 ${value:-none}" >>"$dir/reader-$2.out"
    done
}

# served_by LINE ROLE: the client address of group 0's ROLE N, once the
# coordinator logged "LINE N" ("" before).
served_by() {
    local n
    n=$(grep -o "$1 [0-9]*" "$dir/coordinator.log" | head -1 | awk '{ print $NF }')
    [ -n "$n" ] && group0_addr "$dir" "$2" "$n"
}

# cut_once NAME VICTIM MUTE LINE ROLE OLD NEW: cuts VICTIM (an address) off
# from the coordinator by touching DIR/MUTE, waits for the coordinator's
# "LINE N", stores k = NEW through group 0's ROLE N and checks that no get
# of k through VICTIM that started after that returned OLD.
cut_once() {
    local name=$1 victim=$2 mute=$3 line=$4 role=$5 old=$6 new=$7
    local out="$dir/reader-$name.out" waits_before waited to reply stored
    local before stale after unanswered
    waits_before=$(cat "$dir"/*.log | grep -c "may serve reads for")
    reader "$victim" "$name" &
    reader_pid=$!
    sleep 0.3
    touch "$dir/$mute"
    if wait_for 150 eval '[ -n "$(served_by "$line" "$role")" ]'; then
        to=$(served_by "$line" "$role")
        ok "$name: $to serves the keys of the cut-off process"
    else
        grep "group 0" "$dir/coordinator.log" | tail -8
        fail "$name: nobody took the keys of the cut-off process over"
        touch "$dir/stop-reader-$name"
        return 1
    fi
    reply=$(MC_TIMEOUT=10 mc "$to" "set k 0 0 ${#new}\r\n$new\r\n")
    stored=${EPOCHREALTIME/./}
    [ "$reply" = STORED ] && ok "$name: k = $new through the process that took over" ||
        fail "$name: set k through the process that took over: '${reply:-nothing in 10 s}'"
    reply=$(MC_TIMEOUT=2 mc "$victim" "set k 0 0 5\r\nsplit\r\n")
    [ "$reply" != STORED ] && ok "$name: a set through the cut-off process is not acknowledged" ||
        fail "$name: a set through the cut-off process was acknowledged (split brain)"
    sleep 1.5
    touch "$dir/stop-reader-$name"
    wait "$reader_pid"
    reader_pid=""

    waited=$(cat "$dir"/*.log | grep -h "may serve reads for" | tail -1)
    [ "$(cat "$dir"/*.log | grep -c "may serve reads for")" -gt "$waits_before" ] &&
        ok "$name: the fence waited for the lease: ${waited#*: }" ||
        fail "$name: no fence waited for the cut-off process's lease"
    before=$(awk -v s="$stored" -v v="$old" '$2 < s && $3 == v' "$out" | wc -l)
    stale=$(awk -v s="$stored" -v v="$old" '$1 > s && $3 == v' "$out" | wc -l)
    after=$(awk -v s="$stored" '$1 > s' "$out" | wc -l)
    unanswered=$(awk -v s="$stored" '$1 > s && $3 == "none"' "$out" | wc -l)
    [ "$before" -gt 0 ] && ok "$name: the reader got $old $before times before $new was stored" ||
        fail "$name: the reader never got $old before $new was stored: the test proves nothing"
    [ "$stale" -eq 0 ] && ok "$name: no get that started after $new was stored returned $old ($after gets)" ||
        fail "$name: $stale of $after gets that started after $new was stored returned $old (stale reads)"
    [ "$after" -gt 0 ] && [ "$unanswered" -eq "$after" ] &&
        ok "$name: the cut-off process answered none of them (no lease)" ||
        fail "$name: of $after gets after $new was stored, $unanswered went unanswered, not all"
}

# cluster SCHEME...: a new cluster in DIR for the next cuts; k = old
# through VICTIM_ROLE 0.
cluster() {
    dir=$(mktemp -d "${TMPDIR:-/tmp}/stale_read_cut.XXXXXX")
    export COCYTUS_TEST_MUTE_DIR=$dir
    cluster_up "$dir" 12 10000 20000 --nodes 1 "$@" --routing off --no-proxy ||
        { fail "$*: cluster up"; return 1; }
}

done_with_cluster() {
    rm -f "$dir"/mute-*
    cluster_remove "$dir"
    dir=""
}

if cluster --scheme rs:3:5; then
    reply=$(mc "$(group0_addr "$dir" data 0)" "set k 0 0 3\r\nold\r\n")
    [ "$reply" = STORED ] && ok "rs: k = old through data process 0" || fail "rs: set k: $reply"
    cut_once rs "$(group0_addr "$dir" data 0)" mute-data-0-0 \
        "group 0 dp 0 is served by parity process" parity old new &&
        cut_once "rs, the recovery process" "$(group0_addr "$dir" parity 0)" mute-parity-0-0 \
            "group 0 dp 0 is served by parity process [1-9]" parity new newer
    done_with_cluster
fi
if cluster --scheme pbr:2; then
    reply=$(mc "$(group0_addr "$dir" primary 0)" "set k 0 0 3\r\nold\r\n")
    [ "$reply" = STORED ] && ok "pbr: k = old through the primary" || fail "pbr: set k: $reply"
    cut_once pbr "$(group0_addr "$dir" primary 0)" mute-primary-0-0 \
        "group 0 is served by member" backup old new
    done_with_cluster
fi
finish
