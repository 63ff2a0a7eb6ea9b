#!/usr/bin/env python3
"""tls_check.py - a TLS client for tls.sh: each subcommand connects to a
cocytus-server -Z (or memcached -Z) the way an application would, checks
what it is told to and exits 0, or prints why and exits 1.

  tls_check.py data PORT CA            pymemcache over TLS: values up to 1 MB,
                                       multi-gets, incr, delete, a pipeline
  tls_check.py slow PORT CA            pipelined gets of 1 MB values read only
                                       after the server's writes waited
  tls_check.py line PORT CA LINE...    one connection: each LINE sent, the
                                       reply printed (up to END, OK, or a line)
  tls_check.py serial PORT CA          the serial of the certificate served
  tls_check.py refused PORT CA CERT KEY MAXVER
                                       the handshake (or the first request)
                                       fails ("-" for no client certificate,
                                       MAXVER 1.2 or -)
  tls_check.py accepted PORT CA CERT KEY
                                       a client certificate gets a reply, and
                                       resumes its session on a second
                                       connection
  tls_check.py resume PORT CA [noticket]
                                       three connections, each offering the
                                       last one's session, over TLS 1.2 and
                                       1.3 (noticket: TLS 1.2 without
                                       tickets, so by session id); prints
                                       which resumed
  tls_check.py refresh_resume PORT CA  a session resumed, then refresh_certs,
                                       then the same session offered again:
                                       a full handshake (new ticket keys)
  tls_check.py garbage PORT            plain-text requests, a torn
                                       ClientHello, random bytes: each closed
"""
import os
import random
import socket
import ssl
import sys
import time

from pymemcache.client.base import Client


def context(ca, cert=None, key=None, maxver=None):
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    if maxver == "1.2":
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def connect(port, ca, **kw):
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return context(ca, **kw).wrap_socket(raw, server_hostname="127.0.0.1")


def read_reply(s, buf, ends):
    """Reads until buf holds one of ends (each a bytes suffix of a line)."""
    while not any(buf.endswith(e) for e in ends):
        chunk = s.recv(65536)
        if not chunk:
            raise EOFError("closed after %d bytes" % len(buf))
        buf += chunk
    return buf


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def data(port, ca):
    c = Client(("127.0.0.1", port), tls_context=context(ca), timeout=10)
    rnd = random.Random(7)
    big = bytes(rnd.getrandbits(8) for _ in range(1000 * 1000))
    check(c.set("big", big, noreply=False), "set of a 1 MB value")
    check(c.get("big") == big, "a 1 MB value came back different")
    values = {"k%d" % i: os.urandom(rnd.randrange(1, 5000)) for i in range(300)}
    check(c.set_many(values, noreply=False) == [], "set_many")
    got = c.get_many(list(values))
    check(got == values, "get_many of 300 keys: %d of them equal" %
          sum(1 for k in values if got.get(k) == values[k]))
    c.set("n", "41")
    check(c.incr("n", 1) == 42, "incr")
    check(c.delete("n", noreply=False), "delete")
    check(c.get("n") is None, "deleted key still there")
    # Requests pipelined in one write, replies checked byte for byte.
    s = connect(port, ca)
    req = b"".join(b"set p%d 0 0 %d\r\n%s\r\n" % (i, len(b"v%d" % i), b"v%d" % i)
                   for i in range(500))
    req += b"".join(b"get p%d\r\n" % i for i in range(500))
    s.sendall(req)
    want = b"STORED\r\n" * 500 + b"".join(
        b"VALUE p%d 0 %d\r\nv%d\r\nEND\r\n" % (i, len(b"v%d" % i), i) for i in range(500))
    got = b""
    while len(got) < len(want):
        chunk = s.recv(65536)
        check(chunk, "pipeline: closed after %d of %d bytes" % (len(got), len(want)))
        got += chunk
    check(got == want, "pipelined replies differ")
    s.close()
    print("data ok: 1 MB value, 300-key get_many, incr/delete, 1000 pipelined requests")


def slow(port, ca):
    """Forty gets of a 1 MB value sent at once and nothing read for a
    second: 40 MB fill the socket's buffers both ways, the server's TLS
    writes wait and are retried; every byte must still arrive in order."""
    c = Client(("127.0.0.1", port), tls_context=context(ca), timeout=10)
    vals = [bytes([65 + i]) * (1000 * 1000 - i) for i in range(4)]
    for i, v in enumerate(vals):
        # (acknowledged: the gets come on another connection)
        check(c.set("s%d" % i, v, noreply=False), "set s%d" % i)
    s = connect(port, ca)
    s.sendall(b"".join(b"get s%d\r\n" % (i % 4) for i in range(40)))
    time.sleep(1.0)
    want = b"".join(b"VALUE s%d 0 %d\r\n%s\r\nEND\r\n" % (i % 4, len(vals[i % 4]), vals[i % 4])
                    for i in range(40))
    got = bytearray()
    while len(got) < len(want):
        chunk = s.recv(1 << 20)
        check(chunk, "slow reader: closed after %d of %d bytes" % (len(got), len(want)))
        got += chunk
    check(bytes(got) == want, "slow reader: replies differ")
    # The connection still serves.
    s.sendall(b"version\r\n")
    check(read_reply(s, b"", [b"\r\n"]).startswith(b"VERSION "), "no version after the backlog")
    print("slow ok: %d bytes in order after the writes waited" % len(want))


