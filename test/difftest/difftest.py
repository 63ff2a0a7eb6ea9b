#!/usr/bin/env python3
"""difftest.py - differential tester: cocytus-server against memcached 1.6.

Starts Debian's memcached and a plain cocytus-server on free loopback ports
(both with -U 0 -m 64 -I 1m, plus the flags of the session's variant),
generates random request sequences from a seed (memcached's ASCII protocol,
its meta commands and its binary protocol; valid, malformed and boundary
requests), sends every sequence to both servers and compares the replies byte
for byte after masking what legitimately differs (the masks are listed in
docs/compat.md and in mask_text() / mask_binary() below).

A case is a list of steps; a step is a list of requests sent in one write,
followed by a sentinel (`mn` on a text connection, a binary NOOP with a
reserved opaque on a binary one) whose reply ends the step.  A step that gets
no sentinel reply (the server waits for the rest of a data block, or closed
the connection) ends after a timeout.  After the last step the client
half-closes and reads until the server closes.  Each case runs on its own
connection with its own key prefix, so cases do not see each other's keys;
after each case a separate connection sends flush_all (and resets the global
settings a case may change), then stores a probe item on both servers and
reads its cas: replies mask cas values, so the probe is what shows a case
that took a different number of cas ids on the two servers (reported as
the counter "cas ids taken"; not with --target).

Every case is generated from (seed, case number) alone, so a difference is
reproduced by `--seed S --case N`.  On a difference the sequence is shrunk
(requests are removed while a difference remains) and printed with both
masked replies; the exit status is then 1.

  difftest.py [--seconds N | --cases N] [--seed S] [--case N] [--keep-going]
              [--memcached PATH] [--server PATH] [--target HOST:PORT] [--verbose]

--target HOST:PORT: send each case to an already-running server (a data
process of a cluster, cocytus-proxy, ...) instead of starting
cocytus-server; memcached is still started here as the reference.  The
target is shared and long-lived, so in this mode:
  * only the default variant runs (-F, -C, -Y and -X need server flags);
  * cases with `shutdown` are skipped (the target may have -A) and cases
    with `verbosity` are skipped and the cleanup sends no `verbosity 0`
    (the target's log level is its operator's: left alone);
  * the cleanup between cases is the same (flush_all, which also ends a
    delayed flush_all of the case; stats detail off; stats sizes_disable;
    cache_memlimit 64), so the target must have been started with 64 MB;
  * a target that answers `config get cluster` and is one of the map's
    endpoints (a data process, a primary) serves only its own slots: the
    sentinel key and the case's keys are chosen so that every key the case
    names through a placeholder hashes to a slot the target owns (key i
    becomes <prefix>k<i>_<n>, the first n that does that),
    and a case that still gets a MOVED (a literal key such as `get k0 k1`,
    an undecodable base64 key) is counted as `moved` and not compared.
    Through cocytus-proxy no key is filtered;
  * at cocytus-proxy (its stats have cluster_servers) the names of the
    general stats are not compared: they are the proxy's own list;
  * a data process's and a PBR primary's own stats names (xid,
    records_sent, committed_xid, ...) are dropped like the other
    cocytus-only names (COCYTUS_STATS);
  * a target that does not accept connections ends the run.

Exit status: 0 no difference, 1 differences, 77 memcached or the server is
missing (make check's "skip").
"""

import argparse
import base64
import os
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

MEM_MB = 64
ITEM_MAX = 1 << 20
STEP_TIMEOUT = 0.5          # seconds without the sentinel reply: the step is over
CLOSE_TIMEOUT = 0.5         # after the half-close, waiting for the server's close
CASES_PER_SESSION = 300     # servers are restarted this often (memory, slabs)
# A miss of a key no case uses, with an opaque: "EN O<tag>" is unique.
SENTINEL_KEY = b"difftest_sentinel"     # --target: one of the target's slots
SENTINEL_TEXT = b"mg %s O%s\r\n"
SENTINEL_TEXT_REPLY = b"EN O%s\r\n"
SENTINEL_OPAQUE = 0x5E5E5E5E
NOW = int(time.time())

# ---------------------------------------------------------------------------
# Requests: bytes with placeholders resolved per server at send time
# ---------------------------------------------------------------------------


class Ctx:
    """What a server's requests are rendered with: the case's key prefix and
    the cas values that server returned so far in this case."""

    def __init__(self, prefix, salt=None):
        self.prefix = prefix
        self.cas = []
        self.salt = salt or {}      # --target: K.sig() -> bytes after 'k<i>'


class K:
    """The key of logical key number i (prefix + 'k<i>'), padded with 'x' to
    `length` bytes, with `extra` bytes appended; b64: base64 of those bytes."""

    def __init__(self, i, length=None, extra=b"", b64=False):
        self.i, self.length, self.extra, self.b64 = i, length, extra, b64

    def sig(self):
        return (self.i, self.length, self.extra)

    def raw(self, ctx):
        k = ctx.prefix + b"k%d" % self.i + ctx.salt.get(self.sig(), b"") + self.extra
        if self.length is not None and len(k) < self.length:
            k += b"x" * (self.length - len(k))
        return k

    def render(self, ctx):
        k = self.raw(ctx)
        return base64.b64encode(k) if self.b64 else k

    def show(self):
        s = "{k%d%s%s%s}" % (self.i, ":%d" % self.length if self.length else "",
                              "+" + repr(self.extra)[2:-1] if self.extra else "",
                              ":b64" if self.b64 else "")
        return s


class Cas:
    """A cas value this server returned earlier in the case: the last one,
    plus delta."""

    def __init__(self, delta=0):
        self.delta = delta

    def value(self, ctx):
        v = ctx.cas[-1] if ctx.cas else 0
        return max(0, v + self.delta) & 0xFFFFFFFFFFFFFFFF

    def render(self, ctx):
        return b"%d" % self.value(ctx)

    def show(self):
        return "{cas%+d}" % self.delta if self.delta else "{cas}"


class Req:
    """One text request: a sequence of bytes and placeholders."""

    def __init__(self, *parts):
        self.parts = parts

    def render(self, ctx):
        return b"".join(p if isinstance(p, bytes) else p.render(ctx) for p in self.parts)

    def show(self):
        out = []
        for p in self.parts:
            if isinstance(p, bytes):
                s = repr(p)[2:-1]
                if len(s) > 120:
                    s = s[:60] + "...(%d bytes)..." % len(p) + s[-30:]
                out.append(s)
            else:
                out.append(p.show())
        return "".join(out)


class BinReq:
    """One binary request; key may be a K; cas may be a Cas; the length
    fields can be overridden to build malformed headers."""

    def __init__(self, opcode, key=b"", extras=b"", value=b"", cas=0, opaque=0,
                 magic=0x80, keylen=None, extlen=None, bodylen=None, datatype=0, vbucket=0):
        self.opcode, self.key, self.extras, self.value = opcode, key, extras, value
        self.cas, self.opaque, self.magic = cas, opaque, magic
        self.keylen, self.extlen, self.bodylen = keylen, extlen, bodylen
        self.datatype, self.vbucket = datatype, vbucket

    def render(self, ctx):
        key = self.key.raw(ctx) if isinstance(self.key, K) else self.key
        cas = self.cas.value(ctx) if isinstance(self.cas, Cas) else self.cas
        keylen = len(key) if self.keylen is None else self.keylen
        extlen = len(self.extras) if self.extlen is None else self.extlen
        body = len(self.extras) + len(key) + len(self.value)
        bodylen = body if self.bodylen is None else self.bodylen
        hdr = struct.pack(">BBHBBHIIQ", self.magic, self.opcode, keylen & 0xFFFF, extlen & 0xFF,
                          self.datatype, self.vbucket, bodylen & 0xFFFFFFFF, self.opaque, cas)
        return hdr + self.extras + key + self.value

    def show(self):
        key = self.key.show() if isinstance(self.key, K) else repr(self.key)[2:-1]
        cas = self.cas.show() if isinstance(self.cas, Cas) else str(self.cas)
        v = repr(self.value)[2:-1]
        if len(v) > 60:
            v = v[:30] + "...(%d bytes)" % len(self.value)
        over = "".join(" %s=%s" % (n, getattr(self, n)) for n in ("magic", "keylen", "extlen",
                                                                 "bodylen", "datatype", "vbucket")
                       if getattr(self, n) not in (None, 0, 0x80))
        return "bin(op=0x%02x key=%s extras=%s value=%s cas=%s opaque=%d%s)" % (
            self.opcode, key, self.extras.hex(), v, cas, self.opaque, over)


def bin_sentinel():
    return BinReq(0x0A, opaque=SENTINEL_OPAQUE)


def bin_sentinel_reply():
    return struct.pack(">BBHBBHIIQ", 0x81, 0x0A, 0, 0, 0, 0, 0, SENTINEL_OPAQUE, 0)


