#!/usr/bin/env bash
# coordinator.sh - make-check test of the coordinator: brings up a 3-node
# plain cluster with scripts/cluster (node 0 starts the coordinator), then
# checks that every process has epoch 1 and is alive in `cocytus status`,
# that the coordinator refuses keys, that a slot move through `cocytus-cli
# move` lands everywhere at epoch 2 (the third process gets the map by
# push) with the key readable at its new owner, that a killed server is
# reported dead within 3 s, that a restarted coordinator keeps epoch 2 from
# its state file and sees the live processes again, that a coordinator
# restarted on an older state file (a lost move) refuses moves while
# processes are ahead of it, and that a corrupt state file is refused with
# a clear message.  `cocytus-cli wait-healthy` exits 0 at once on the
# healthy cluster and 1 (naming what is missing) with a dead process; then
# on an RS(2,3) cluster it exits 0 when all groups are healthy, and 1 after
# --timeout 2 with a data process stopped, while status exits 3.  The trap
# always cleans up.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
cli=$build_dir/client/cocytus-cli
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$cli"

dir=$(mktemp -d "${TMPDIR:-/tmp}/coordinator.XXXXXX")
coord_pid=""        # a coordinator this test started by hand

cleanup() {
    [ -n "$coord_pid" ] && kill -KILL "$coord_pid" 2>/dev/null
    cluster_remove "$dir"
}
on_exit cleanup

# epoch_of HOST:PORT: the epoch line of `config get cluster`.
epoch_of() {
    mc "$1" "config get cluster\r\n" 2>/dev/null | sed -n 2p
}

# state_of ADDR: the coordinator's liveness word for server ADDR.
state_of() {
    ctl "$dir" "$coord" "cocytus status\r\n" 2>/dev/null | awk -v a="$1" '$1 == "proc" && $6 == a { print $7 }'
}

all_alive() {
    [ "$(ctl "$dir" "$coord" "cocytus status\r\n" 2>/dev/null | grep -c '^proc .* alive pid=')" -eq 3 ]
}

all_at_epoch() {
    local want=$1 a
    for a in "${addrs[@]}" "$coord"; do
        [ "$(epoch_of "$a")" = "$want" ] || return 1
    done
}

# --- up (retried on a new port range if another test took ours) ---
# 3 servers and the coordinator: 2 ports each (base_port + 6 is the coordinator's).
# The nodes do not restart dead processes: this test restarts the
# coordinator by hand and checks that a killed process stays dead.
cluster_up "$dir" 8 12000 20000 --nodes 3 --scheme plain --no-proxy --memory 16 --restart off \
    || { fail "cluster up"; exit 1; }
coord=$(cat "$dir/coordinator" 2>/dev/null)
[ "$coord" = "127.0.0.1:$((base_port + 6))" ] || fail "coordinator file holds '$coord', want 127.0.0.1:$((base_port + 6))"
grep -q "^coordinator 127.0.0.1 $((base_port + 6)) $((base_port + 7))\$" "$dir/cluster.conf" \
    || fail "cluster.conf has no coordinator line"
[ "$(wc -l <"$dir/endpoints")" -eq 3 ] || fail "endpoints has $(wc -l <"$dir/endpoints") lines, want 3"
mapfile -t addrs < <(awk '{ print $5 }' "$dir/endpoints")
ok "cluster up on ports $base_port+, coordinator $coord"

# --- epoch 1 everywhere, everyone alive ---
all_at_epoch 1 || fail "not every process answers epoch 1"
wait_for 30 all_alive || fail "coordinator does not see 3 live processes: $(ctl "$dir" "$coord" "cocytus status\r\n")"
status=$(ctl "$dir" "$coord" "cocytus status\r\n")
[ "$(head -1 <<<"$status")" = "epoch 1" ] || fail "cocytus status starts with '$(head -1 <<<"$status")'"
grep -Eq "^proc 1 plain 0 1 ${addrs[1]} alive pid=[0-9]+ rss=[0-9]+ epoch=1 hb_age_ms=[0-9]+\$" <<<"$status" \
    || fail "status line of group 1: $status"
