#!/usr/bin/env python3
"""sasl_check.py - binary SASL sequences against a server started with -S.

Each sequence runs on its own connection and its transcript is printed
one reply per line (opcode, status, body; CLOSED when the server closed
the connection, NOREPLY when nothing came within the timeout).  Server
challenges (CRAM-MD5's <...@host>) and the version string are written as
placeholders, so the transcript of cocytus-server -S and of memcached -S
on the same SASL configuration must be equal; sasl.sh compares them.
Besides the transcript, --expect checks this server's replies against
what memcached -S was seen to answer (test/integration/sasl.sh), so the
test means something without memcached installed.

usage: sasl_check.py --port P --user U --password W --realm-user U@R --realm-password W
                     [--expect] [--tls]
"""
import argparse
import hashlib
import hmac
import re
import socket
import ssl
import struct
import sys

SASL_LIST, SASL_AUTH, SASL_STEP = 0x20, 0x21, 0x22
GET, SET, QUIT, NOOP, VERSION, STAT, GETQ = 0x00, 0x01, 0x07, 0x0a, 0x0b, 0x10, 0x09
FAIL = (0x20, b"Auth failure.")


def req(op, key=b"", val=b"", extras=b"", opaque=0):
    body = len(key) + len(extras) + len(val)
    return struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(extras), 0, 0, body,
                       opaque, 0) + extras + key + val


def set_req(key, val):
    return req(SET, key, val, struct.pack(">II", 0, 0))


class Conn:
    def __init__(self, port, timeout, tls=False):
        self.s = socket.create_connection(("127.0.0.1", port))
        if tls:
            # -Z -S: the certificate is not what is tested here (tls.sh).
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            self.s = ctx.wrap_socket(self.s, server_hostname="127.0.0.1")
        self.s.settimeout(timeout)

    def exact(self, n):
        out = b""
        while len(out) < n:
            d = self.s.recv(n - len(out))
            if not d:
                return None
            out += d
        return out

    def reply(self, timeout):
        """(opcode, status, key, body), or 'CLOSED' / 'NOREPLY'."""
        self.s.settimeout(timeout)
        try:
            h = self.exact(24)
            if h is None:
                return "CLOSED"
            _, op, kl, el, _, st, bl, _, _ = struct.unpack(">BBHBBHIIQ", h)
            body = self.exact(bl) if bl else b""
            if body is None:
                return "CLOSED"
        except socket.timeout:
            return "NOREPLY"
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return "CLOSED"
        return (op, st, body[el:el + kl], body[el + kl:])

    def send(self, data):
        try:
            self.s.sendall(data)
            return True
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return False

    def close(self):
        self.s.close()


def show(r):
    if isinstance(r, str):
        return r
    op, st, _, body = r
    text = body.decode("latin-1")
    text = re.sub(r"<[0-9.]+@[^>]*>", "<challenge>", text)
    if op == VERSION and st == 0:
        text = "<version>"
    return "op=0x%02x status=0x%02x %r" % (op, st, text)


def cram_response(user, password, challenge):
    digest = hmac.new(password.encode(), challenge, hashlib.md5).hexdigest()
    return user.encode() + b" " + digest.encode()