def line(port, ca, lines):
    s = connect(port, ca)
    for ln in lines:
        s.sendall(ln.encode() + b"\r\n")
        ends = [b"END\r\n"] if ln.startswith("stats") else [b"\r\n"]
        print(read_reply(s, b"", ends).decode().rstrip("\r\n"))


def serial(port, ca):
    s = connect(port, ca)
    cert = s.getpeercert()
    print(cert["serialNumber"])


def refused(port, ca, cert=None, key=None, maxver=None):
    try:
        s = connect(port, ca, cert=cert, key=key, maxver=maxver)
        # TLS 1.3 tells a client its certificate was refused only on its
        # first read.
        s.sendall(b"version\r\n")
        reply = s.recv(100)
        check(not reply.startswith(b"VERSION"), "served: %r" % reply)
    except (ssl.SSLError, OSError, EOFError) as e:
        print("refused:", type(e).__name__, str(e)[:120])
        return
    print("refused: closed without a reply")


def accepted(port, ca, cert, key):
    ctx = context(ca, cert=cert, key=key)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2     # a session id to offer again
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    s.sendall(b"version\r\n")
    check(read_reply(s, b"", [b"\r\n"]).startswith(b"VERSION"), "no version")
    # A client that offers its last session again (as pools and other
    # languages' clients do) resumes it: its certificate was verified when
    # the session was made.  (Without a session id context OpenSSL refuses
    # such a client outright when it verifies certificates.)
    session = s.session
    s.close()
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    s = ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=session)
    s.sendall(b"version\r\n")
    check(read_reply(s, b"", [b"\r\n"]).startswith(b"VERSION"), "no version after offering "
          "the session again")
    check(s.session_reused, "the session offered again was not resumed")
    print("accepted with a client certificate, and its session resumed on a second connection")


def offer(ctx, port, session):
    """A connection offering session (None: none) that answered version.
    TLS 1.3 sends its tickets after the handshake: s.session is the one
    to offer next only once something was read."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    s = ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=session)
    s.sendall(b"version\r\n")
    check(read_reply(s, b"", [b"\r\n"]).startswith(b"VERSION"), "no version")
    return s


def resume(port, ca, noticket=False):
    versions = [ssl.TLSVersion.TLSv1_2] if noticket else [ssl.TLSVersion.TLSv1_2,
                                                           ssl.TLSVersion.TLSv1_3]
    out = []
    for ver in versions:
        ctx = context(ca)
        ctx.maximum_version = ver
        if noticket:
            ctx.options |= ssl.OP_NO_TICKET
        session, reused = None, []
        for _ in range(3):
            s = offer(ctx, port, session)
            reused.append(s.session_reused)
            session = s.session
            s.close()
        out.append("%s%s %s" % (ver.name, " without tickets" if noticket else "",
                                " ".join("resumed" if r else "full" for r in reused)))
    print(", ".join(out))


def refresh_resume(port, ca):
    ctx = context(ca)
    session, reused = None, []
    for step in range(3):
        s = offer(ctx, port, session)
        reused.append(s.session_reused)
        session = s.session
        if step == 1:
            s.sendall(b"refresh_certs\r\n")
            reply = read_reply(s, b"", [b"\r\n"])
            check(reply == b"OK\r\n", "refresh_certs: %r" % reply)
        s.close()
    check(reused == [False, True, False], "resumed %s (want: full, resumed, then full "
          "after refresh_certs)" % reused)
    print("a session resumed before refresh_certs shakes hands in full after it")


def garbage(port):
    rnd = random.Random(11)
    hello_start = bytes.fromhex("16030100f4010000f00303") + os.urandom(40)
    cases = [b"version\r\n", b"set a 0 0 1\r\nx\r\n", hello_start, b"\x16\x03\x01\xff\xff" +
             os.urandom(300)] + [bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(1, 2000)))
                                for _ in range(20)]
    for i, body in enumerate(cases):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(body)
        if i == 2:
            s.close()           # torn in the middle of a ClientHello
            continue
        try:
            reply = s.recv(4096)
        except (ConnectionResetError, socket.timeout):
            reply = b""
        check(b"VERSION" not in reply and b"STORED" not in reply,
              "plain text served on a TLS port: %r" % reply[:60])
        s.close()
    print("garbage ok: %d connections" % len(cases))


def main():
    cmd, port = sys.argv[1], int(sys.argv[2])
    args = sys.argv[3:]
    if cmd == "data":
        data(port, args[0])
    elif cmd == "slow":
        slow(port, args[0])
    elif cmd == "line":
        line(port, args[0], args[1:])
    elif cmd == "serial":
        serial(port, args[0])
    elif cmd == "refused":
        opt = [None if a == "-" else a for a in args[1:4]] + [None] * 3
        refused(port, args[0], cert=opt[0], key=opt[1], maxver=opt[2])
    elif cmd == "accepted":
        accepted(port, *args[:3])
    elif cmd == "resume":
        resume(port, args[0], noticket=len(args) > 1 and args[1] == "noticket")
    elif cmd == "refresh_resume":
        refresh_resume(port, args[0])
    elif cmd == "garbage":
        garbage(port)
    else:
        print("unknown command", cmd)
        sys.exit(2)


if __name__ == "__main__":
    main()
