#!/usr/bin/env bash
# move_stall.sh - a slot move walks the hash table a piece per event-loop
# turn, so neither the source nor the destination stops answering while
# it looks for the slot's keys.
#
# A move looks for the slot's keys three times: the source before its copy
# and before deleting its local copies, the destination before the import
# (stale copies of an earlier, abandoned import).  Each walked the whole
# table in one turn: with a million items a process answered nobody for
# 150-200 ms, per walk and per move, and with ten million for longer than
# the 1.5 s after which the coordinator declares it dead.
#
# Two plain processes (2 nodes, a coordinator, no proxy) hold 2,000,000
# keys.  While one slot of process 0 moves to process 1, move_stall.py asks
# both processes `version` in a loop: none may wait 150 ms or more (the
# build before: 190-300 ms at the source, 170-210 at the destination).  The
# move must end ok, the slot's keys read back through process 1 and no
# longer be in process 0.  A wait over the limit may be the machine's: a
# second slot is then moved, and the test fails if it waits as long.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli" \
    "$build_dir/bench/cocytus-bench"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is missing"; exit 77; }

RECORDS=${MOVE_STALL_RECORDS:-2000000}
LIMIT_MS=150

dir=$(mktemp -d "${TMPDIR:-/tmp}/move_stall.XXXXXX")
probe_pid=""
cleanup() {
    [ -n "$probe_pid" ] && kill "$probe_pid" 2>/dev/null
    cluster_remove "$dir/c"
    rm -rf "$dir"
}
on_exit cleanup

cli() { "$build_dir/client/cocytus-cli" --dir "$dir/c" "$@"; }

cluster_up "$dir/c" 8 25000 31000 --nodes 2 --scheme plain --memory 512 --no-proxy ||
    { echo "FAIL: cluster up"; exit 1; }
read -r src dst < <(awk '$1 == "plain" { printf "%s ", $5 } END { print "" }' "$dir/c/endpoints")
[ -n "$src" ] && [ -n "$dst" ] || { echo "FAIL: no endpoints in $dir/c/endpoints"; exit 1; }
echo "source $src, destination $dst"

started=$(date +%s%N)
"$build_dir/bench/cocytus-bench" -s "$src" -q -n "$RECORDS" -v 16 --load --no-run -c 4 --depth 32 \
    >"$dir/load.out" 2>&1 || { cat "$dir/load.out"; echo "FAIL: loading $RECORDS keys"; exit 1; }
echo "loaded $RECORDS keys in $((($(date +%s%N) - started) / 1000000)) ms"

# Slots of the source with keys of the bench in them: "KEY SLOT" lines.
key_owners "$dir/c" 20000 || { echo "FAIL: cannot read the map"; exit 1; }
awk -v s="$src" 'NR == FNR { if ($2 == s) mine[$1] = 1; next }
                 ($2 in mine) && !seen[$1]++ { print $2, $1 }' "$dir/c/owners" "$dir/c/all.slots" |
    head -2 >"$dir/slots"
[ "$(wc -l <"$dir/slots")" -eq 2 ] || { echo "FAIL: no two slots of $src among 20000 keys"; exit 1; }

# move_one KEY SLOT: moves SLOT to process 1 while move_stall.py probes
# both processes; true when every check passed and neither waited
# LIMIT_MS or more (long_wait says which did).
move_one() {
    local key=$1 slot=$2 move_ms target n ms before=$failures
    long_wait=""
    echo "== moving slot $slot (key $key)"
    rm -f "$dir/stop"
    python3 "$script_dir/move_stall.py" "$dir/stop" 120 "$src" "$dst" >"$dir/probe.out" 2>&1 &
    probe_pid=$!
    sleep 0.5
    local started
    started=$(date +%s%N)
    cli move "$slot" 1 >"$dir/move.out" 2>&1
    move_ms=$((($(date +%s%N) - started) / 1000000))
    cat "$dir/move.out"
    # the source deletes its local copies after the commit
    wait_for 300 grep -q "migrate slot $slot .*: \(done\|failed\)" "$dir"/c/plain-0-0.log
    sleep 0.3
    touch "$dir/stop"
    wait "$probe_pid"
    probe_pid=""
    cat "$dir/probe.out"
    grep -q "^move $slot .* done" "$dir/move.out" && ok "the move ended ok in $move_ms ms" ||
        fail "the move of slot $slot did not end ok"
    grep "migrate slot $slot" "$dir"/c/plain-0-0.log | tail -3
    grep -q "migrate slot $slot .*: done" "$dir"/c/plain-0-0.log &&
        ok "the source finished its clean-up" || fail "the source did not finish the move"
    while read -r target n ms; do
        case $target in "$src"|"$dst") ;; *) fail "probe: $target $n $ms"; continue ;; esac
        if [ "$n" -gt 0 ] && awk -v m="$ms" -v l="$LIMIT_MS" 'BEGIN { exit !(m < l) }'; then
            ok "$target answered $n requests during the move, the longest wait $ms ms"
        else
            long_wait="$long_wait $target: the longest wait $ms ms over $n requests;"
        fi
    done <"$dir/probe.out"
    # The key moved: the destination has it, the source does not.
    local at_dst at_src
    at_dst=$(mc "$dst" "get $key\r\n")
    at_src=$(mc "$src" "get $key\r\n")
    case $at_dst in VALUE*) ok "$key reads back through $dst" ;; *) fail "$dst: get $key: $at_dst" ;; esac
    case $at_src in *MOVED*) ok "$src answers MOVED for $key" ;; *) fail "$src: get $key: $at_src" ;; esac
    [ "$failures" -eq "$before" ] && [ -z "$long_wait" ]
}

# A wait over the limit may be the machine's (a loaded make check): the
# second slot then decides.  A walk in one turn stalls every move.
mapfile -t slots <"$dir/slots"
for try in 0 1; do
    read -r key slot <<<"${slots[$try]}"
    move_one "$key" "$slot" && break
    [ -n "$long_wait" ] && echo "over the limit:$long_wait"
    [ "$try" -eq 1 ] && [ -n "$long_wait" ] &&
        fail "both moves kept a client waiting $LIMIT_MS ms or more:$long_wait"
done
finish