def sequences(a):
    """(name, [(label, request bytes or a function of the last reply, expected)])
    expected: None (not checked), 'CLOSED', 'NOREPLY', or (status, body or None)."""
    plain_ok = b"\0" + a.user.encode() + b"\0" + a.password.encode()
    plain_bad = b"\0" + a.user.encode() + b"\0wrong"
    ok = (0, b"Authenticated")
    seqs = [
        ("noop before auth", [("noop", req(NOOP), FAIL), ("noop again", req(NOOP), "CLOSED")]),
        ("stat before auth", [("stat", req(STAT), FAIL), ("after", req(NOOP), "CLOSED")]),
        ("set before auth", [("set", set_req(b"k", b"v"), FAIL), ("after", req(NOOP), "CLOSED")]),
        ("quit before auth", [("quit", req(QUIT), FAIL)]),
        ("getq before auth", [("getq", req(GETQ, b"k"), FAIL), ("after", req(NOOP), "CLOSED")]),
        ("unknown opcode before auth", [("0x55", req(0x55, b"k", b"vv"), FAIL)]),
        ("bad extras before auth", [("set", req(SET, b"k", b"v", b"abc"), FAIL)]),
        ("5 MB set before auth (header, extras, key only)",
         [("set", struct.pack(">BBHBBHIIQ", 0x80, SET, 1, 8, 0, 0, 5000000, 0, 0) + b"\0" * 9, FAIL)]),
        ("header alone before auth: waits for key and extras",
         [("set header", set_req(b"k", b"v" * 100)[:24], "NOREPLY")]),
        ("version before auth", [("version", req(VERSION), (0, None)), ("noop", req(NOOP), FAIL)]),
        ("auth, fail, succeed, list drops it", [
            ("list", req(SASL_LIST), (0, None)),
            ("auth wrong", req(SASL_AUTH, b"PLAIN", plain_bad), FAIL),
            ("auth wrong again", req(SASL_AUTH, b"PLAIN", plain_bad), FAIL),
            ("auth", req(SASL_AUTH, b"PLAIN", plain_ok), ok),
            ("set", set_req(b"sasl-key", b"v1"), (0, b"")),
            ("get", req(GET, b"sasl-key"), (0, b"v1")),
            ("list", req(SASL_LIST), (0, None)),
            ("get after list", req(GET, b"sasl-key"), FAIL),
            ("closed", req(NOOP), "CLOSED")]),
        ("auth twice: the second fails and drops the first", [
            ("auth", req(SASL_AUTH, b"PLAIN", plain_ok), ok),
            ("auth again", req(SASL_AUTH, b"PLAIN", plain_ok), FAIL),
            ("get", req(GET, b"sasl-key"), FAIL)]),
        ("authzid the same user", [
            ("auth", req(SASL_AUTH, b"PLAIN", a.user.encode() + plain_ok), ok),
            ("get", req(GET, b"sasl-key"), (0, b"v1"))]),
        ("authzid another user", [
            ("auth", req(SASL_AUTH, b"PLAIN", b"someone" + plain_ok), FAIL),
            ("get", req(GET, b"sasl-key"), FAIL)]),
        ("a user of another realm", [
            ("auth", req(SASL_AUTH, b"PLAIN",
                         b"\0" + a.realm_user.encode() + b"\0" + a.realm_password.encode()), ok)]),
        ("that user without its realm", [
            ("auth", req(SASL_AUTH, b"PLAIN",
                         b"\0" + a.realm_user.split("@")[0].encode() + b"\0" +
                         a.realm_password.encode()), FAIL)]),
        ("mechanism names", [
            ("lower case plain", req(SASL_AUTH, b"plain", plain_ok), ok),
            ("unknown", req(SASL_AUTH, b"FOO", b"x"), FAIL),
            ("32 bytes", req(SASL_AUTH, b"P" * 32, plain_ok), FAIL),
            ("33 bytes: invalid", req(SASL_AUTH, b"P" * 33, plain_ok), (0x04, b"Invalid arguments")),
            ("step, 40 bytes: invalid", req(SASL_STEP, b"P" * 40, b"x"), (0x04, b"Invalid arguments")),
            ("still open", req(VERSION), (0, None))]),
        ("empty mechanism: invalid, closed", [
            ("auth", req(SASL_AUTH, b"", plain_ok), (0x04, b"Invalid arguments")),
            ("after", req(VERSION), "CLOSED")]),
        ("list with a key: invalid, closed", [
            ("list", req(SASL_LIST, b"abc"), (0x04, b"Invalid arguments")),
            ("after", req(VERSION), "CLOSED")]),
        ("step after an unknown mechanism", [
            ("auth", req(SASL_AUTH, b"BOGUS", b"x"), FAIL),
            ("step", req(SASL_STEP, b"BOGUS", b"y"), FAIL),
            ("open", req(VERSION), (0, None))]),
        ("step after a half-way exchange restarted with an unknown mechanism", [
            ("auth", req(SASL_AUTH, b"CRAM-MD5", b""), (0x21, None)),
            ("auth", req(SASL_AUTH, b"BOGUS", b"x"), FAIL),
            ("step", req(SASL_STEP, b"CRAM-MD5", b"x"), FAIL),
            ("open", req(VERSION), (0, None))]),
        ("lengths that contradict each other before auth: the key is waited for", [
            ("get, 2 of 5 key bytes", struct.pack(">BBHBBHIIQ", 0x80, GET, 5, 0, 0, 0, 2, 0, 0) + b"ab",
             "NOREPLY"),
            ("the other 3: unknown", b"cde", (0x81, b"Unknown command")),
            ("after", req(VERSION), "CLOSED")]),
        ("a SASL body in pieces", [
            ("auth, header", req(SASL_AUTH, b"PLAIN", plain_ok)[:26], "NOREPLY"),
            ("auth, the rest", req(SASL_AUTH, b"PLAIN", plain_ok)[26:], ok),
            ("get", req(GET, b"sasl-key"), (0, b"v1"))]),
        ("step without auth", [("step", req(SASL_STEP, b"PLAIN", b"x"), FAIL),
                               ("open", req(VERSION), (0, None))]),
        ("PLAIN without its message asks for it", [
            ("auth", req(SASL_AUTH, b"PLAIN", b""), (0x21, b"")),
            ("step", req(SASL_STEP, b"PLAIN", plain_ok), ok),
            ("get", req(GET, b"sasl-key"), (0, b"v1"))]),
        ("PLAIN garbage", [("auth", req(SASL_AUTH, b"PLAIN", b"abc"), FAIL),
                           ("open", req(VERSION), (0, None))]),
        ("CRAM-MD5", [
            ("auth", req(SASL_AUTH, b"CRAM-MD5", b""), (0x21, None)),
            ("step", lambda last: req(SASL_STEP, b"CRAM-MD5",
                                      cram_response(a.user, a.password, last[3])), ok),
            ("get", req(GET, b"sasl-key"), (0, b"v1")),
            ("step after success", req(SASL_STEP, b"CRAM-MD5", b"x"), FAIL),
            ("get", req(GET, b"sasl-key"), FAIL)]),
        ("CRAM-MD5 wrong digest", [
            ("auth", req(SASL_AUTH, b"CRAM-MD5", b""), (0x21, None)),
            ("step", req(SASL_STEP, b"CRAM-MD5", a.user.encode() + b" 0123"), FAIL),
            ("open", req(VERSION), (0, None))]),
        ("an exchange left half-way", [
            ("auth", req(SASL_AUTH, b"CRAM-MD5", b""), (0x21, None)),
            ("get", req(GET, b"sasl-key"), FAIL)]),
        ("a new exchange over a half-way one", [
            ("auth", req(SASL_AUTH, b"CRAM-MD5", b""), (0x21, None)),
            ("auth", req(SASL_AUTH, b"PLAIN", plain_ok), ok),
            ("get", req(GET, b"sasl-key"), (0, b"v1"))]),
        ("after auth, an unknown opcode is unknown", [
            ("auth", req(SASL_AUTH, b"PLAIN", plain_ok), ok),
            ("0x55", req(0x55), (0x81, b"Unknown command")),
            ("get", req(GET, b"sasl-key"), (0, b"v1"))]),
        ("refusals before the value is read keep what was proved", [
            ("auth", req(SASL_AUTH, b"PLAIN", plain_ok), ok),
            ("auth, 600 KB", req(SASL_AUTH, b"PLAIN", b"x" * 600000), (0x82, b"Out of memory")),
            ("get", req(GET, b"sasl-key"), (0, b"v1")),
            ("auth, 40-byte mechanism", req(SASL_AUTH, b"P" * 40, b"x"), (0x04, b"Invalid arguments")),
            ("get", req(GET, b"sasl-key"), (0, b"v1"))]),
        ("the largest exchange message: one 512 KB item chunk", [
            ("auth, 524,224 bytes", req(SASL_AUTH, b"PLAIN", b"\0" + b"x" * 524223), FAIL),
            ("auth, 524,225 bytes", req(SASL_AUTH, b"PLAIN", b"\0" + b"x" * 524224), (0x82, b"Out of memory")),
            ("step, 524,226 bytes", req(SASL_STEP, b"PLAIN", b"x" * 524226), (0x82, b"Out of memory")),
            ("still open", req(VERSION), (0, None))]),
        ("ASCII is not spoken: a short line waits", [("get", b"get k\r\n", "NOREPLY")]),
        ("ASCII is not spoken: 24 bytes are a bad magic byte", [("gets", b"get k\r\n" * 4, "CLOSED")]),
    ]
    return seqs