# ---------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------

VALUE_CHARS = b"abcdefghijklmnopqrstuvwxyz0123456789"

# Item size limit of memcached: header (48) + cas (8) + key + 1 + value + 2.
def max_value_for(nkey, cas=True):
    return ITEM_MAX - 48 - (8 if cas else 0) - nkey - 1 - 2


class Gen:
    """Random requests from one seeded generator."""

    def __init__(self, rng):
        self.r = rng
        self.nkeys = self.r.choice((1, 2, 3, 4))

    # -- helpers --
    def pick(self, *weighted):
        """pick((w, value), ...) with integer weights."""
        total = sum(w for w, _ in weighted)
        x = self.r.randrange(total)
        for w, v in weighted:
            if x < w:
                return v() if callable(v) else v
            x -= w
        raise AssertionError

    def chance(self, pct):
        return self.r.randrange(100) < pct

    def key(self):
        i = self.r.randrange(self.nkeys)
        return self.pick(
            (90, lambda: K(i)),
            (3, lambda: K(i, length=250)),
            (3, lambda: K(i, length=251)),
            (1, lambda: K(i, length=self.r.choice((249, 252, 300, 1000)))),
            (2, lambda: K(i, extra=self.r.choice((b"\x01", b"\x7f", b"\xff", b"\t", b"\xc3\xa9",
                                                  b":a", b"/x")))),
            (1, lambda: K(i, extra=b"\x00")),
        )

    def value(self):
        n = self.pick((60, lambda: self.r.randrange(0, 12)),
                      (25, lambda: self.r.randrange(12, 200)),
                      (10, lambda: self.r.randrange(200, 5000)),
                      (5, lambda: self.r.randrange(5000, 40000)))
        return self.bytes_of(n)

    def bytes_of(self, n):
        c = self.r.choice(VALUE_CHARS)
        if n > 64:
            return bytes([c]) * n
        return bytes(self.r.choice(VALUE_CHARS) for _ in range(n))

    def number(self):
        return self.pick((80, lambda: str(self.r.randrange(0, 1000)).encode()),
                         (10, lambda: self.garbage_number()),
                         (10, lambda: self.r.choice((b"18446744073709551615", b"4294967295",
                                                     b"9223372036854775807", b"0"))))

    def garbage_number(self):
        return self.r.choice((
            b"-1", b"-0", b"+1", b"abc", b"1a", b"a1", b"0x10", b"010", b"1.5", b"1e3", b"\t5",
            b"4294967296", b"18446744073709551616", b"99999999999999999999999",
            b"-9223372036854775808", b"-9223372036854775809", b"2147483648", b"-2147483649",
            b"2147483647", b"-2147483648", b"00000000000000000000001", b"1-", b"--1", b"",
            b"\x00", b"\xff", b"1\x00", b" 1", b"1 ",
        ))

    def flags(self):
        return self.pick((75, b"0"),
                         (15, lambda: str(self.r.randrange(1, 1 << 32)).encode()),
                         (4, b"4294967295"),
                         (6, lambda: self.garbage_number()))

    def exptime(self):
        return self.pick((60, b"0"),
                         (8, b"-1"),
                         (12, lambda: str(self.r.randrange(1000, 2592000)).encode()),
                         (4, b"2592000"),
                         (4, b"2592001"),
                         (4, lambda: str(NOW + self.r.randrange(3600, 400000)).encode()),
                         (2, lambda: str(NOW - 1000).encode()),
                         (6, lambda: self.garbage_number()))

    def ttl_token(self):
        """A TTL as a meta flag token."""
        return self.pick((40, b"0"), (10, b"-1"),
                         (30, lambda: str(self.r.randrange(1000, 2592000)).encode()),
                         (5, b"2592001"),
                         (5, lambda: str(NOW + self.r.randrange(3600, 400000)).encode()),
                         (10, lambda: self.garbage_number()))

    def noreply(self):
        return self.pick((85, b""), (12, b" noreply"),
                         (3, lambda: self.r.choice((b" norepl", b" NOREPLY", b" noreply noreply"))))

    def eol(self):
        return self.pick((95, b"\r\n"), (4, b"\n"), (1, b"\r\r\n"))

    def sp(self):
        return self.pick((95, b" "), (5, lambda: self.r.choice((b"  ", b"   "))))

    # -- classic text commands --
    def storage(self):
        cmd = self.r.choice((b"set", b"set", b"set", b"add", b"replace", b"append", b"prepend",
                             b"cas"))
        k = self.key()
        v = self.value()
        n = b"%d" % len(v)
        data = v + b"\r\n"
        mode = self.r.randrange(100)
        if mode < 9 and len(v) > 1000:
            # A desynchronised value would leave a line over memcached's
            # 16 KB read buffer, whose fate depends on read boundaries.
            mode = 50
        if mode < 4:
            n = self.garbage_number()
        elif mode < 7:
            n = b"%d" % (len(v) + self.r.choice((-1, 1, 2)))
            if n == b"-1":
                n = b"0"
        elif mode < 9:
            data = v + self.r.choice((b"", b"\r", b"\n", b"xy", b"\n\r", b"\r\nX"))
            if not data.endswith(b"\r\n"):
                data += b"\r\n" if self.chance(50) else b""
        elif mode < 11 and self.chance(30):
            # a value at the size limit, or just over it
            lim = max_value_for(len(k.raw(Ctx(b"d0000000_"))))
            size = lim + self.r.choice((0, 1, -1, 1000))
            if self.chance(30):
                size = self.r.choice((ITEM_MAX, ITEM_MAX + 1, 2 * ITEM_MAX))
            v = b"z" * size
            n = b"%d" % size
            data = v + b"\r\n"
        elif mode < 12:
            # a huge length whose data never comes: the server waits or swallows
            n = self.r.choice((b"2147483647", b"1073741824", b"4294967295", b"3000000"))
            data = b"abc\r\n"
        fields = [cmd, self.sp(), k, self.sp(), self.flags(), self.sp(), self.exptime(), self.sp(), n]
        if cmd == b"cas":
            fields += [self.sp(), self.pick((70, lambda: Cas()), (10, lambda: Cas(1)),
                                            (10, b"0"), (10, lambda: self.garbage_number()))]
        fields.append(self.noreply())
        if self.chance(3):
            fields.append(self.r.choice((b" extra", b" 0", b" ")))
        if self.chance(2):
            del fields[self.r.randrange(2, len(fields) - 1)]
        return Req(*fields, self.eol(), data)

    def retrieval(self):
        cmd = self.pick((40, b"get"), (30, b"gets"), (15, b"gat"), (15, b"gats"))
        parts = [cmd]
        if cmd in (b"gat", b"gats"):
            parts += [b" ", self.exptime()]
        for _ in range(self.pick((80, 1), (15, 2), (5, lambda: self.r.randrange(0, 6)))):
            parts += [self.sp(), self.key()]
        if self.chance(3):
            parts.append(b" ")
        return Req(*parts, self.eol())

    def delete(self):
        parts = [b"delete", self.sp(), self.key()]
        parts.append(self.pick((80, b""), (8, b" 0"), (8, b" noreply"), (2, b" 0 noreply"),
                               (2, lambda: b" " + self.garbage_number())))
        return Req(*parts, self.eol())

    def arith(self):
        cmd = self.r.choice((b"incr", b"decr"))
        delta = self.pick((70, lambda: str(self.r.randrange(0, 100)).encode()),
                          (10, b"18446744073709551615"), (20, lambda: self.garbage_number()))
        return Req(cmd, self.sp(), self.key(), self.sp(), delta, self.noreply(), self.eol())

    def numeric_set(self):
        v = self.pick((50, lambda: str(self.r.randrange(0, 1000)).encode()),
                      (20, b"18446744073709551615"), (10, b"18446744073709551614"),
                      (10, lambda: self.r.choice((b"00012", b"1 ", b" 1", b"-5", b"12a",
                                                  b"18446744073709551616", b""))),
                      (10, lambda: b"9" * self.r.randrange(1, 25)))
        return Req(b"set ", K(self.r.randrange(self.nkeys)), b" 0 0 %d\r\n" % len(v), v, b"\r\n")

    def touch(self):
        return Req(b"touch", self.sp(), self.key(), self.sp(), self.exptime(), self.noreply(),
                   self.eol())

    def misc(self):
        return self.pick(
            (6, lambda: Req(b"version", self.r.choice((b"", b" x")), self.eol())),
            (6, lambda: Req(b"verbosity", self.pick((60, b" 1"), (10, b" 0"), (5, b""),
                                                    (25, lambda: b" " + self.garbage_number())),
                            self.noreply(), self.eol())),
            (8, lambda: Req(b"flush_all", self.pick((60, b""), (10, b" 0"), (5, b" -1"),
                                                    (5, b" 99999999999"),
                                                    (5, b" 7200"),
                                                    (15, lambda: b" " + self.garbage_number())),
                            self.noreply(), self.eol())),
            (2, lambda: Req(b"quit", self.r.choice((b"", b" now")), self.eol())),
            (2, lambda: Req(b"shutdown", self.r.choice((b"", b" graceful", b" x")), self.eol())),
            (8, lambda: Req(self.r.choice((b"foo", b"GET", b"Get", b"sets", b"mget", b"stat",
                                           b"delete_all", b"lru", b"slabs",
                                           b"lru_crawler", b"misbehave", b"debugtime",
                                           b"cache_memlimit", b"config", b"cocytus")),
                            self.r.choice((b"", b" x", b" 1 2")), self.eol())),
            # (watch with a valid stream starts memcached's log stream, which
            # cocytus-server does not have: only its refusals are compared.)
            (2, lambda: Req(b"watch", self.r.choice((b" x", b" 1 2", b" fetchers x")), self.eol())),
            (4, lambda: Req(self.r.choice((b"", b" ", b"\t", b"\x00", b"\xff\xfe",
                                           b"\x80\x01", b"  get"))
                            , self.eol())),
            (4, lambda: Req(b"cache_memlimit", self.pick(
                (50, lambda: b" %d" % self.r.randrange(8, 200)),
                (10, b" 0"), (10, b" 1"), (10, b""), (20, lambda: b" " + self.garbage_number())),
                self.noreply(), self.eol())),
            (4, lambda: self.stats()),
        )

    def stats(self):
        arg = self.pick(
            (20, b""), (8, b" settings"), (8, b" items"), (8, b" slabs"), (8, b" sizes"),
            (6, b" detail on"), (6, b" detail off"), (8, b" detail dump"),
            (3, lambda: self.r.choice((b" detail", b" detail x", b" detail on off"))),
            (8, lambda: b" cachedump %s %s" % (self.r.choice((b"1", b"2", b"0", b"63", b"64",
                                                                b"200", b"x", b"-1")),
                                                 self.r.choice((b"1", b"0", b"5", b"100",
                                                                b"x", b"-1")))),
            (3, lambda: self.r.choice((b" cachedump", b" cachedump 1", b" cachedump 1 1 1"))),
            (5, b" conns"), (5, b" reset"), (2, b" reset x"),
            (5, lambda: self.r.choice((b" foo", b" extstore", b" sizes_enable",
                                       b" sizes_disable", b" items x", b" settings x",
                                       b" slabs 1")))
        )
        return Req(b"stats", arg, self.eol())

    # -- lines that are not requests --
    def oddline(self):
        return self.pick(
            (10, lambda: Req(self.r.choice((b"GET / HTTP/1.0", b"GET /index.html HTTP/1.1",
                                            b"POST /x HTTP/1.1", b"HEAD / HTTP/1.0",
                                            b"PUT / HTTP/1.1", b"GET / HTTP/1.1\r\nHost: x",
                                            b"OPTIONS * HTTP/1.1", b"get / HTTP/1.0")),
                             self.eol())),
            (6, lambda: Req(b"get " + b"a" * self.r.choice((2040, 2045, 2046, 2047, 2048, 2049, 2050,
                                                             4096, 8192, 70000)), self.eol())),
            (6, lambda: Req(b"x" * self.r.choice((1000, 2046, 2047, 2048, 2049, 4096)),
                            self.r.choice((b"\r\n", b"")))),
            (4, lambda: Req(b"set " + b"a" * self.r.choice((2000, 2100, 3000)) + b" 0 0 1\r\nx\r\n")),
            (6, lambda: Req(b"get", b" " + b" ".join(b"k%d" % j for j in range(self.r.choice((10, 24, 25, 30, 200, 1000)))),
                            self.eol())),
            (4, lambda: Req(bytes(self.r.randrange(256) for _ in range(self.r.randrange(1, 40))),
                            self.eol())),
        )

    # -- meta commands --
    def meta_key(self, allow_b=True):
        """Key bytes and whether the request needs the b flag."""
        if allow_b and self.chance(15):
            i = self.r.randrange(self.nkeys)
            return self.pick(
                (70, lambda: (K(i, b64=True), True)),
                (10, lambda: (K(i, extra=bytes([self.r.randrange(256)]), b64=True), True)),
                (10, lambda: (self.r.choice((b"!!!", b"Zm9v=", b"Zm9", b"Zg==", b"Zg=",
                                             b"====", b"a", b"YQ==YQ==")), True)),
                (10, lambda: (K(i, length=188, b64=True), True)),
            )
        return self.key(), False

    def meta_flags(self, pool):
        flags = []
        for _ in range(self.pick((30, 0), (30, 1), (20, 2), (10, 3), (8, 5),
                                 (2, lambda: self.r.randrange(6, 30)))):
            flags.append(self.r.choice(pool)())
        return flags

    def tok_flag(self, ch, gen):
        return lambda: ch + gen()

    def opaque(self):
        return b"O" + self.pick((70, lambda: str(self.r.randrange(0, 1000)).encode()),
                                (10, b""), (10, lambda: b"x" * self.r.choice((31, 32, 33, 40))),
                                (10, lambda: self.r.choice((b"abc", b"-1", b"a:b"))))

    def cas_token(self):
        return self.pick((70, lambda: Cas()), (10, lambda: Cas(1)), (5, lambda: Cas(-1)),
                         (10, b"0"), (5, lambda: self.garbage_number()))

    def mg(self):
        k, b = self.meta_key()
        pool = [lambda: b"v", lambda: b"v", lambda: b"c", lambda: b"f", lambda: b"h",
                lambda: b"k", lambda: b"l", lambda: b"q", lambda: b"s", lambda: b"t",
                lambda: b"u", lambda: self.opaque(),
                self.tok_flag(b"N", self.ttl_token), self.tok_flag(b"R", self.ttl_token),
                self.tok_flag(b"T", self.ttl_token),
                lambda: self.r.choice((b"P", b"Pfoo", b"L", b"Lpath/", b"b", b"x", b"E1", b"C1",
                                       b"I", b"M", b"vv", b"v1", b"S", b"O", b"N", b"Z", b"W",
                                       b"X", b"!"))]
        flags = self.meta_flags(pool)
        if b:
            flags.insert(self.r.randrange(len(flags) + 1), b"b")
        return self.meta_req(b"mg", k, flags)

    def meta_req(self, cmd, k, flags, size=None):
        parts = [cmd, self.sp(), k]
        if size is not None:
            parts += [b" ", size]
        for f in flags:
            parts += [b" "] + ([f] if isinstance(f, (bytes, Cas)) else [f])
        if self.chance(3):
            parts.append(b" ")
        return Req(*parts, self.eol())

    def ms(self):
        k, b = self.meta_key()
        v = self.value()
        if self.chance(3):
            lim = max_value_for(188)
            v = b"z" * (lim + self.r.choice((0, 1, 2000)))
        size = b"%d" % len(v)
        data = v + b"\r\n"
        mode = self.r.randrange(100)
        if mode < 8 and len(v) > 1000:
            mode = 50
        if mode < 4:
            size = self.garbage_number()
        elif mode < 6:
            size = b"%d" % (len(v) + 1)
        elif mode < 7:
            data = v + b"XY"
        elif mode < 8:
            size = b""
        pool = [lambda: b"c", lambda: b"k", lambda: b"q", lambda: b"I", lambda: self.opaque(),
                self.tok_flag(b"T", self.ttl_token), self.tok_flag(b"F", self.flags),
                lambda: [b"C", self.cas_token()],
                lambda: b"M" + self.r.choice((b"E", b"A", b"P", b"R", b"S", b"e", b"a", b"p",
                                              b"r", b"s", b"X", b"", b"EE", b"I")),
                lambda: self.r.choice((b"P", b"Lx", b"v", b"x", b"S5", b"h", b"N1", b"t", b"f",
                                       b"s", b"u", b"O", b"T", b"F", b"C", b"E5"))]
        flags = self.meta_flags(pool)
        if b:
            flags.insert(self.r.randrange(len(flags) + 1), b"b")
        parts = [b"ms", self.sp(), k]
        if size:
            parts += [b" ", size]
        for f in flags:
            parts.append(b" ")
            parts += f if isinstance(f, list) else [f]
        return Req(*parts, self.eol(), data if size else b"")

    def md(self):
        k, b = self.meta_key()
        pool = [lambda: b"q", lambda: b"k", lambda: b"I", lambda: self.opaque(),
                self.tok_flag(b"T", self.ttl_token), lambda: [b"C", self.cas_token()],
                lambda: self.r.choice((b"x", b"v", b"P", b"L", b"c", b"t", b"E1", b"M"))]
        flags = self.meta_flags(pool)
        if b:
            flags.insert(self.r.randrange(len(flags) + 1), b"b")
        return self.meta_req_list(b"md", k, flags)

    def ma(self):
        k, b = self.meta_key()
        pool = [lambda: b"q", lambda: b"t", lambda: b"c", lambda: b"v", lambda: b"v",
                lambda: b"k", lambda: self.opaque(),
                self.tok_flag(b"N", self.ttl_token),
                self.tok_flag(b"J", lambda: self.pick((70, lambda: str(self.r.randrange(0, 100)).encode()),
                                                      (30, lambda: self.garbage_number()))),
                self.tok_flag(b"D", lambda: self.pick((70, lambda: str(self.r.randrange(0, 100)).encode()),
                                                      (10, b"18446744073709551615"),
                                                      (20, lambda: self.garbage_number()))),
                self.tok_flag(b"T", self.ttl_token), lambda: [b"C", self.cas_token()],
                lambda: b"M" + self.r.choice((b"I", b"i", b"+", b"D", b"d", b"-", b"X", b"",
                                              b"ID")),
                lambda: self.r.choice((b"x", b"f", b"s", b"h", b"l", b"P", b"E1", b"I", b"u"))]
        flags = self.meta_flags(pool)
        if b:
            flags.insert(self.r.randrange(len(flags) + 1), b"b")
        return self.meta_req_list(b"ma", k, flags)

    def meta_req_list(self, cmd, k, flags):
        parts = [cmd, self.sp(), k]
        for f in flags:
            parts.append(b" ")
            parts += f if isinstance(f, list) else [f]
        return Req(*parts, self.eol())

    def me(self):
        k, b = self.meta_key()
        extra = self.pick((80, b""), (10, b" x"), (10, b" b b"))
        return Req(b"me ", k, b" b" if b else b"", extra, self.eol())

    def meta_odd(self):
        return self.pick(
            (10, lambda: Req(b"mn", self.r.choice((b"", b" x", b" ")), self.eol())),
            (6, lambda: Req(self.r.choice((b"mg", b"ms", b"md", b"ma", b"me", b"mn", b"mx", b"MG",
                                           b"m", b"mgg")),
                            self.r.choice((b"", b" ", b"  ")), self.eol())),
            (4, lambda: Req(b"ms ", K(0), b" ", self.r.choice((b"2147483648", b"4294967296",
                                                               b"-1", b"1048577", b"99999999999")),
                            b"\r\nab\r\n")),
        )

    # -- binary protocol --
    def bin_key(self):
        i = self.r.randrange(self.nkeys)
        return self.pick((90, lambda: K(i)), (4, lambda: K(i, length=250)),
                         (3, lambda: K(i, length=251)),
                         (3, lambda: K(i, extra=self.r.choice((b" ", b"\r\n", b"\x00", b"\xff")))))

    def bin_value(self):
        return self.value()

    def bin_request(self):
        r = self.r
        op = self.pick(
            (12, 0x00), (4, 0x09), (5, 0x0C), (4, 0x0D),           # get getq getk getkq
            (14, 0x01), (4, 0x11), (4, 0x02), (2, 0x12), (4, 0x03), (2, 0x13),  # set add replace
            (6, 0x04), (2, 0x14),                                   # delete
            (5, 0x05), (4, 0x06), (2, 0x15), (2, 0x16),             # incr decr
            (3, 0x0E), (3, 0x0F), (1, 0x19), (1, 0x1A),             # append prepend
            (3, 0x1C), (3, 0x1D), (2, 0x1E), (2, 0x23), (2, 0x24),  # touch gat gatq gatk gatkq
            (2, 0x08), (1, 0x18),                                   # flush
            (3, 0x0A), (3, 0x0B), (2, 0x1B), (4, 0x10),             # noop version verbosity stat
            (1, 0x07), (1, 0x17),                                   # quit
            (4, lambda: r.choice((0x20, 0x21, 0x22, 0x30, 0x3d, 0x45, 0x83, 0xfe, 0x25, 0x1f))),
        )
        key, extras, value, cas = b"", b"", b"", 0
        if op in (0x00, 0x09, 0x0C, 0x0D, 0x04, 0x14):
            key = self.bin_key()
        elif op in (0x01, 0x11, 0x02, 0x12, 0x03, 0x13):
            key = self.bin_key()
            fl = self.flags()
            extras = struct.pack(">II", int(fl) if fl.isdigit() and int(fl) < 2**32 else 0,
                                 r.choice((0, 0, 0, 1000, 2592001, 0xFFFFFFFF)))
            value = self.bin_value()
            if self.chance(3):
                value = b"z" * (max_value_for(len(key.raw(Ctx(b"d0000000_")))) + r.choice((0, 1)))
        elif op in (0x05, 0x06, 0x15, 0x16):
            key = self.bin_key()
            extras = struct.pack(">QQI", r.choice((0, 1, 5, 2**64 - 1)), r.choice((0, 7, 2**64 - 1)),
                                 r.choice((0, 0xFFFFFFFF, 0xFFFFFFFF, 1000)))
        elif op in (0x0E, 0x0F, 0x19, 0x1A):
            key = self.bin_key()
            value = self.bin_value()
        elif op in (0x1C, 0x1D, 0x1E, 0x23, 0x24):
            key = self.bin_key()
            extras = struct.pack(">I", r.choice((0, 1000, 2592001, 0xFFFFFFFF)))
        elif op in (0x08, 0x18):
            if self.chance(50):
                extras = struct.pack(">I", r.choice((0, 0, 7200)))
        elif op == 0x1B:
            extras = struct.pack(">I", r.choice((0, 1, 2, 5)))
        elif op == 0x10:
            key = r.choice((b"", b"", b"settings", b"items", b"slabs", b"sizes", b"detail dump",
                            b"detail on", b"detail off", b"reset", b"conns", b"foo",
                            b"cachedump 1 1"))
        elif op in (0x20, 0x21, 0x22):
            key = r.choice((b"", b"PLAIN"))
            value = r.choice((b"", b"\x00user\x00pass"))
        if self.chance(20) and op not in (0x0A, 0x0B, 0x07, 0x17, 0x10):
            cas = self.pick((60, lambda: Cas()), (20, lambda: Cas(1)), (20, 0xFFFFFFFFFFFFFFFF))
        req = BinReq(op, key, extras, value, cas=cas, opaque=r.randrange(0, 1000))
        m = r.randrange(100)
        if m < 3:
            req.extlen = len(extras) + r.choice((1, -1, 4, 8)) if len(extras) else r.choice((4, 8))
            if req.extlen < 0:
                req.extlen = 0
        elif m < 5:
            req.keylen = r.choice((0, 251, 1000, 65535))
        elif m < 7:
            # (Not 2^31 and more: memcached reads the value length as a
            # negative int, with results that depend on the bytes that
            # follow; docs/compat.md.)
            req.bodylen = r.choice((0, 3, ITEM_MAX + 2000, 0x7FFFFFF0))
        elif m < 8:
            req.datatype = r.choice((1, 2, 0xFF))
        elif m < 9:
            req.vbucket = r.choice((1, 0xFFFF))
        return req

    # -- cases --
    def case(self):
        kind = self.pick((30, "classic"), (30, "meta"), (16, "binary"), (10, "mixed"),
                         (6, "odd"), (8, "stats"))
        if kind == "binary":
            steps = []
            for _ in range(self.pick((50, 1), (30, 2), (20, 3))):
                steps.append([self.bin_request() for _ in range(self.r.randrange(1, 7))])
            if self.chance(4):
                steps[-1].append(Req(self.r.choice((b"get x\r\n", b"version\r\n",
                                                     b"\x81" + b"\x00" * 23))))
            return steps
        makers = {
            "classic": [(25, self.storage), (20, self.retrieval), (8, self.delete), (8, self.arith),
                        (5, self.numeric_set), (6, self.touch), (4, self.misc)],
            "meta": [(30, self.mg), (25, self.ms), (10, self.md), (12, self.ma), (4, self.me),
                     (3, self.meta_odd), (8, self.retrieval), (6, self.storage),
                     (4, self.numeric_set)],
            "mixed": [(12, self.storage), (10, self.retrieval), (5, self.delete), (5, self.arith),
                      (4, self.touch), (10, self.misc), (10, self.mg), (8, self.ms), (4, self.md),
                      (4, self.ma), (2, self.me), (4, self.numeric_set)],
            "odd": [(20, self.oddline), (10, self.storage), (10, self.retrieval), (5, self.misc),
                    (5, self.mg)],
            "stats": [(30, self.stats), (20, self.storage), (20, self.retrieval), (8, self.mg),
                      (5, self.delete), (5, self.arith), (5, self.touch)],
        }[kind]
        steps = []
        for _ in range(self.pick((40, 1), (30, 2), (20, 3), (10, 5))):
            steps.append([self.pick(*[(w, f) for w, f in makers])
                          for _ in range(self.pick((30, 1), (40, lambda: self.r.randrange(2, 5)),
                                                   (30, lambda: self.r.randrange(5, 12))))])
        return steps


