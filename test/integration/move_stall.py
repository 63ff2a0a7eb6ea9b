#!/usr/bin/env python3
"""move_stall.py - how long a server keeps a client waiting: sends `version`
to each HOST:PORT in a loop, one request in flight per server, until the
file STOP exists (or LIMIT seconds passed), and prints per server the
requests answered and the longest wait in ms ("HOST:PORT N MAX_MS").

usage: move_stall.py STOP LIMIT HOST:PORT...  (used by move_stall.sh)
"""
import os
import socket
import sys
import threading
import time


def probe(target, stop, limit, out):
    host, port = target.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    n, longest = 0, 0.0
    end = time.monotonic() + limit
    while not os.path.exists(stop) and time.monotonic() < end:
        t0 = time.monotonic()
        s.sendall(b"version\r\n")
        buf = b""
        while not buf.endswith(b"\r\n"):
            chunk = s.recv(4096)
            if not chunk:
                raise SystemExit("%s closed the connection" % target)
            buf += chunk
        longest = max(longest, time.monotonic() - t0)
        n += 1
    s.close()
    out[target] = (n, longest * 1000.0)


def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    stop, limit, targets = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    out = {}
    threads = [threading.Thread(target=probe, args=(t, stop, limit, out)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for t in targets:
        n, ms = out.get(t, (0, -1.0))
        print("%s %d %.1f" % (t, n, ms))


if __name__ == "__main__":
    main()
