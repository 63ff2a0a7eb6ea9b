#!/usr/bin/env bash
# proxy-flood.sh - memory of cocytus-proxy under misuse: its RSS before and
# after a flood of CONNS client connections (all opened at once, each sends
# one get, then all close; bounded in time), and after one multiget of KEYS
# stored keys, on a local plain cluster (scripts/cluster up).  Prints one
# line per measurement: "rss <when> <kB>".
#
# usage: bench/proxy-flood.sh          (settings through the environment)
#   CONNS (10000)  KEYS (100000)  VALUE (32 bytes)  NODES (2)
#   PROXY_ARGS     extra arguments of cocytus-proxy (e.g. "-c 20000")
# Needs python3 for the clients and an open-files limit above CONNS.
set -u
set -o pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
CONNS=${CONNS:-10000}
KEYS=${KEYS:-100000}
VALUE=${VALUE:-32}
NODES=${NODES:-2}
DIR=$(mktemp -d "${TMPDIR:-/tmp}/proxy-flood.XXXXXX")

die() { echo "proxy-flood: $*" >&2; exit 1; }
cleanup() {
    bash "$REPO_DIR/scripts/cluster" down --dir "$DIR" >/dev/null 2>&1
    rm -rf "$DIR"
}
trap cleanup EXIT
command -v python3 >/dev/null || die "python3 is needed"
[ "$(ulimit -n)" -gt $((CONNS + 100)) ] || die "open-files limit $(ulimit -n) is below CONNS=$CONNS"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
bash "$REPO_DIR/scripts/cluster" up --nodes "$NODES" --scheme plain --proxy-port "$port" \
    --memory 256 --dir "$DIR" >/dev/null || die "cluster up failed"
pid=$(cat "$DIR/proxy.pid")
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status"; }

echo "rss start $(rss)"
python3 - "$port" "$CONNS" <<'PY' || die "flood failed"
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
deadline = time.time() + 60
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"get flood:%d\r\n" % i)
    socks.append(s)
for s in socks:
    buf = b""
    while not buf.endswith(b"END\r\n") and time.time() < deadline:
        buf += s.recv(4096)
for s in socks:
    s.close()
PY
sleep 6
echo "rss after-flood-of-$CONNS $(rss)"
python3 - "$port" "$KEYS" "$VALUE" <<'PY' || die "multiget failed"
import socket, sys
port, n, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port), timeout=30)
value = b"v" * size
batch = b"".join(b"set mk:%d 0 0 %d noreply\r\n%s\r\n" % (i, size, value) for i in range(n))
s.sendall(batch + b"version\r\n")
buf = b""
while b"VERSION" not in buf:
    buf += s.recv(65536)
s.sendall(b"get " + b" ".join(b"mk:%d" % i for i in range(n)) + b"\r\n")
buf, values = b"", 0
while not buf.endswith(b"END\r\n"):
    chunk = s.recv(1 << 20)
    if not chunk:
        break
    buf += chunk
values = buf.count(b"VALUE ")
s.close()
print("multiget values %d of %d" % (values, n))
PY
sleep 6
echo "rss after-multiget-of-$KEYS $(rss)"
echo "rss peak $(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status")"
