#!/usr/bin/env bash
# cluster_script.sh - make-check test of scripts/cluster: brings up a 2-node
# plain cluster in a temporary directory, checks endpoints, stores and reads a
# key through every process, kills one node's process group and checks that
# status reports it dead, then brings the cluster down and checks that
# nothing is left.  The trap always cleans up.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"

need_built "$server_bin" "$build_dir/cocytus/cocytus-node"

dir=$(mktemp -d "${TMPDIR:-/tmp}/cluster_script.XXXXXX")

cleanup() {
    cluster_remove "$dir"
}
on_exit cleanup

cluster() {
    bash "$cluster_script" "$@"
}

alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# --- up (retried on a new port range if another test took ours) ---
# 2 servers and the coordinator: 2 ports each
cluster_up "$dir" 6 22000 30000 --nodes 2 --scheme plain --no-proxy --memory 16 \
    || { fail "cluster up"; exit 1; }
ok "cluster up on ports $base_port+"

for f in cluster.conf endpoints node-0.pid node-1.pid; do
    [ -s "$dir/$f" ] || fail "$dir/$f missing"
done
grep -q '^scheme plain$' "$dir/cluster.conf" || fail "cluster.conf has no 'scheme plain'"
grep -Eq '^secret [0-9a-f]{32}$' "$dir/cluster.conf" || fail "cluster.conf has no random secret"
mode=$(stat -c %a "$dir/cluster.conf")
[ "$mode" = 600 ] || fail "cluster.conf (it holds the secret) has mode $mode, want 600"
# A process refuses a cluster file others can read, and says how to fix it.
cp "$dir/cluster.conf" "$dir/open.conf" && chmod 644 "$dir/open.conf"
msg=$(timeout 10 "$server_bin" --cluster "$dir/open.conf" --role plain --group 0 --index 0 2>&1 </dev/null)
rc=$?
if [ "$rc" -ne 0 ] && printf '%s' "$msg" | grep -q "chmod 600"; then
    ok "a world-readable cluster file is refused: $msg"
else
    fail "server with a 0644 cluster file: exit $rc, '$msg'"
fi
msg=$(timeout 10 "$build_dir/cocytus/cocytus-node" --cluster "$dir/open.conf" --node 0 \
    --server "$server_bin" 2>&1 </dev/null)
rc=$?
printf '%s' "$msg" | grep -q "chmod 600" && [ "$rc" -ne 0 ] \
    || fail "cocytus-node with a 0644 cluster file: exit $rc, '$msg'"
rm -f "$dir/open.conf"

# --- endpoints: 2 plain lines, one per node, live pids ---
[ "$(wc -l <"$dir/endpoints")" -eq 2 ] || fail "endpoints has $(wc -l <"$dir/endpoints") lines, want 2"
n=0
while read -r role group index node addr pid; do
    want="plain $n 0 $n 127.0.0.1:$((base_port + 2 * n)) "
    [ "$role $group $index $node $addr " = "$want" ] || fail "endpoints line $n: '$role $group $index $node $addr', want '$want'"
    alive "$pid" || fail "pid $pid of $addr is not alive"
    n=$((n + 1))
done <"$dir/endpoints"
ok "endpoints: $(tr '\n' ';' <"$dir/endpoints")"

# --- set/get through every endpoint ---
while read -r role group _ _ addr _; do
    key="k$group"
    reply=$(mc "$addr" "set $key 5 0 6\r\nvalue$group\r\n")
    [ "$reply" = STORED ] || fail "set via $addr: '$reply'"
    reply=$(mc "$addr" "get $key\r\n" | tr '\n' '|')
    [ "$reply" = "VALUE $key 5 6|value$group|END|" ] || fail "get via $addr: '$reply'"
done <"$dir/endpoints"
ok "set/get through each endpoint"

status_out=$(cluster status --dir "$dir")
status_rc=$?
[ "$status_rc" -eq 0 ] || fail "status exit $status_rc with everything alive"
[ "$(grep -c ' alive$' <<<"$status_out")" -eq 4 ] || fail "status: want 2 nodes + 2 processes alive, got: $status_out"

# --- kill node 1's process group: status reports it dead ---
node1=$(cat "$dir/node-1.pid")
pid1=$(awk '$4 == 1 { print $6 }' "$dir/endpoints")
kill -KILL -- "-$node1"
for _ in $(seq 50); do
    alive "$pid1" || alive "$node1" || break
    sleep 0.1
done
status_out=$(cluster status --dir "$dir")
status_rc=$?
[ "$status_rc" -eq 1 ] || fail "status exit $status_rc with node 1 dead (want 1)"
grep -q "^node 1 $node1 dead$" <<<"$status_out" || fail "status does not show node 1 dead: $status_out"
grep -q "^plain 1 0 1 .* $pid1 dead$" <<<"$status_out" || fail "status does not show process $pid1 dead: $status_out"
grep -q "^plain 0 0 0 .* alive$" <<<"$status_out" || fail "status does not show node 0's process alive: $status_out"
ok "node 1 killed; status: $(tr '\n' ';' <<<"$status_out")"
reply=$(mc "$(awk '$4 == 0 { print $5 }' "$dir/endpoints")" "get k0\r\n" | tr '\n' '|')
[ "$reply" = "VALUE k0 5 6|value0|END|" ] || fail "node 0 stopped serving after node 1 died: '$reply'"

# --- down: nothing left ---
pids=$(cat "$dir"/node-*.pid; awk '{ print $6 }' "$dir/endpoints")
cluster down --dir "$dir" || fail "cluster down exit $?"
for pid in $pids; do
    alive "$pid" && fail "pid $pid still alive after down"
done
ls "$dir"/node-*.pid >/dev/null 2>&1 && fail "pid files left after down"
status_out=$(cluster status --dir "$dir")
[ "$(grep -c ' dead$' <<<"$status_out")" -eq 2 ] || fail "status after down: $status_out"
ok "cluster down"

# --- bad arguments are refused with a message ---
msg=$(cluster up --scheme rs:5:5 --dir "$dir" 2>&1) && fail "rs:5:5 accepted"
grep -q "bad scheme 'rs:5:5'" <<<"$msg" || fail "rs:5:5 message: $msg"
msg=$(cluster up --nodes 0 --dir "$dir" 2>&1) && fail "--nodes 0 accepted"
grep -q "bad --nodes '0'" <<<"$msg" || fail "--nodes 0 message: $msg"
msg=$(cluster up --bogus 1 --dir "$dir" 2>&1) && fail "--bogus accepted"
grep -q "unknown option '--bogus'" <<<"$msg" || fail "--bogus message: $msg"
ok "bad arguments refused"

finish
