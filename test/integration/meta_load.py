#!/usr/bin/env python3
"""meta_load.py - meta commands (ms, then mg of the same key) from a few
connections, for a while, with a command run partway through.

  meta_load.py --target HOST:PORT --seconds S --at T --cmd CMD
               [--threads N] [--keys K] [--timeout SEC]

Each thread has one text connection and loops over its K keys: `ms <key>
<n>` must answer `HD`, then `mg <key> v` must answer the value just
stored.  CMD (a shell command) runs T seconds in.  Any other reply, or a
reply that takes longer than --timeout, is an error.  Prints the counts and
the longest time a thread waited for one reply; exits 1 on any error, or
when no thread completed a round after CMD.  (proxy_hang.sh: meta commands
through a data process's stop.)
"""

import argparse
import socket
import subprocess
import sys
import threading
import time


def read_line(sock, buf):
    while b"\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\r\n")
    buf[:] = rest
    return line


def read_exact(sock, buf, n):
    while len(buf) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    data = bytes(buf[:n])
    del buf[:n]
    return data


class Worker(threading.Thread):
    def __init__(self, addr, tid, stop_at, nkeys, timeout):
        super().__init__()
        self.addr, self.tid, self.stop_at = addr, tid, stop_at
        self.nkeys, self.timeout = nkeys, timeout
        self.rounds, self.longest = 0, 0.0
        self.errors = []
        self.done_times = []

    def call(self, sock, buf, req):
        t0 = time.monotonic()
        sock.sendall(req)
        line = read_line(sock, buf)
        value = None
        if line.startswith(b"VA "):
            n = int(line.split()[1])
            value = read_exact(sock, buf, n + 2)[:n]
        self.longest = max(self.longest, time.monotonic() - t0)
        return line, value

    def run(self):
        sock, buf, i = None, bytearray(), 0
        while time.monotonic() < self.stop_at:
            key = "mh%d_%d" % (self.tid, i % self.nkeys)
            value = ("%d:%d" % (self.tid, i)).encode() * 4
            i += 1
            try:
                if sock is None:
                    sock = socket.create_connection(self.addr, timeout=self.timeout)
                    buf = bytearray()
                line, _ = self.call(sock, buf, b"ms %s %d\r\n%s\r\n" %
                                    (key.encode(), len(value), value))
                if line != b"HD":
                    self.errors.append("ms %s: %r" % (key, line))
                    continue
                line, got = self.call(sock, buf, b"mg %s v\r\n" % key.encode())
                if got != value:
                    self.errors.append("mg %s: %r %r, stored %r" % (key, line, got, value))
                    continue
                self.rounds += 1
                self.done_times.append(time.monotonic())
            except OSError as e:
                self.errors.append("%s: %s" % (key, e))
                if sock is not None:
                    sock.close()
                sock = None
        if sock is not None:
            sock.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--seconds", type=float, default=9)
    ap.add_argument("--at", type=float, default=2)
    ap.add_argument("--cmd", required=True)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--keys", type=int, default=500)
    ap.add_argument("--timeout", type=float, default=10)
    args = ap.parse_args()
    host, port = args.target.rsplit(":", 1)
    start = time.monotonic()
    workers = [Worker((host, int(port)), t, start + args.seconds, args.keys, args.timeout)
               for t in range(args.threads)]
    for w in workers:
        w.start()
    time.sleep(args.at)
    cmd_at = time.monotonic()
    cmd = subprocess.run(args.cmd, shell=True, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    print("command at %.1f s: %s (exit %d)" % (cmd_at - start, cmd.stdout.strip(),
                                              cmd.returncode))
    for w in workers:
        w.join()
    errors = [e for w in workers for e in w.errors]
    after = sum(1 for w in workers for t in w.done_times if t > cmd_at)
    print("meta load: rounds %d errors %d rounds_after_command %d longest_wait_ms %d" %
          (sum(w.rounds for w in workers), len(errors), after,
           round(max(w.longest for w in workers) * 1000)))
    for e in errors[:10]:
        print("  " + e)
    return 1 if errors or after == 0 or cmd.returncode != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
