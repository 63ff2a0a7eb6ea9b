#!/usr/bin/env python3
"""meta_stall.py - meta commands through cocytus-proxy while their server is
stopped or dead (used by proxy_meta_stall.sh).

The proxy forwards meta commands on text connections of their own; they
must follow the classic path's failure rules: a per-try timeout, a retry of
what is harmless twice until the deadline, a wait until the deadline for
the rest and then a SERVER_ERROR, and
nothing but the stopped server's own requests held up.  Each scenario
stops (SIGSTOP), continues or kills the server itself, so the times it
checks are measured from its own sends.  Exit 0 when every check holds."""
import argparse
import os
import signal
import socket
import struct
import sys
import time

failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures += 1


class Conn:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=30)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise EOFError("the proxy closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line.decode("latin-1")

    def data(self, n):
        while len(self.buf) < n + 2:
            chunk = self.s.recv(65536)
            if not chunk:
                raise EOFError("the proxy closed the connection")
            self.buf += chunk
        d, self.buf = self.buf[:n], self.buf[n + 2:]
        return d

    def reply(self):
        """One meta reply: (first line, value or None)."""
        first = self.line()
        if first.startswith("VA "):
            return first, self.data(int(first.split()[1]))
        return first, None

    def close(self):
        self.s.close()


def timed_reply(conn, t0):
    first, value = conn.reply()
    return first, value, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--proxy", required=True)
    ap.add_argument("--pid", type=int, required=True, help="the server owning --stopped-key")
    ap.add_argument("--stopped-key", required=True)
    ap.add_argument("--healthy-key", required=True)
    ap.add_argument("--timeout-ms", type=int, required=True, help="the proxy's -t")
    ap.add_argument("--deadline-ms", type=int, required=True, help="the proxy's -D")
    a = ap.parse_args()
    ks, kh = a.stopped_key, a.healthy_key
    t_try, t_dead = a.timeout_ms / 1000.0, a.deadline_ms / 1000.0
    slack = 2.5   # a busy machine (sanitizers, make -j2 check) delays replies

    c = Conn(a.proxy)
    c.send(b"ms %s 5 T0\r\nstopv\r\nms %s 5 T0\r\nhealt\r\n" % (ks.encode(), kh.encode()))
    check(c.reply()[0] == "HD" and c.reply()[0] == "HD", "both keys stored through the proxy")
    b = Conn(a.proxy)

    # 0. A meta command waiting for its own client's earlier classic request
    # (held by the stopped server) holds only that client: another
    # client's classic and meta requests are answered at once, also after
    # the first client is reset (the proxy once queued every client's
    # launches behind it, and after the reset waited for an unrelated
    # request to finish, which with nothing else going on was never).
    def get_healthy(conn, what):
        t0 = time.monotonic()
        conn.s.settimeout(t_try + slack)
        try:
            first = conn.line()
            value = conn.data(5) if first.startswith("VALUE") else None
            end = conn.line() if value is not None else None
        except (socket.timeout, EOFError) as e:
            first, value, end = repr(e), None, None
        conn.s.settimeout(30)
        took = time.monotonic() - t0
        check(first.startswith("VALUE") and value == b"healt" and end == "END" and took < t_try,
              "%s: %r %r %r in %.3f s" % (what, first, value, end, took))

    os.kill(a.pid, signal.SIGSTOP)
    try:
        r = Conn(a.proxy)
        r.send(b"get %s\r\nmg %s v\r\n" % (ks.encode(), kh.encode()))
        time.sleep(0.2)
        b.send(b"get %s\r\n" % kh.encode())
        get_healthy(b, "a get on another connection while a meta command waits for its "
                       "client's get held by the stopped server")
        b.send(b"mg %s v\r\n" % kh.encode())
        first, value, took = timed_reply(b, time.monotonic())
        check(first.startswith("VA") and value == b"healt" and took < t_try,
              "an mg on that other connection meanwhile: %r %r in %.3f s" % (first, value, took))
        r.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        r.close()                   # a reset: the proxy closes the client at once
        time.sleep(0.2)
        b.send(b"get %s\r\n" % kh.encode())
        get_healthy(b, "a get on another connection after that client was reset")
    finally:
        os.kill(a.pid, signal.SIGCONT)

    # 1. A harmless lookup of the stopped server's key is tried again until
    # the deadline, then fails; a later request on the same connection
    # answers after it (order), and another connection is not held up.
    os.kill(a.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        c.send(b"mg %s v\r\nmg %s v\r\n" % (ks.encode(), kh.encode()))
        time.sleep(0.05)
        tb = time.monotonic()
        b.send(b"mg %s v\r\n" % kh.encode())
        first, value, took = timed_reply(b, tb)
        check(first.startswith("VA") and value == b"healt" and took < t_try,
              "healthy key on another connection while the server is stopped: %r %r in %.3f s"
              % (first, value, took))
        first, value, took = timed_reply(c, t0)
        check(first.startswith("SERVER_ERROR gave up after") and "no reply in" in first
              and t_dead - 0.1 <= took <= t_dead + t_try + slack,
              "mg of the stopped server's key fails after the deadline (%.1f s): %r in %.3f s"
              % (t_dead, first, took))
        first, value, took = timed_reply(c, t0)
        check(first.startswith("VA") and value == b"healt",
              "the request after it on the same connection answers in order: %r %r" % (first, value))

        # 2. An arithmetic command is not harmless twice, so it is never
        # sent again: past the try timeout its connection is kept until the
        # deadline, and a server that was only slow answers it (here: the
        # value is not a number) ...
        t0 = time.monotonic()
        c.send(b"ma %s\r\n" % ks.encode())
        time.sleep(t_try + (t_dead - t_try) / 4)
        os.kill(a.pid, signal.SIGCONT)
        tc = time.monotonic() - t0
        first, value, took = timed_reply(c, t0)
        check(first.startswith("CLIENT_ERROR") and took >= t_try,
              "ma of the stopped server's key waited for past the try timeout (%.1f s), "
              "answered by the server once it continued (at %.3f s): %r in %.3f s"
              % (t_try, tc, first, took))
        # ... and one that stays silent fails it at the deadline, saying it
        # may have been applied.
        os.kill(a.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        c.send(b"ma %s\r\n" % ks.encode())
        first, value, took = timed_reply(c, t0)
        check(first.startswith("SERVER_ERROR no reply in") and "may have been applied" in first
              and t_dead - 0.1 <= took <= t_dead + t_try + slack,
              "ma of the stopped server's key fails at the deadline (%.1f s): %r in %.3f s"
              % (t_dead, first, took))

        # 3. A lookup whose first try timed out is answered by its next try
        # once the server continues before the deadline.
        t0 = time.monotonic()
        c.send(b"mg %s v\r\n" % ks.encode())
        time.sleep(t_try + (t_dead - t_try) / 4)
    finally:
        os.kill(a.pid, signal.SIGCONT)
    tc = time.monotonic() - t0
    first, value, took = timed_reply(c, t0)
    check(first.startswith("VA") and value == b"stopv" and took >= t_try,
          "mg tried again after its first try timed out, answered once the server continued "
          "(continued at %.3f s): %r %r in %.3f s" % (tc, first, value, took))

    # 4. A dead server: harmless requests are tried until the deadline.
    os.kill(a.pid, signal.SIGKILL)
    t0 = time.monotonic()
    c.send(b"mg %s v\r\n" % ks.encode())
    tb = time.monotonic()
    b.send(b"mg %s v\r\n" % kh.encode())
    first, value, took = timed_reply(b, tb)
    check(first.startswith("VA") and value == b"healt" and took < t_try,
          "healthy key while the server is dead: %r %r in %.3f s" % (first, value, took))
    first, value, took = timed_reply(c, t0)
    check(first.startswith("SERVER_ERROR gave up after") and took <= t_dead + t_try + slack,
          "mg of the dead server's key fails by the deadline: %r in %.3f s" % (first, took))
    c.send(b"mn\r\n")
    check(c.reply()[0] == "MN", "the connection still serves")
    c.close()
    b.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
