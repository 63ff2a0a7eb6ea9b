#!/usr/bin/env python3
"""link_garbage.py - garbage at a link port (docs/wire-format.md, sections
1, 3 and 4): the port a parity process, a backup or the coordinator accepts
replication and control links on.  Only a peer that proves the cluster
secret for an identity the acceptor takes gets past the handshake, so this
is what anyone who can reach the port can send: random bytes, frame
headers with a bad magic, type, length or CRC, well-formed frames of every
type out of turn, frames over the handshake's 1024-byte limit, HELLOs
with a wrong cluster name or a wrong proof, HELLOs with a correct proof
(the secret is given) for identities the acceptor must refuse (another
group, an index or role no process has), half frames and silence.

From a fixed seed, up to --conns connections at a time for --seconds.
Every connection must end closed by the acceptor (a REJECT first, for a
well-formed HELLO it refuses), within the 3 s handshake limit plus slack:
none may get a WELCOME, none may stay open.  Prints a summary; exits 1 if
a connection was welcomed or left open, or nothing got through, 2 on bad
arguments.
"""
import argparse
import errno
import random
import selectors
import socket
import struct
import sys
import time

MAGIC = 0x564B5943
CHALLENGE, HELLO, WELCOME, REJECT, RECORD = 1, 2, 3, 4, 5
HANDSHAKE_MAX = 1024
CLOSE_WITHIN = 3.0 + 2.0      # LINK_HANDSHAKE_TIMEOUT_MS, plus slack for a loaded machine
MASK64 = (1 << 64) - 1


# ---- CRC-32C and SipHash-2-4, as the wire format defines them ----

def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & MASK64


def siphash24(key, msg):
    k0, k1 = struct.unpack("<QQ", key)
    v0 = k0 ^ 0x736F6D6570736575
    v1 = k1 ^ 0x646F72616E646F6D
    v2 = k0 ^ 0x6C7967656E657261
    v3 = k1 ^ 0x7465646279746573

    def rounds(n):
        nonlocal v0, v1, v2, v3
        for _ in range(n):
            v0 = (v0 + v1) & MASK64; v1 = _rotl(v1, 13); v1 ^= v0; v0 = _rotl(v0, 32)
            v2 = (v2 + v3) & MASK64; v3 = _rotl(v3, 16); v3 ^= v2
            v0 = (v0 + v3) & MASK64; v3 = _rotl(v3, 21); v3 ^= v0
            v2 = (v2 + v1) & MASK64; v1 = _rotl(v1, 17); v1 ^= v2; v2 = _rotl(v2, 32)

    tail = len(msg) % 8
    for i in range(0, len(msg) - tail, 8):
        m = struct.unpack_from("<Q", msg, i)[0]
        v3 ^= m
        rounds(2)
        v0 ^= m
    last = (len(msg) & 0xFF) << 56
    for i in range(tail):
        last |= msg[len(msg) - tail + i] << (8 * i)
    v3 ^= last
    rounds(2)
    v0 ^= last
    v2 ^= 0xFF
    rounds(4)
    return v0 ^ v1 ^ v2 ^ v3


def self_test():
    key = bytes(range(16))
    assert siphash24(key, b"") == 0x726FDB47DD0E0E31
    assert siphash24(key, bytes(range(15))) == 0xA129CA6149BE45E5
    assert crc32c(b"123456789") == 0xE3069283


def link_key(secret):
    k0 = siphash24(b"cocytus-kv-key-0", secret)
    k1 = siphash24(b"cocytus-kv-key-1", secret)
    return struct.pack("<QQ", k0, k1)


# ---- frames ----

def frame(ftype, payload, crc=None):
    if crc is None:
        crc = crc32c(payload) if payload else 0
    return struct.pack("<IHHII", MAGIC, ftype, 0, len(payload), crc) + payload


def identity(cluster, group, role, index):
    return bytes([len(cluster)]) + cluster + struct.pack("<IBI", group, role, index)


# Cluster names of other clusters; some would forge a log line or reach a
# terminal if an acceptor logged them as they came (garbage_links.sh looks).
FOREIGN_NAMES = [b"other", b"x" * 63, b"\xff" * 8, b"x\nFORGED log line", b"\rFORGED",
                 b"\x1b[2J\x1b[31mFORGED", b"\x07\x08\x7f"]