ok "epoch 1 everywhere; coordinator sees 3 live processes"
cp "$dir/coordinator.state" "$dir/epoch1.state"

reply=$(mc "$coord" "get foo\r\n")
[ "$reply" = "SERVER_ERROR this is the coordinator; use a server" ] || fail "get on the coordinator: '$reply'"
reply=$(mc "$coord" "set foo 0 0 1\r\nx\r\n")
[ "$reply" = "SERVER_ERROR this is the coordinator; use a server" ] || fail "set on the coordinator: '$reply'"
ok "the coordinator refuses keys"

cli_out=$("$cli" --dir "$dir" status 2>&1)
cli_rc=$?
[ "$cli_rc" -eq 0 ] || fail "cocytus-cli status exit $cli_rc: $cli_out"
grep -q "^coordinator $coord: epoch 1, 3 alive, 0 dead, 0 unknown\$" <<<"$cli_out" \
    || fail "cocytus-cli status: $cli_out"
ok "cocytus-cli status shows the epoch and membership"

# --- wait-healthy on a healthy cluster: exit 0 at once ---
wh_start=$(date +%s%N)
wh_out=$("$cli" --dir "$dir" wait-healthy --timeout 10 2>&1)
wh_rc=$?
wh_ms=$((($(date +%s%N) - wh_start) / 1000000))
[ "$wh_rc" -eq 0 ] || fail "wait-healthy on a healthy cluster: exit $wh_rc: $wh_out"
grep -q "^wait-healthy: healthy after [0-9.]* s (3 processes alive" <<<"$wh_out" \
    || fail "wait-healthy output: $wh_out"
[ "$wh_ms" -lt 3000 ] || fail "wait-healthy on a healthy cluster took $wh_ms ms"
ok "wait-healthy on a healthy cluster: exit 0 in $wh_ms ms"

# --- a move: a key of endpoint 0 moves to group 1 ---
key=""
for i in $(seq 200); do
    if [ "$(mc "${addrs[0]}" "set key$i 0 0 6\r\nvalue$i\r\n")" = STORED ]; then
        key=key$i
        break
    fi
done
[ -n "$key" ] || fail "no key of endpoint 0 found"
moved=$(mc "${addrs[1]}" "get $key\r\n")
slot=$(awk '{ print $3 }' <<<"$moved")
[[ $moved == "SERVER_ERROR MOVED $slot 1 ${addrs[0]}" ]] || fail "endpoint 1 on $key: '$moved'"

reply=$(ctl "$dir" "$coord" "cocytus move 16384 1\r\n")
[[ $reply == "SERVER_ERROR bad slot"* ]] || fail "move of slot 16384: '$reply'"
reply=$(ctl "$dir" "$coord" "cocytus move $slot 0\r\n")
[[ $reply == "SERVER_ERROR slot $slot is already served by ${addrs[0]}" ]] || fail "move to its owner: '$reply'"
reply=$(ctl "$dir" "$coord" "cocytus move $slot 9\r\n")
[[ $reply == "SERVER_ERROR no group 9"* ]] || fail "move to group 9: '$reply'"