def make_case(seed, n):
    return Gen(random.Random("%d:%d" % (seed, n))).case()


# ---------------------------------------------------------------------------
# Reply parsing and masking
# ---------------------------------------------------------------------------

META_CODES = (b"VA", b"HD", b"EN", b"NF", b"NS", b"EX", b"MN", b"ME")
# General stats cocytus-server adds after memcached's names (docs/compat.md).
COCYTUS_STATS = {b"role", b"migrate_moves", b"migrate_keys_sent", b"migrate_forwards",
                 b"import_keys", b"idle_kicks", b"cluster_epoch",
                 # a data process's (--target; cocytus/engine_data.c, dp_stats)
                 b"expired_removed", b"xid", b"stable_xid", b"records_sent", b"write_queue",
                 b"blocked_waits", b"in_place_writes", b"unit_waits", b"lease_waits",
                 # a PBR primary's (pbr/engine_primary.c, pbr/pbr_store.c)
                 b"committed_xid", b"mem_used"}
# --target at cocytus-proxy: its general stats are its own list (docs/client.md,
# "Operating it"), so only the presence of a general stats block is compared.
STAT_NAMES = True


class Masker:
    """Masks one server's replies of one case.  cas values are replaced by
    their order of first appearance in the case ('#1', '#2', ...; 0 stays
    0) so that equal and different cas values compare as such; numbers that
    may legitimately differ by a clock tick are kept as {~N} for a tolerant
    comparison; values that differ by nature are replaced by '*'."""

    def __init__(self):
        self.casmap = {}
        self.seen = []       # raw cas values in order (for Cas placeholders)

    def cas(self, raw):
        try:
            v = int(raw)
        except ValueError:
            return raw
        self.seen.append(v)
        if v == 0:
            return b"0"
        if v not in self.casmap:
            self.casmap[v] = len(self.casmap) + 1
        return b"#%d" % self.casmap[v]

    def meta_token(self, t):
        if not t:
            return t
        f, rest = t[:1], t[1:]
        if f == b"c" and rest.isdigit():
            return b"c" + self.cas(rest)
        if f == b"t" and re.fullmatch(rb"\d+", rest):
            return b"t{~" + rest + b"}"
        if f == b"l" and re.fullmatch(rb"\d+", rest):
            return b"l*"
        return t

    def text(self, out):
        res = []
        block = []          # STAT or PREFIX lines being gathered
        i = 0
        n = len(out)

        def close_block():
            if block:
                res.append(self.stat_block(block))
                block.clear()
        while i < n:
            j = out.find(b"\r\n", i)
            if j < 0:
                close_block()
                res.append(out[i:])
                break
            line = out[i:j]
            i = j + 2
            toks = line.split(b" ")
            head = toks[0]
            if head in (b"STAT", b"PREFIX", b"ITEM") and len(toks) >= 2:
                block.append(line)
                continue
            close_block()
            if head == b"VALUE" and len(toks) >= 4:
                if len(toks) == 5:
                    toks[4] = self.cas(toks[4])
                res.append(b" ".join(toks) + b"\r\n")
                try:
                    nb = int(toks[3])
                except ValueError:
                    continue
                res.append(out[i:i + nb + 2])
                i += nb + 2
            elif head in META_CODES and head != b"ME":
                k = 1
                nb = None
                if head == b"VA" and len(toks) > 1:
                    try:
                        nb = int(toks[1])
                    except ValueError:
                        nb = None
                    k = 2
                toks[k:] = [self.meta_token(t) for t in toks[k:]]
                res.append(b" ".join(toks) + b"\r\n")
                if nb is not None:
                    res.append(out[i:i + nb + 2])
                    i += nb + 2
            elif head == b"ME":
                out_t = []
                for t in toks:
                    if t.startswith(b"cas="):
                        t = b"cas=" + self.cas(t[4:])
                    elif t.startswith(b"la="):
                        t = b"la=*"
                    elif re.fullmatch(rb"exp=-?\d+", t) and t != b"exp=-1":
                        t = b"exp={~" + t[4:] + b"}"
                    out_t.append(t)
                res.append(b" ".join(out_t) + b"\r\n")
            elif head == b"VERSION":
                res.append(b"VERSION *\r\n")
            else:
                res.append(line + b"\r\n")
        close_block()
        return b"".join(res)

    @staticmethod
    def stat_block(lines):
        """One reply's STAT / PREFIX / ITEM lines.  The general stats: names
        compared (cocytus-only names dropped), values masked.  sizes_status:
        compared.  stats detail dump: PREFIX lines compared, in sorted order
        (memcached lists them in its hash table's order).  Other groups
        (settings, items, slabs, sizes, conns) and cachedump's ITEM lines:
        not compared at all (their names follow memcached's slab classes,
        LRU segments and threads, and which items memcached still holds
        after a flush depends on its background threads)."""
        first = lines[0].split(b" ")
        if first[0] == b"STAT" and first[1] == b"pid":
            if not STAT_NAMES:
                return b"STAT *\r\n"
            out = []
            for ln in lines:
                t = ln.split(b" ")
                if t[0] == b"STAT" and t[1] not in COCYTUS_STATS:
                    out.append(b"STAT " + t[1] + b" *\r\n")
            return b"".join(out)
        keep = [ln + b"\r\n" for ln in lines if ln.startswith(b"STAT sizes_status ")]
        keep += sorted(ln + b"\r\n" for ln in lines if ln.startswith(b"PREFIX "))
        return b"".join(keep)

    def binary(self, out):
        res = []
        stats = []          # keys of a run of STAT responses

        def close_stats():
            if stats:
                if stats[0] == b"pid" and not STAT_NAMES:
                    res.append(b"[stats *]\n")
                elif stats[0] == b"pid":
                    res.append(b"[stats " + b" ".join(k for k in stats if k not in COCYTUS_STATS) + b"]\n")
                elif stats[0] == b"detailed":
                    res.append(b"[stats detailed]\n")
                elif stats == [b"sizes_status"]:
                    res.append(b"[stats sizes_status]\n")
                stats.clear()
        i = 0
        while i < len(out):
            if len(out) - i < 24:
                close_stats()
                res.append(b"<partial header " + out[i:].hex().encode() + b">")
                break
            magic, op, keylen, extlen, dt, status, bodylen, opaque, cas = struct.unpack(
                ">BBHBBHIIQ", out[i:i + 24])
            body = out[i + 24:i + 24 + bodylen]
            i += 24 + bodylen
            if op == 0x10 and status == 0 and keylen > 0:
                stats.append(body[extlen:extlen + keylen])
                continue
            close_stats()
            casm = self.cas(b"%d" % cas)
            blen = b"%d" % bodylen
            if op == 0x0B and status == 0:
                body = blen = b"*"          # the version string
            desc = b"[%02x op=%02x keylen=%d extlen=%d dt=%d status=%04x bodylen=%s opaque=%d cas=%s]" % (
                magic, op, keylen, extlen, dt, status, blen, opaque, casm)
            res.append(desc + body + b"\n")
        close_stats()
        return b"".join(res)