class Scenarios:
    """Each returns (needs the CHALLENGE first, bytes to send after it,
    what should happen): 'close' (closed, no WELCOME), 'reject' (a REJECT,
    then closed), 'ours' (we close it, nothing to wait for)."""

    def __init__(self, rng, cluster, key, group):
        self.rng, self.cluster, self.key, self.group = rng, cluster, key, group

    def noise(self, nonce):
        return self.rng.randbytes(self.rng.randrange(1, 3000)), "close"

    def bad_header(self, nonce):
        r = self.rng
        magic = r.choice([MAGIC ^ (1 << r.randrange(32)), r.getrandbits(32)])
        ftype = r.randrange(0, 1 << 16) if r.random() < 0.5 else r.randrange(0, 16)
        length = r.choice([0, 8, 16, r.randrange(2000), 1 << 26, (1 << 26) + 1, 0xFFFFFFFF])
        hdr = struct.pack("<IHHII", magic, ftype, r.getrandbits(16), length, r.getrandbits(32))
        if r.random() < 0.5:   # the magic right, something else wrong
            hdr = struct.pack("<I", MAGIC) + hdr[4:]
        return hdr + r.randbytes(min(length, r.randrange(0, 1200))), "close"

    def out_of_turn(self, nonce):
        r = self.rng
        ftype = r.choice([CHALLENGE, WELCOME, REJECT, RECORD, 6, 7, 8, 9, 10, 11, 12, 0])
        payload = r.randbytes(r.randrange(0, HANDSHAKE_MAX + 1))
        crc = None if r.random() < 0.8 else r.getrandbits(32)
        return frame(ftype, payload, crc), "close"

    def oversized(self, nonce):
        r = self.rng
        n = r.choice([HANDSHAKE_MAX + 1, 4096, 1 << 20])
        ftype = r.choice([HELLO, RECORD, 11])
        # the acceptor drops it on the header: no need to compute its CRC
        return frame(ftype, r.randbytes(n), crc=r.getrandbits(32)), "close"

    def bad_hello(self, nonce):
        r = self.rng
        kind = r.randrange(4)
        if kind == 0:      # malformed: wrong length, clen 0 or too long
            payload = r.randbytes(r.randrange(0, 120))
            if payload:
                payload = bytes([r.choice([0, 64, 200, len(payload)])]) + payload[1:]
            return frame(HELLO, payload), "close"
        cluster = self.cluster if kind != 1 else r.choice(FOREIGN_NAMES)
        ident = identity(cluster, self.group if r.random() < 0.7 else r.getrandbits(32),
                         r.randrange(0, 8), r.randrange(0, 4))
        return frame(HELLO, ident + r.randbytes(8)), "reject"     # wrong proof (2^-64)

    def refused_identity(self, nonce):
        """A correct proof for an identity no process of the group has."""
        r = self.rng
        group, role, index = r.choice([
            (self.group + 1 + r.randrange(1000), 1, 0),      # another group
            (self.group, 1, 1000 + r.randrange(1000)),         # no such data process
            (self.group, 2, 1000 + r.randrange(1000)),         # no such parity process
            (self.group, 0, 0),                                # no such role
            (self.group, 7 + r.randrange(200), 0),
        ])
        ident = identity(self.cluster, group, role, index)
        proof = struct.pack("<Q", siphash24(self.key, nonce + ident))
        return frame(HELLO, ident + proof), "reject"

    def half(self, nonce):
        r = self.rng
        whole = frame(HELLO, identity(self.cluster, self.group, 1, 0) + r.randbytes(8))
        return whole[:r.randrange(1, len(whole))], "close"

    def silence(self, nonce):
        return b"", "close"

    def reset(self, nonce):
        return self.rng.randbytes(self.rng.randrange(0, 64)), "ours"


WEIGHTED = [("noise", 14), ("bad_header", 18), ("out_of_turn", 18), ("oversized", 8),
            ("bad_hello", 18), ("refused_identity", 14), ("half", 4), ("silence", 2),
            ("reset", 4)]


class Conn:
    def __init__(self, sock, name, expect, started):
        self.sock, self.name, self.expect, self.started = sock, name, expect, started
        self.buf = b""
        self.frames = []


def read_frames(c):
    while len(c.buf) >= 16:
        magic, ftype, _flags, length, _crc = struct.unpack_from("<IHHII", c.buf)
        if magic != MAGIC or len(c.buf) < 16 + length:
            return
        c.frames.append((ftype, c.buf[16:16 + length]))
        c.buf = c.buf[16 + length:]