move_out=$("$cli" --dir "$dir" --timeout 2000 move "$slot" 1 2>&1)
move_rc=$?
[ "$move_rc" -eq 0 ] || fail "cocytus-cli move exit $move_rc: $move_out"
grep -q "^OK moving $slot ${addrs[0]} -> ${addrs[1]} epoch 2\$" <<<"$move_out" || fail "move: $move_out"
grep -q "^move $slot ${addrs[0]} ${addrs[1]} 2 done\$" <<<"$move_out" || fail "move outcome: $move_out"
wait_for 30 all_at_epoch 2 || fail "not every process reached epoch 2 (the third gets it by push): \
$(for a in "${addrs[@]}" "$coord"; do echo "$a $(epoch_of "$a")"; done | tr '\n' ';')"
value=value${key#key}
reply=$(mc "${addrs[1]}" "get $key\r\n" | tr '\n' '|')
[ "$reply" = "VALUE $key 0 ${#value}|$value|END|" ] || fail "get $key at its new owner: '$reply'"
reply=$(mc "${addrs[0]}" "get $key\r\n")
[ "$reply" = "SERVER_ERROR MOVED $slot 2 ${addrs[1]}" ] || fail "old owner on $key: '$reply'"
reply=$(ctl "$dir" "$coord" "cocytus moves\r\n" | tr '\n' '|')
[ "$reply" = "move $slot ${addrs[0]} ${addrs[1]} 2 done|END|" ] || fail "cocytus moves: '$reply'"
grep -qx "epoch 2" <(sed -n 2p "$dir/coordinator.state") || fail "state file does not hold epoch 2"
ok "slot $slot moved to group 1 at epoch 2; every process has the new map"

# A destination takes a commit only for the epoch after its own: one that
# missed a map must not build a map nobody else has.
replies=$(printf 'cocytus import begin\ncocytus import commit 7 4\n' |
    "$cli" --dir "$dir" --timeout 2000 admin "${addrs[2]}" - 2>&1)
r1=$(sed -n 1p <<<"$replies")
r2=$(sed -n 2p <<<"$replies")
[[ $r1 == OK && $r2 == "SERVER_ERROR this process's map is at epoch 2, the commit is for 4: it missed a map" ]] \
    || fail "commit two epochs ahead: '$r1' '$r2'"
[ "$(epoch_of "${addrs[2]}")" = 2 ] || fail "a refused commit changed the epoch"
ok "a commit for an epoch other than the next one is refused"
# Nor without the slot's own "import begin" in this process's life: a
# commit retried after a lost answer may reach a restarted, empty process.
reply=$(printf 'cocytus import begin\ncocytus import commit 7 3\n' |
    "$cli" --dir "$dir" --timeout 2000 admin "${addrs[2]}" - 2>&1 | sed -n 2p)
[[ $reply == "SERVER_ERROR this process did not receive slot 7's copy"* ]] ||
    fail "commit without the slot's import begin: '$reply'"
[ "$(epoch_of "${addrs[2]}")" = 2 ] || fail "a refused commit changed the epoch"
ok "a commit of a slot whose copy this process did not receive is refused"

# --- kill group 2's process: dead within 3 s ---
pid2=$(awk '$2 == 2 { print $6 }' "$dir/endpoints")
kill -KILL "$pid2"
start=$SECONDS
wait_for 30 eval '[ "$(state_of "${addrs[2]}")" = dead ]' \
    || fail "group 2 not reported dead within 3 s: $(ctl "$dir" "$coord" "cocytus status\r\n" | tr '\n' ';')"
ok "killed group 2 (pid $pid2); reported dead after ~$((SECONDS - start)) s"
grep -q "group 2 plain 0 ${addrs[2]} dead: control link down" "$dir/coordinator.log" \
    || fail "coordinator.log does not say group 2 is dead"
reply=$(ctl "$dir" "$coord" "cocytus move $slot 2\r\n")
[ "$reply" = "SERVER_ERROR destination ${addrs[2]} is dead" ] || fail "move to a dead process: '$reply'"
"$cli" --dir "$dir" status >/dev/null 2>&1
cli_rc=$?
[ "$cli_rc" -eq 3 ] || fail "cocytus-cli status exit $cli_rc with a dead process (want 3)"
# 3 s, not 1: the cli gives the coordinator what is left of --timeout to
# answer, and on a loaded machine it once took longer than 1 s.
wh_out=$("$cli" --dir "$dir" wait-healthy --timeout 3 2>&1)
wh_rc=$?
[ "$wh_rc" -eq 1 ] || fail "wait-healthy with a dead process: exit $wh_rc (want 1): $wh_out"
grep -q "plain 0 of group 2 on node 2 (${addrs[2]}) is dead" <<<"$wh_out" \
    || fail "wait-healthy does not name the dead process: $wh_out"
ok "wait-healthy with a dead process: exit 1, names it"

# --- restart the coordinator: epoch 2 is kept ---
old_pid=$(mc "$coord" "stats\r\n" | awk '$2 == "pid" { print $3 }')
[ -n "$old_pid" ] || fail "no pid in the coordinator's stats"
kill -TERM "$old_pid"
wait_for 30 eval '! (exec 3<>"/dev/tcp/${coord%:*}/${coord##*:}") 2>/dev/null' \
    || fail "the coordinator did not stop"
"$server_bin" --cluster "$dir/cluster.conf" --role coordinator </dev/null >>"$dir/coordinator-2.log" 2>&1 &
coord_pid=$!
wait_for 50 eval '[ -n "$(epoch_of "$coord")" ]' || fail "the restarted coordinator does not answer"
[ "$(ctl "$dir" "$coord" "cocytus status\r\n" | head -1)" = "epoch 2" ] || fail "restarted coordinator is not at epoch 2"
wait_for 40 eval '[ "$(state_of "${addrs[0]}")" = alive ] && [ "$(state_of "${addrs[1]}")" = alive ]' \
    || fail "live processes did not report to the restarted coordinator"
wait_for 50 eval '[ "$(state_of "${addrs[2]}")" = dead ]' \
    || fail "the killed process is not dead for the restarted coordinator: $(state_of "${addrs[2]}")"
ok "restarted coordinator: epoch 2 from the state file, live processes back"

# --- an older state file (a lost move): no moves while processes are ahead ---
kill -TERM "$coord_pid"
wait "$coord_pid" 2>/dev/null
cp "$dir/epoch1.state" "$dir/coordinator.state"
"$server_bin" --cluster "$dir/cluster.conf" --role coordinator </dev/null >>"$dir/coordinator-3.log" 2>&1 &
coord_pid=$!
wait_for 50 eval '[ "$(state_of "${addrs[0]}")" = alive ] && [ "$(state_of "${addrs[1]}")" = alive ]' \
    || fail "live processes did not report to the coordinator on the old state"
reply=$(ctl "$dir" "$coord" "cocytus move $slot 0\r\n")
[[ $reply == "SERVER_ERROR 127.0.0.1:"*" holds epoch 2, newer than the coordinator's 1"* ]] \
    || fail "move with processes ahead of the coordinator: '$reply'"
grep -q "reports epoch 2, newer than the coordinator's 1" "$dir/coordinator-3.log" \
    || fail "coordinator-3.log does not report processes ahead of it"
ok "coordinator on an older state refuses moves: ${reply#SERVER_ERROR }"

# --- a corrupt state file is refused ---
kill -TERM "$coord_pid"
wait "$coord_pid" 2>/dev/null
coord_pid=""
head -c 200 "$dir/coordinator.state" >"$dir/coordinator.state.cut"
mv "$dir/coordinator.state.cut" "$dir/coordinator.state"
msg=$(timeout 10 "$server_bin" --cluster "$dir/cluster.conf" --role coordinator 2>&1 </dev/null)
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a coordinator started on a truncated state file (exit $rc)"
grep -q "coordinator refuses to start: .*coordinator.state is corrupt" <<<"$msg" \
    || fail "message for a truncated state file: $msg"
echo garbage >"$dir/coordinator.state"
msg=$(timeout 10 "$server_bin" --cluster "$dir/cluster.conf" --role coordinator 2>&1 </dev/null)
grep -q "is not a coordinator state file" <<<"$msg" || fail "message for a garbage state file: $msg"
ok "corrupt state files refused: $(tail -1 <<<"$msg")"

# --- coding groups: RS(2,3) on 3 nodes; wait-healthy before and after a
# data process is stopped (its node does not start it again: --restart
# off; with restarts the group is back at full redundancy within about a
# second, which test/integration/soak.sh checks) ---
rsdir=$dir/rs
cluster_up "$rsdir" 20 9000 12000 --nodes 3 --scheme rs:2:3 --no-proxy --memory 16 --region 16 \
    --restart off \
    || fail "rs:2:3 cluster up"
if [ -s "$rsdir/endpoints" ]; then
    wh_start=$(date +%s%N)
    wh_out=$("$cli" --dir "$rsdir" wait-healthy --timeout 20 2>&1)
    wh_rc=$?
    wh_ms=$((($(date +%s%N) - wh_start) / 1000000))
    [ "$wh_rc" -eq 0 ] || fail "wait-healthy on a healthy RS cluster: exit $wh_rc: $wh_out"
    grep -q "^wait-healthy: healthy after [0-9.]* s (9 processes alive, 3 coding groups at full redundancy)\$" \
        <<<"$wh_out" || fail "wait-healthy output (RS): $wh_out"
    ok "wait-healthy on a healthy RS(2,3) cluster: exit 0 after $wh_ms ms"
    st_out=$("$cli" --dir "$rsdir" status 2>&1)
    st_rc=$?
    [ "$st_rc" -eq 0 ] || fail "status of a healthy RS cluster: exit $st_rc"
    [ "$(grep -c '^group [0-9]: healthy, tolerates 1 of 1 failures$' <<<"$st_out")" -eq 3 ] \
        || fail "status does not show 3 groups tolerating 1 of 1: $st_out"
    grep -q '^groups: 3 of 3 at full redundancy$' <<<"$st_out" || fail "status summary: $st_out"

    rs_pid=$(awk '$1 == "data" && $2 == 0 && $3 == 1 { print $6 }' "$rsdir/endpoints")
    rs_addr=$(awk '$1 == "data" && $2 == 0 && $3 == 1 { print $5 }' "$rsdir/endpoints")
    kill -KILL "$rs_pid"
    wh_start=$(date +%s%N)
    wh_out=$("$cli" --dir "$rsdir" wait-healthy --timeout 2 2>&1)
    wh_rc=$?
    wh_ms=$((($(date +%s%N) - wh_start) / 1000000))
    [ "$wh_rc" -eq 1 ] || fail "wait-healthy with a stopped data process: exit $wh_rc (want 1): $wh_out"
    [ "$wh_ms" -ge 1900 ] && [ "$wh_ms" -lt 8000 ] || fail "wait-healthy --timeout 2 took $wh_ms ms"
    grep -q "^wait-healthy: NOT healthy after [0-9.]* s (timeout 2.0 s); still missing:\$" <<<"$wh_out" \
        || fail "wait-healthy timeout output: $wh_out"
    grep -q "data 1 of group 0 on node [0-9]* ($rs_addr) is dead" <<<"$wh_out" \
        || fail "wait-healthy does not name the stopped data process: $wh_out"
    grep -q "group 0: [A-Z-]*, tolerates 0 of 1 failures" <<<"$wh_out" \
        || fail "wait-healthy does not name the group short of redundancy: $wh_out"
    ok "wait-healthy --timeout 2 with a stopped data process: exit 1 after $wh_ms ms"
    st_out=$("$cli" --dir "$rsdir" status 2>&1)
    st_rc=$?
    [ "$st_rc" -eq 3 ] || fail "status with a stopped data process: exit $st_rc (want 3)"
    grep -q "^group 0: data 1 served by recovery process parity 0" <<<"$st_out" \
        || fail "status does not show who serves data 1: $st_out"
    ok "status with a stopped data process: exit 3, group 0 served by its recovery process"
    cluster_remove "$rsdir"
fi

if [ "$failures" -ne 0 ]; then
    for f in "$dir"/coordinator*.log; do
        echo "==> $f <=="
        tail -n 30 "$f"
    done
fi
finish