def run(a):
    bad = 0
    cmds = errors = 0
    for name, steps in sequences(a):
        print("== %s" % name)
        c = Conn(a.port, a.timeout, a.tls)
        last = None
        for label, data, want in steps:
            if callable(data):
                data = data(last)
            # Silence is waited for briefly; a reply as long as a loaded
            # (or sanitizer) build may need.
            wait = a.quiet if want == "NOREPLY" else a.timeout
            r = c.reply(wait) if c.send(data) else "CLOSED"
            print("  %s: %s" % (label, show(r)))
            if isinstance(r, tuple) and r[0] in (SASL_AUTH, SASL_STEP) and r[1] in (0, 0x20):
                cmds += 1
            if isinstance(r, tuple) and r[0] in (SASL_AUTH, SASL_STEP) and r[1] == 0x20:
                errors += 1
            if a.expect and want is not None and not matches(r, want):
                print("  MISMATCH: %s wanted %r" % (label, want), file=sys.stderr)
                bad += 1
            last = r
            if r == "CLOSED":
                break
        c.close()
    # What the sequences counted (both servers run the same ones).
    c = Conn(a.port, a.timeout, a.tls)
    c.send(req(SASL_AUTH, b"PLAIN", b"\0" + a.user.encode() + b"\0" + a.password.encode()))
    c.reply(a.timeout)
    cmds += 1
    stats = {}
    for group in (b"", b"settings"):
        c.send(req(STAT, group))
        while True:
            r = c.reply(a.timeout)
            if not isinstance(r, tuple) or not r[2]:
                break
            stats[r[2].decode()] = r[3].decode()
    for k in ("auth_cmds", "auth_errors", "auth_enabled_sasl", "binding_protocol"):
        print("stat %s %s" % (k, stats.get(k)))
    # memcached counts every auth or step that ended an exchange, with
    # success or failure, in auth_cmds (not one answered with a challenge,
    # nor one refused before its value was read) and every failure in
    # auth_errors; the replies above say how many of each.
    want = {"auth_enabled_sasl": "yes", "binding_protocol": "binary",
            "auth_cmds": str(cmds), "auth_errors": str(errors)}
    for k, v in want.items():
        if a.expect and stats.get(k) != v:
            print("  MISMATCH: stat %s %r, wanted %r" % (k, stats.get(k), v), file=sys.stderr)
            bad += 1
    return bad


def matches(r, want):
    if isinstance(want, str):
        return r == want
    if not isinstance(r, tuple):
        return False
    status, body = want
    return r[1] == status and (body is None or r[3] == body)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--realm-user", required=True)
    p.add_argument("--realm-password", required=True)
    p.add_argument("--timeout", type=float, default=10.0, help="wait for a reply")
    p.add_argument("--quiet", type=float, default=0.5, help="wait for a reply that must not come")
    p.add_argument("--expect", action="store_true")
    p.add_argument("--tls", action="store_true", help="connect with TLS (a server with -Z -S)")
    a = p.parse_args()
    bad = run(a)
    if bad:
        print("%d reply(ies) not as expected" % bad, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