def closed_now(c):
    """Reads what is queued; true if the acceptor has closed (a FIN or a
    reset waiting behind the deadline)."""
    try:
        while True:
            d = c.sock.recv(65536)
            if not d:
                return True
            c.buf += d
            read_frames(c)
    except BlockingIOError:
        return False
    except OSError:
        return True


def recv_challenge(sock):
    want, got = 32, b""
    sock.settimeout(2.0)
    while len(got) < want:
        d = sock.recv(want - len(got))
        if not d:
            raise ConnectionError("closed before CHALLENGE")
        got += d
    magic, ftype, _f, length, _crc = struct.unpack_from("<IHHII", got)
    if magic != MAGIC or ftype != CHALLENGE or length != 16:
        raise ConnectionError("no CHALLENGE")
    return got[16:32]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--secret", default="")
    ap.add_argument("--group", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--max-total", type=int, default=3000)
    a = ap.parse_args()
    if not 0 < a.port < 65536 or a.seconds <= 0 or a.seconds > 60 or not 0 < a.conns <= 200:
        print("link_garbage: bad arguments", file=sys.stderr)
        return 2
    self_test()

    rng = random.Random(a.seed)
    sc = Scenarios(rng, a.cluster.encode(), link_key(a.secret.encode()), a.group)
    names = [n for n, w in WEIGHTED for _ in range(w)]
    sel = selectors.DefaultSelector()
    open_conns = []
    tally = {"connections": 0, "closed": 0, "rejects": 0, "refused_at_connect": 0,
             "closed_before_sending": 0, "ours": 0}
    bad = []
    end = time.monotonic() + a.seconds

    def finish(c, how):
        sel.unregister(c.sock)
        c.sock.close()
        open_conns.remove(c)
        took = time.monotonic() - c.started
        welcomed = any(t == WELCOME for t, _ in c.frames)
        rejected = any(t == REJECT for t, _ in c.frames)
        tally["rejects"] += rejected
        if welcomed:
            bad.append("%s: WELCOME %r" % (c.name, c.frames))
        elif how == "timeout":
            bad.append("%s: still open after %.1f s" % (c.name, took))
        elif c.expect == "reject" and not rejected:
            bad.append("%s: closed without a REJECT" % c.name)
        else:
            tally["closed"] += 1

    while time.monotonic() < end or open_conns:
        while (time.monotonic() < end and len(open_conns) < a.conns
               and tally["connections"] < a.max_total):
            name = rng.choice(names)
            tally["connections"] += 1
            try:
                sock = socket.create_connection(("127.0.0.1", a.port), timeout=2.0)
            except OSError:
                tally["refused_at_connect"] += 1
                time.sleep(0.02)
                continue
            try:
                nonce = recv_challenge(sock)
                # the acceptor's 3 s timer runs from before its CHALLENGE
                started = time.monotonic()
                data, expect = getattr(sc, name)(nonce)
                if expect == "ours":
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    if data:
                        sock.sendall(data)
                    sock.close()
                    tally["ours"] += 1
                    continue
                if data:
                    sock.sendall(data)
            except OSError as e:
                # the acceptor may close while we still send (over a limit);
                # but no CHALLENGE, or a send that stalls, is an acceptor
                # that hangs
                sock.close()
                if isinstance(e, socket.timeout) or "CHALLENGE" in str(e):
                    bad.append("%s: %s" % (name, e or "timed out"))
                else:
                    tally["closed_before_sending"] += 1
                    tally["closed"] += 1
                continue
            sock.setblocking(False)
            c = Conn(sock, name, expect, started)
            open_conns.append(c)
            sel.register(sock, selectors.EVENT_READ, c)
        for key, _ in sel.select(timeout=0.05):
            c = key.data
            try:
                d = c.sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError as e:
                if e.errno in (errno.ECONNRESET, errno.EPIPE):
                    d = b""
                else:
                    raise
            if not d:
                finish(c, "closed")
                continue
            c.buf += d
            read_frames(c)
        now = time.monotonic()
        for c in [c for c in open_conns if now - c.started > CLOSE_WITHIN]:
            finish(c, "closed" if closed_now(c) else "timeout")
        if time.monotonic() >= end and tally["connections"] == 0:
            break

    print("link_garbage port %d seed %d: %s" % (a.port, a.seed,
          ", ".join("%s %d" % kv for kv in tally.items())))
    for b in bad[:20]:
        print("link_garbage: BAD " + b)
    if tally["closed"] == 0:
        print("link_garbage: no connection got through")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
