#!/usr/bin/env bash
# zk_unreachable.sh - a coordinator whose ZooKeeper does not answer logs
# each kind of client complaint once, not every try.
#
# While no server of the ensemble answers, the ZooKeeper C client tries
# again every few tens of milliseconds and logs two lines per try: about
# 900 lines in the 15 s a coordinator waits for a session before it gives
# up (and its node starts it again).  The coordinator now passes the
# client's log through a limiter (cluster/coord_zklog.c): one line per
# source location per 30 s, and when it gives up, how many were left out.
#
# A coordinator on ZooKeeper at a loopback port nobody listens on must
# refuse to start after its wait, having logged at most 4 client lines
# and said how many it left out.  Needs the ZooKeeper C client, not a
# ZooKeeper server; skipped (77) without it.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin"
if ! grep -q '^#define HAVE_ZOOKEEPER 1' "$build_dir/config.h" 2>/dev/null; then
    echo "SKIP: built without the ZooKeeper C client (apt-get install libzookeeper-mt-dev, configure again)"
    exit 77
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/zk_unreachable.XXXXXX")
coord_pid=
cleanup() {
    stop_pid "$coord_pid"
    rm -rf "$dir"
}
on_exit cleanup

zk_port=$(pick_port) || { echo "FAIL: no free port"; exit 1; }
coord_port=$(pick_port) && link_port=$(pick_port) && base=$(pick_base_port 2) ||
    { echo "FAIL: no free port"; exit 1; }
cat >"$dir/cluster.conf" <<EOF
cluster zkun
secret 5ee5a1d0c0ffee42
scheme plain
base_port $base
node 0 127.0.0.1
coordinator 127.0.0.1 $coord_port $link_port
coordinator zookeeper 127.0.0.1:$zk_port
EOF
chmod 600 "$dir/cluster.conf"

user_args=()
[ "$(id -u)" -eq 0 ] && user_args=(-u root)
started=$(date +%s%N)
"$server_bin" --role coordinator --cluster "$dir/cluster.conf" "${user_args[@]}" \
    >"$dir/log" 2>&1 &
coord_pid=$!
# It waits 15 s for a session; a loaded machine may take longer.
for _ in $(seq 400); do
    kill -0 "$coord_pid" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$coord_pid" 2>/dev/null; then
    fail "the coordinator still runs 40 s after its start"
else
    wait "$coord_pid"
    rc=$?
    coord_pid=
    ms=$((($(date +%s%N) - started) / 1000000))
    [ "$rc" -ne 0 ] && ok "it refused to start after $ms ms (status $rc)" ||
        fail "it exited with status 0"
fi

client_lines=$(grep -c ':ZOO_' "$dir/log")
left_out=$(grep -o '^ZooKeeper client: [0-9]* more lines from ZOO_[A-Z]*@[a-z_]*@[0-9]*' "$dir/log" |
    awk '{ n += $3 } END { print n + 0 }')
echo "client lines logged: $client_lines; left out: $left_out"
grep -q 'coordinator refuses to start: ZooKeeper 127.0.0.1:'"$zk_port"' did not answer' "$dir/log" &&
    ok "it says why it refuses" || fail "no 'coordinator refuses to start' line"
grep -q ':ZOO_ERROR@' "$dir/log" && ok "the client's first complaint is shown" ||
    fail "the client's complaint is not in the log"
[ "$client_lines" -le 4 ] && ok "at most 4 client lines logged" ||
    fail "$client_lines client lines logged (limit 4)"
[ "$left_out" -ge 10 ] && ok "it says it left $left_out lines out" ||
    fail "no count of the lines left out ($left_out)"
if [ "$failures" -ne 0 ]; then
    echo "--- log (first 20 lines)"
    head -20 "$dir/log"
fi
finish