TOL = re.compile(rb"\{~(-?\d+)\}")


def same(a, b):
    """Masked outputs equal, numbers in {~N} within one second."""
    if a == b:
        return True
    sa, sb = TOL.split(a), TOL.split(b)
    if len(sa) != len(sb):
        return False
    for k, (x, y) in enumerate(zip(sa, sb)):
        if k % 2 == 0:
            if x != y:
                return False
        elif abs(int(x) - int(y)) > 1:
            return False
    return True


NON_NUMERIC = b"CLIENT_ERROR cannot increment or decrement non-numeric value"
ARITH = re.compile(r"\b(incr|decr) +\S+ +(-?\d+)")     # memcached takes a delta "-0"
META_ARITH = re.compile(r"ma +(\S+)")
# a text storage request (shown: "set {k3} 0 0 20\r\n1844...\r\n") and its data
STORED_NUMBER = re.compile(r"(?:set|add|replace|cas|ms) +(\S+) [^\\]*\\r\\n(\d+)\\r\\n")


def memcached_version(path):
    """(major, minor, patch) of `path -V`, or None."""
    try:
        out = subprocess.run([path, "-V"], capture_output=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(rb"(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in m.groups()) if m else None


def memcached_read_past_value(steps, raw, version):
    """True when the first reply that differs is memcached's own defect,
    fixed in 1.6.22 (its commit ea92c6c): an incr or decr of a value of 2^63
    or more looks for a '-' with strchr() from the value's first byte, and
    an item's data ends in CRLF, not NUL, so the search runs on into
    whatever the slab chunk held before until it meets a NUL.  A stale '-'
    there makes it answer NON_NUMERIC for a number, depending on what the
    process stored earlier (seed 15 -X case 83 differed twice in 300 CI
    runs of the same sequence).  Recognised only where it cannot hide a
    defect of ours: text replies, memcached's first differing line is
    NON_NUMERIC, ours is the number, and a text incr/decr of that step
    with its delta puts the value before the command at 2^63 or more.
    Likewise `ma` (which runs the same code in memcached): memcached's
    first differing line is NON_NUMERIC, ours a success (HD or VA), and
    the case stored a number of 2^63 or more under that `ma`'s key before
    it (seed 15 -X case 122, in two CI runs: `ma <k> P T2592001` of
    18446744073709551615; the same case also met it with `decr <k> -0`,
    a delta memcached takes as 0)."""
    if version is None or version >= (1, 6, 22) or is_binary_case(steps):
        return False
    for si, (x, y) in enumerate(zip(raw["mc"], raw["co"])):
        if x.out == y.out:
            continue
        if si >= len(steps):
            return False
        for p, q in zip(x.out.split(b"\r\n"), y.out.split(b"\r\n")):
            if p == q:
                continue
            if p != NON_NUMERIC:
                return False
            if q.startswith(b"HD") or q.startswith(b"VA"):
                return any(m and stored_big_number(steps, si, m.group(1))
                           for m in (META_ARITH.match(r_.show()) for r_ in steps[si]))
            if not q.isdigit():
                return False
            r = int(q)
            for r_ in steps[si]:
                for op, d in ARITH.findall(r_.show()):
                    d = int(d)
                    if d < 0:
                        continue
                    before = (r - d) % 2**64 if op == "incr" else r + d
                    if r < 2**64 and before >= 2**63 and (op == "incr" or r > 0):
                        return True
            return False
        return False
    return False


def stored_big_number(steps, upto, key):
    """Did a text storage request of steps[0..upto] store under key (as
    shown, "{k2}") a number of 2^63 or more that fits 64 bits?"""
    for step in steps[:upto + 1]:
        for r_ in step:
            m = STORED_NUMBER.match(r_.show())
            if m and m.group(1) == key and 2**63 <= int(m.group(2)) < 2**64:
                return True
    return False


# ---------------------------------------------------------------------------
# Running a case on one server
# ---------------------------------------------------------------------------


class StepResult:
    def __init__(self, out, closed, timed_out):
        self.out, self.closed, self.timed_out = out, closed, timed_out


def is_binary_case(steps):
    first = steps[0][0]
    return isinstance(first, BinReq) and first.magic == 0x80


def auth_prefix(session):
    return session.auth_bytes if session and session.auth_bytes else b""


def exchange(sock, data, done, timeout):
    """Send data while reading; read until done(buf) or EOF or timeout.
    Returns (buf, closed, timed_out)."""
    buf = bytearray()
    pos = 0
    closed = False
    deadline = time.monotonic() + timeout
    while True:
        if closed:
            return bytes(buf), True, False
        if pos >= len(data) and done(buf):
            return bytes(buf), False, False
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(buf), False, True
        wr = [sock] if pos < len(data) else []
        try:
            r, w, _ = select.select([sock], wr, [], min(left, 0.1))
        except (OSError, ValueError):
            return bytes(buf), True, False
        if r:
            try:
                chunk = sock.recv(1 << 20)
            except (ConnectionResetError, OSError):
                chunk = b""
            if not chunk:
                closed = True
                continue
            buf += chunk
            deadline = max(deadline, time.monotonic() + 0.05)
        if w:
            try:
                sent = sock.send(data[pos:pos + (1 << 18)])
                pos += sent
                deadline = time.monotonic() + timeout
            except (BrokenPipeError, ConnectionResetError, OSError):
                pos = len(data)


def ask(addr, data, done, timeout=2.0):
    """One exchange on a connection of its own (cleanup, probes, stats):
    what the server answered.  OSError when it cannot be reached."""
    s = socket.create_connection(addr, timeout=2)
    try:
        s.setblocking(False)
        return exchange(s, data, done, timeout)[0]
    finally:
        s.close()


def run_case(addr, steps, prefix, session=None, salt=None):
    """Runs the steps on a new connection to addr (host, port).  Returns a list of
    StepResult (one per step, plus one for the final half-close)."""
    ctx = Ctx(prefix, salt)
    masker = Masker()
    binary = is_binary_case(steps)
    results = []
    try:
        sock = socket.create_connection(addr, timeout=5)
    except OSError as e:
        return [StepResult(b"<connect failed: %s>" % str(e).encode(), True, False)], masker
    sock.setblocking(False)
    pre = auth_prefix(session)
    if pre and not binary:
        out, closed, _ = exchange(sock, pre, lambda b: b.endswith(b"\r\n"), 2.0)
    closed = False
    for si, step in enumerate(steps):
        tag = b"s%d" % si
        sentinel = bin_sentinel().render(ctx) if binary else SENTINEL_TEXT % (SENTINEL_KEY, tag)
        reply = bin_sentinel_reply() if binary else SENTINEL_TEXT_REPLY % tag

        def done(b, reply=reply):
            return b.endswith(reply)
        if closed:
            results.append(StepResult(b"", True, False))
            continue
        data = b"".join(r.render(ctx) for r in step) + sentinel
        out, closed, timed_out = exchange(sock, data, done, STEP_TIMEOUT)
        # the cas values this server returned: later steps may use them
        (masker.binary if binary else masker.text)(out)
        ctx.cas = list(masker.seen)
        results.append(StepResult(out, closed, timed_out))
    if not closed:
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        out, closed, timed_out = exchange(sock, b"", lambda b: False, CLOSE_TIMEOUT)
        results.append(StepResult(out, closed, timed_out))
    sock.close()
    return results, masker


def masked(results, binary):
    m = Masker()
    out = []
    for r in results:
        text = m.binary(r.out) if binary else m.text(r.out)
        state = b"<closed>" if r.closed else (b"<no reply yet>" if r.timed_out else b"")
        out.append(text + state)
    return out


# ---------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class ServerProc:
    host = "127.0.0.1"

    @property
    def addr(self):
        return (self.host, self.port)

    def __init__(self, name, argv_fn):
        self.name = name
        self.argv_fn = argv_fn
        self.proc = None
        self.port = None
        self.log = None

    def start(self):
        for _ in range(10):
            self.port = free_port()
            self.log = tempfile.TemporaryFile()
            argv = self.argv_fn(self.port)
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                         stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return
                except OSError:
                    time.sleep(0.02)
            self.stop()
        raise RuntimeError("%s did not start: %s" % (self.name, " ".join(self.argv_fn(0))))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def output(self):
        if not self.log:
            return ""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-2000:]

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class TargetServer:
    """--target: a server running elsewhere, not started or stopped here.
    owned: the slots it serves (a set), or None when every key is its."""

    def __init__(self, spec):
        host, _, port = spec.rpartition(":")
        self.name = "target " + spec
        self.host, self.port = host or "127.0.0.1", int(port)
        self.owned = self.read_owned()
        self.proxy = self.is_proxy()

    @property
    def addr(self):
        return (self.host, self.port)

    def read_owned(self):
        """The slots of this endpoint in the map `config get cluster`
        answers (docs/routing.md), or None (no map, or not an endpoint of
        it: cocytus-proxy, a plain server)."""
        try:
            out = ask(self.addr, b"config get cluster\r\n",
                      lambda b: b.endswith(b"END\r\n") or b.endswith(b"ERROR\r\n"))
        except OSError:
            return None
        lines = out.split(b"\n")
        if not out.startswith(b"CONFIG cluster") or len(lines) < 4:
            return None
        eps = [e.split(b"|") for e in lines[2].split(b" ")]
        idx = [i for i, e in enumerate(eps) if len(e) == 3 and int(e[2]) == self.port and
               (e[0] or e[1]).decode() in (self.host, "localhost" if self.host == "127.0.0.1" else "")]
        if not idx:
            return None
        owned = set()
        for rg in lines[3].split(b" "):
            r, _, e = rg.partition(b":")
            a, _, b = r.partition(b"-")
            if int(e) == idx[0]:
                owned.update(range(int(a), int(b) + 1))
        return owned

    def is_proxy(self):
        """cocytus-proxy's stats have cluster_servers (docs/client.md)."""
        try:
            out = ask(self.addr, b"stats\r\n", lambda b: b.endswith(b"END\r\n"))
        except OSError:
            return False
        return b"\r\nSTAT cluster_servers " in out

    def alive(self):
        try:
            socket.create_connection(self.addr, timeout=2).close()
            return True
        except OSError:
            return False

    def output(self):
        return "(%s does not accept connections)" % self.name

    def start(self):
        pass

    def stop(self):
        pass


def key_slot(key):
    """slotmap_hash(): Jenkins' one-at-a-time, bytes >= 0x80 sign-extended,
    & 16383 (docs/routing.md)."""
    h = 0
    for c in key:
        h = (h + (c if c < 0x80 else c + 0xFFFFFF00)) & 0xFFFFFFFF
        h = (h + (h << 10)) & 0xFFFFFFFF
        h ^= h >> 6
    h = (h + (h << 3)) & 0xFFFFFFFF
    h ^= h >> 11
    h = (h + (h << 15)) & 0xFFFFFFFF
    return h & 16383


def case_keys(steps):
    """The K placeholders of a case."""
    ks = []
    for step in steps:
        for r in step:
            parts = r.parts if isinstance(r, Req) else (r.key,)
            ks += [p for p in parts if isinstance(p, K)]
    return ks


def target_skips(steps):
    """Why a case is not run against a --target (None: it is)."""
    for step in steps:
        for r in step:
            if isinstance(r, Req):
                line = b"".join(p for p in r.parts if isinstance(p, bytes))
                if line.startswith(b"shutdown"):
                    return "shutdown"
                if line.startswith(b"verbosity"):
                    return "verbosity"
    return None


# Session variants: extra flags given to both servers.
VARIANTS = [
    (80, "default", []),
    (8, "-F", ["-F"]),
    (6, "-C", ["-C"]),
    (6, "-Y", ["-Y", "@AUTH"]),
    (4, "-X", ["-X", "-W"]),          # dumps and watch refused
]


class Session:
    def __init__(self, args, variant, tmpdir):
        self.variant = variant
        self.cases = 0
        self.last_cas = None    # (memcached, cocytus): the cas of the last probe
        self.auth_bytes = None
        extra = list(variant[2])
        if "@AUTH" in extra:
            path = os.path.join(tmpdir, "auth")
            with open(path, "w") as f:
                f.write("alice:secret\nbob:hunter2\n")
            extra[extra.index("@AUTH")] = path
            cred = b"alice secret"
            self.auth_bytes = b"set a 0 0 %d\r\n%s\r\n" % (len(cred), cred)
        root = os.geteuid() == 0
        common = ["-U", "0", "-l", "127.0.0.1", "-m", str(MEM_MB), "-I", "1m"]

        def mc_argv(port):
            return [args.memcached, "-p", str(port), "-t", "1"] + common + \
                (["-u", "root"] if root else []) + extra

        def co_argv(port):
            return [args.server, "-p", str(port)] + common + extra
        self.mc = ServerProc("memcached", mc_argv)
        self.co = args.target_server or ServerProc("cocytus-server", co_argv)
        self.target = args.target_server is not None
        self.mc.start()
        self.co.start()

    def stop(self):
        self.mc.stop()
        self.co.stop()

    def cleanup(self):
        """Between cases: drop every item and undo global settings."""
        req = (auth_prefix(self) + b"flush_all\r\nstats detail off\r\n" +
               (b"" if self.target else b"verbosity 0\r\n") +
               b"stats sizes_disable\r\ncache_memlimit %d\r\nmn\r\n" % MEM_MB)
        for srv in (self.mc, self.co):
            try:
                ask(srv.addr, req, lambda b: b.endswith(b"MN\r\n"))
            except OSError:
                pass
        if self.variant[1] == "-C":
            self.wait_flush_second()

    def cas_probe(self):
        """Stores a probe item on both servers and reads its cas: the ids
        a case took show as the step from one probe to the next.  Replies
        mask cas values, so without this a server that takes ids for other
        things than memcached does (a flush_all, stats sizes_enable) goes
        unseen until a later case guesses a cas from the last one it saw.
        Returns (memcached's step, cocytus's step), or None."""
        if self.target:
            return None
        probe = (auth_prefix(self) + b"set difftest_cas 0 0 1\r\nx\r\n"
                 b"mg difftest_cas c\r\nmd difftest_cas q\r\nmn\r\n")
        now = []
        for srv in (self.mc, self.co):
            try:
                out = ask(srv.addr, probe, lambda b: b.endswith(b"MN\r\n"))
            except OSError:
                out = b""
            m = re.search(rb"HD c(\d+)", out)
            now.append(int(m.group(1)) if m else None)
        before, self.last_cas = self.last_cas, now
        if before is None or None in before or None in now:
            return None
        return now[0] - before[0], now[1] - before[1]

    def wait_flush_second(self):
        """Without cas (-C) a flush_all also kills what is stored in the
        rest of its second, and the two servers' seconds do not start
        together: the next case waits until a probe stored on each server
        survives on both, or items of its first steps would live on one
        server only."""
        probe = (auth_prefix(self) + b"set difftest_probe 0 0 1\r\nx\r\n"
                 b"mg difftest_probe v\r\nmd difftest_probe q\r\nmn\r\n")
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            alive = 0
            for srv in (self.mc, self.co):
                try:
                    out = ask(srv.addr, probe, lambda b: b.endswith(b"MN\r\n"))
                    alive += b"VA 1" in out
                except OSError:
                    pass
            if alive == 2:
                return
            time.sleep(0.05)


# ---------------------------------------------------------------------------
# Comparing, shrinking, reporting
# ---------------------------------------------------------------------------


# --counters: the counters compared after each case (their moves over the
# case, on each server).  A case with `stats reset` is not compared.
COUNTED = ["cmd_get", "cmd_set", "cmd_touch", "cmd_flush", "get_hits", "get_misses",
           "get_expired", "get_flushed", "delete_hits", "delete_misses", "incr_hits",
           "incr_misses", "decr_hits", "decr_misses", "cas_hits", "cas_misses", "cas_badval",
           "touch_hits", "touch_misses", "auth_cmds", "auth_errors"]


def read_counters(session, srv):
    """The COUNTED stats of srv, or None when they cannot be read."""
    try:
        out = ask(srv.addr, auth_prefix(session) + b"stats\r\n",
                  lambda b: b.endswith(b"END\r\n"))
    except OSError:
        return None
    d = {}
    for line in out.split(b"\r\n"):
        w = line.split(b" ")
        if len(w) == 3 and w[0] == b"STAT" and w[1].decode() in COUNTED:
            d[w[1].decode()] = int(w[2])
    return d


def resets_stats(steps):
    for step in steps:
        for r in step:
            if isinstance(r, Req) and b"stats reset" in b"".join(
                    p for p in r.parts if isinstance(p, bytes)):
                return True
            if isinstance(r, BinReq) and r.opcode == 0x10 and r.key == b"reset":
                return True
    return False


class Runner:
    def __init__(self, args):
        self.args = args
        self.trial = 0
        self.counter_diff = None
        self.last_counter_diff = None
        self.session = None
        self.tmpdir = tempfile.mkdtemp(prefix="difftest.")
        self.rng = random.Random(args.seed)
        self.requests = 0
        self.moved = False
        self.read_past = False
        self.mc_version = memcached_version(args.memcached)

    def new_session(self):
        if self.session:
            self.session.stop()
        w = sum(v[0] for v in VARIANTS)
        x = self.rng.randrange(w)
        for v in VARIANTS:
            if x < v[0]:
                break
            x -= v[0]
        if self.args.variant:
            v = [x for x in VARIANTS if x[1] == self.args.variant][0]
        self.session = Session(self.args, v, self.tmpdir)
        self.session.cas_probe()     # the baseline of the first case's step

    def close(self):
        if self.session:
            self.session.stop()
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    def run_both(self, steps):
        """(masked memcached, masked cocytus, raw results) of one trial."""
        self.trial += 1
        prefix = b"d%07x_" % (self.trial & 0xFFFFFFF)
        owned = self.args.target_server.owned if self.args.target_server else None
        salt = {}
        if owned is not None:
            # every placeholder key on one of the target's slots: each key
            # (i, length, extra) gets the first '_<n>' after its 'k<i>' that
            # puts it there (the same for both servers)
            for k in case_keys(steps):
                if k.sig() in salt:
                    continue
                for n in range(100000):
                    t = {k.sig(): b"_%d" % n}
                    if key_slot(k.raw(Ctx(prefix, t))) in owned:
                        salt.update(t)
                        break
        res = {}

        def go(name, srv):
            res[name] = run_case(srv.addr, steps, prefix, self.session, salt)[0]
        counting = self.args.counters and not resets_stats(steps)
        if counting:
            before = {n: read_counters(self.session, srv)
                      for n, srv in (("mc", self.session.mc), ("co", self.session.co))}
        t = threading.Thread(target=go, args=("mc", self.session.mc))
        t.start()
        go("co", self.session.co)
        t.join()
        self.counter_diff = None
        if counting:
            moved = {}
            for n, srv in (("mc", self.session.mc), ("co", self.session.co)):
                after = read_counters(self.session, srv)
                if before[n] is None or after is None:
                    break
                moved[n] = {k: after.get(k, 0) - before[n].get(k, 0) for k in COUNTED
                            if k in after or k in before[n]}
            if len(moved) == 2 and moved["mc"] != moved["co"]:
                self.counter_diff = {k: (moved["mc"].get(k), moved["co"].get(k))
                                     for k in COUNTED if moved["mc"].get(k) != moved["co"].get(k)}
        self.session.cleanup()
        steps_taken = self.session.cas_probe()
        if steps_taken and steps_taken[0] != steps_taken[1]:
            self.counter_diff = dict(self.counter_diff or {})
            self.counter_diff["cas ids taken"] = steps_taken
        binary = is_binary_case(steps)
        return masked(res["mc"], binary), masked(res["co"], binary), res, prefix

    def differs(self, steps):
        a, b, raw, prefix = self.run_both(steps)
        self.moved = False
        self.read_past = False
        if not self.session.co.alive():
            return True, a, b, raw, prefix
        if self.args.target_server and self.args.target_server.owned is not None and \
                any(b"MOVED" in r.out for r in raw["co"]):
            # a key of another process's slot: not comparable (--target)
            self.moved = True
            return False, a, b, raw, prefix
        if memcached_read_past_value(steps, raw, self.mc_version):
            # memcached's reply hangs on its stale memory: not comparable
            self.read_past = True
            return False, a, b, raw, prefix
        if len(a) != len(b) or self.counter_diff:
            return True, a, b, raw, prefix
        return any(not same(x, y) for x, y in zip(a, b)), a, b, raw, prefix

    def check_alive(self):
        if not self.session.co.alive():
            return "cocytus-server died:\n" + self.session.co.output()
        if not self.session.mc.alive():
            self.new_session()
        return None

    def shrink(self, steps):
        """Removes requests while a difference remains (ddmin-style).
        Returns the smallest sequence found and its outputs."""
        self.last_fail = None
        self.last_counter_diff = None
        flat = [(si, r) for si, step in enumerate(steps) for r in step]

        def build(items):
            out = {}
            for si, r in items:
                out.setdefault(si, []).append(r)
            return [out[k] for k in sorted(out)]

        def still(items):
            if not items:
                return False
            st = build(items)
            d, a, b, raw, prefix = self.differs(st)
            if not self.session.co.alive():
                self.new_session()
                return True
            if d:
                self.last_fail = (st, a, b, prefix)
                self.last_counter_diff = self.counter_diff
            return d
        chunk = max(1, len(flat) // 2)
        tries = 0
        while chunk >= 1 and tries < 300:
            changed = False
            i = 0
            while i < len(flat) and tries < 300:
                cand = flat[:i] + flat[i + chunk:]
                tries += 1
                if still(cand):
                    flat = cand
                    changed = True
                else:
                    i += chunk
            if not changed:
                if chunk == 1:
                    break
                chunk = max(1, chunk // 2)
        # one step if the difference survives merging
        merged = [(0, r) for _, r in flat]
        if len(build(flat)) > 1 and still(merged):
            flat = merged
        return build(flat)

    def report(self, seed, n, steps, why=None, outputs=None):
        print("difftest: DIFFERENCE in case %d of seed %d (replay: --seed %d --case %d, "
              "session %s)" % (n, seed, seed, n, self.session.variant[1]))
        if why:
            print(why)
        if outputs:
            steps, a, b, prefix = outputs
            counter_diff = getattr(self, "last_counter_diff", None) or self.counter_diff
        else:
            d, a, b, raw, prefix = self.differs(steps)
            counter_diff = self.counter_diff
        print("  key prefix of this run: %r" % prefix)
        if counter_diff:
            print("  counters moved differently (memcached, cocytus): %r" % counter_diff)
        for si, step in enumerate(steps):
            print("  step %d:" % (si + 1))
            for r in step:
                print("    " + r.show())
        for si in range(max(len(a), len(b))):
            x = a[si] if si < len(a) else b"<none>"
            y = b[si] if si < len(b) else b"<none>"
            mark = "" if same(x, y) else "   <-- differs"
            label = "step %d" % (si + 1) if si < len(steps) else "after half-close"
            print("  %s%s" % (label, mark))
            print("    memcached: %r" % x[:3000])
            print("    cocytus:   %r" % y[:3000])
        sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--cases", type=int, default=None)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--case", type=int, default=None, help="run only this case")
    ap.add_argument("--keep-going", action="store_true")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--variant", default=None, help="session variant: default, -F, -C, -Y, -X (with -W)")
    ap.add_argument("--memcached", default=os.environ.get("MEMCACHED", shutil.which("memcached")
                                                          or "/usr/bin/memcached"))
    ap.add_argument("--server", default=os.environ.get("COCYTUS_SERVER"))
    ap.add_argument("--target", default=None, metavar="HOST:PORT",
                    help="compare with this running server instead of starting cocytus-server")
    ap.add_argument("--show", action="store_true", help="print the generated cases, run nothing")
    ap.add_argument("--counters", action="store_true",
                    help="also compare how each case moves the hit/miss counters")
    ap.add_argument("--verbose", "-v", action="store_true")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int(time.time()) % 100000
    if args.show:
        first = args.case if args.case is not None else 0
        for n in range(first, first + (args.cases or 1)):
            print("case %d:" % n)
            for si, step in enumerate(make_case(args.seed, n)):
                print("  step %d:" % (si + 1))
                for r in step:
                    print("    " + r.show())
        return 0
    if not args.server:
        here = os.path.dirname(os.path.abspath(__file__))
        for cand in (os.path.join(here, "../../build/memcached/cocytus-server"),
                     os.path.join(here, "../../memcached/cocytus-server")):
            if os.access(cand, os.X_OK):
                args.server = cand
                break
    args.target_server = None
    if args.target:
        global SENTINEL_KEY
        args.variant = "default"
        args.target_server = TargetServer(args.target)
        if not args.target_server.alive():
            print("difftest: %s: no connection" % args.target)
            return 2
        owned = args.target_server.owned
        if owned is not None:
            n = 0
            while key_slot(SENTINEL_KEY + b"%d" % n) not in owned:
                n += 1
            SENTINEL_KEY += b"%d" % n
        if args.target_server.proxy:
            global STAT_NAMES
            STAT_NAMES = False
        print("difftest: target %s, %s%s" % (args.target, "all keys" if owned is None else
                                               "%d slots of its own" % len(owned),
                                               ", cocytus-proxy" if args.target_server.proxy else ""))
    for path, what in ((args.memcached, "memcached"), (args.server, "cocytus-server")):
        if args.target and what == "cocytus-server":
            continue
        if not path or not os.access(path, os.X_OK):
            print("difftest: %s not found (%s); skipped" % (what, path))
            return 77
    if args.seconds is None and args.cases is None:
        args.cases = 200
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(2))
    runner = Runner(args)
    start = time.monotonic()
    n = args.case if args.case is not None else 0
    done = 0
    diffs = 0
    skipped = {}
    try:
        runner.new_session()
        while True:
            if args.case is not None and done == 1:
                break
            if args.cases is not None and done >= args.cases:
                break
            if args.seconds is not None and time.monotonic() - start >= args.seconds:
                break
            if runner.session.cases >= CASES_PER_SESSION:
                runner.new_session()
            steps = make_case(args.seed, n)
            why = target_skips(steps) if args.target else None
            if why:
                skipped[why] = skipped.get(why, 0) + 1
                n += 1
                if args.case is not None:
                    break
                continue
            if args.case is None and runner.session.variant[1] == "-Y" and is_binary_case(steps):
                # ours takes binary clients under -Y (SASL PLAIN), memcached
                # reads them as text: a documented difference (docs/compat.md)
                n += 1
                continue
            runner.session.cases += 1
            runner.requests += sum(len(s) for s in steps)
            d, a, b, raw, prefix = runner.differs(steps)
            if runner.moved:
                skipped["moved"] = skipped.get("moved", 0) + 1
            if runner.read_past:
                why = "memcached < 1.6.22 read past a value (docs/compat.md)"
                skipped[why] = skipped.get(why, 0) + 1
            dead = runner.check_alive()
            if d or dead:
                diffs += 1
                if dead:
                    runner.report(args.seed, n, steps, dead)
                    if args.target:
                        break
                    runner.new_session()
                else:
                    outputs = (steps, a, b, prefix)
                    if not args.no_shrink:
                        runner.shrink(steps)
                        if runner.last_fail:
                            outputs = runner.last_fail
                        else:
                            print("difftest: the difference did not show again while "
                                  "shrinking (timing?); the first run:")
                    runner.report(args.seed, n, outputs[0], outputs=outputs)
                if not args.keep_going:
                    done += 1
                    break
            elif args.verbose:
                print("case %d ok" % n)
            done += 1
            n += 1
    finally:
        runner.close()
    print("difftest: seed %d: %d sequences (%d requests) in %.0f s, %d with a difference" %
          (args.seed, done, runner.requests, time.monotonic() - start, diffs))
    if skipped:
        print("difftest: not compared: %s" % ", ".join(
            "%d %s" % (v, k) for k, v in sorted(skipped.items())))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
