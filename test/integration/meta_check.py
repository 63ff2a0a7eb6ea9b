#!/usr/bin/env python3
"""meta_check.py - the meta commands (and the TTL commands clients use with
them) checked against memcached itself.

A small memcached client (no library needed) runs one fixed script of the
operations a modern client such as pymemcache issues - mg/ms/md/ma/mn/me
with their flags (base64 keys, opaque, quiet mode, TTL reads and updates,
vivify on miss, recache, invalidation, CAS, the ms and ma modes), touch,
gat/gats - and records every reply.  The same script is run against a
reference memcached (started here on a free loopback port) and against the
target; the two transcripts must be equal after masking what differs by
nature: CAS values (the script reuses the ones it reads, so a wrong one
shows as EX/NS), TTLs that count down (shown as positive or -1), last
access times, and the key names (a target in a cluster gets keys its slots
own, found by asking it: a key it does not own gets MOVED).

  meta_check.py --target HOST:PORT [--memcached PATH] [--direct] [--prefix P]

The runs that prove a reply memcached drops are left out against
cocytus-proxy (found by its stats), which does not drop replies.

--direct: the target is one server of a cluster: keys are chosen among the
ones it serves.  Without it (a plain server, a proxy) any key is fine.
Exit status: 0 equal, 1 a difference (both transcripts shown), 77 no
memcached to compare with.
"""

import argparse
import base64
import os
import re
import shutil
import socket
import subprocess
import sys
import time


class Client:
    """One text connection; request() sends bytes and reads the replies up
    to an `mn` sentinel it appends, so quiet replies that never come do not
    stall it."""

    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.buf = b""

    def close(self):
        self.sock.close()

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("server closed the connection")
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def request(self, data):
        """Replies to data (one or more requests) as a list of entries: a
        line, or (line, value) for VA and VALUE lines."""
        self.sock.sendall(data + b"mn\r\n")
        out = []
        while True:
            line = self._line()
            if line == b"MN":
                return out
            if line.startswith(b"VA "):
                n = int(line.split()[1])
                value = self._exact(n + 2)[:-2]
                out.append((line, value))
            elif line.startswith(b"VALUE "):
                n = int(line.split()[3])
                value = self._exact(n + 2)[:-2]
                out.append((line, value))
            else:
                out.append(line)


class Keys:
    """Logical key names -> real keys.  With an owner check, a real key is
    one the target serves (it answers anything but MOVED)."""

    def __init__(self, prefix, client=None):
        self.prefix = prefix
        self.client = client
        self.real = {}

    def __call__(self, name):
        if name in self.real:
            return self.real[name]
        for i in range(20000):
            key = ("%s%s_%d" % (self.prefix, name, i)).encode()
            if self.client is None or self._owned(key):
                self.real[name] = key
                return key
        raise RuntimeError("no key served by the target")

    def _owned(self, key):
        reply = self.client.request(b"mg " + key + b"\r\n")
        return not any(isinstance(r, bytes) and b"MOVED" in r for r in reply)

    def b64(self, name):
        return base64.b64encode(self(name))

    def unmask(self):
        """(real bytes, shown as) pairs, longest first."""
        pairs = []
        for name, key in self.real.items():
            pairs.append((base64.b64encode(key), b"<b64:" + name.encode() + b">"))
            pairs.append((key, b"<" + name.encode() + b">"))
        pairs.sort(key=lambda p: -len(p[0]))
        return pairs


class Script:
    """Runs the operations and keeps the masked transcript."""

    def __init__(self, client, keys, proxy=False):
        self.c = client
        self.k = keys
        self.lines = []
        self.cas = {}
        # the target is cocytus-proxy: it does not drop replies where
        # memcached does (docs/compat.md), so the runs that prove a dropped
        # reply are left out of both transcripts
        self.proxy = proxy

    def mask(self, text):
        for real, shown in self.k.unmask():
            text = text.replace(real, shown)
        # TTLs count down: positive or "none"
        text = re.sub(rb"(^| )t([0-9]+)", lambda m: m.group(1) + b"t+", text)
        text = re.sub(rb"(^| )l[0-9]+", rb"\1l*", text)
        text = re.sub(rb"exp=[0-9]+", b"exp=+", text)
        text = re.sub(rb"la=[0-9]+", b"la=*", text)
        text = re.sub(rb"size=[0-9]+", b"size=*", text)
        text = re.sub(rb"cls=[0-9]+ ", b"cls=* ", text)
        text = re.sub(rb"(^| )c[0-9]+", rb"\1c*", text)
        text = re.sub(rb"^(VALUE \S+ [0-9]+ [0-9]+) [0-9]+$", rb"\1 *", text)
        text = re.sub(rb"cas=[0-9]+", b"cas=*", text)
        return text

    def show(self, entry):
        if isinstance(entry, tuple):
            return self.mask(entry[0]) + b" / " + self.mask(entry[1])
        return self.mask(entry)

    def run(self, label, data, drops=False):
        if drops and self.proxy:
            return []
        replies = self.c.request(data)
        self.lines.append(b"## " + label.encode())
        self.lines.extend(b"   " + self.show(r) for r in replies)
        return replies

    def keep_cas(self, name, replies):
        """Remember the c flag of the first reply as {name}."""
        for r in replies:
            line = r[0] if isinstance(r, tuple) else r
            m = re.search(rb" c([0-9]+)", line)
            if m:
                self.cas[name] = int(m.group(1))
                return self.cas[name]
        return 0


def script(s, k):
    K = k
    s.run("ms, then mg of every flag",
          b"ms " + K("a") + b" 2 F5 T0\r\nhi\r\nmg " + K("a") + b" v f t s k h\r\n")
    s.run("h: fetched since stored", b"mg " + K("a") + b" h\r\n")
    s.run("opaque and key on hit and miss",
          b"mg " + K("a") + b" O123 k\r\nmg " + K("nx") + b" O77 k v\r\n")
    s.run("TTL read, update with T, read again",
          b"ms " + K("b") + b" 3 T100\r\nabc\r\nmg " + K("b") + b" t v\r\nmg " + K("b") +
          b" T0 t\r\nmg " + K("b") + b" t\r\n")
    s.run("base64 key, stored and read both ways",
          b"ms " + k.b64("c") + b" 1 b\r\nx\r\nmg " + k.b64("c") + b" b k v\r\nmg " +
          K("c") + b" k v\r\nme " + k.b64("c") + b" b\r\n")
    # difftest seed 2511 case 4073: an append's result is a new item without
    # the base64-key mark of the ms that made it (or of the old item)
    s.run("base64 key: append through b, then the key is shown plain",
          b"ms " + k.b64("c2") + b" 1 b\r\nx\r\nms " + k.b64("c2") + b" 1 b MA\r\ny\r\nmg " +
          K("c2") + b" k v\r\nmg " + k.b64("c2") + b" b k v\r\n")
    s.run("miss, quiet miss, quiet hit, quiet set and delete, in one batch",
          b"mg " + K("m") + b" v\r\nmg " + K("m") + b" q v k\r\nmg " + K("a") +
          b" q v\r\nms " + K("d") + b" 1 q\r\nz\r\nmd " + K("m") + b" q\r\nmd " + K("d") +
          b" q\r\nmg " + K("d") + b" v\r\n")
    s.run("md: deleted, not found, opaque",
          b"ms " + K("d") + b" 1\r\nz\r\nmd " + K("d") + b" O5\r\nmd " + K("d") + b" O6\r\n")
    s.run("ma: miss, vivify with J, incr, decr, quiet, then read",
          b"ma " + K("n") + b"\r\nma " + K("n") + b" N0 J10 v\r\nma " + K("n") +
          b" v\r\nma " + K("n") + b" MD D5 v\r\nma " + K("n") + b" q D1\r\nmg " + K("n") +
          b" v\r\n")
    s.run("ma: t, c, k, big delta, decr to zero (padded in place)",
          b"ma " + K("n") + b" MI D100 v t c k\r\nma " + K("n") + b" MD D1000 v\r\nmg " +
          K("n") + b" v s\r\nma " + K("n") + b" MI D18446744073709551615 v\r\n")
    s.run("ma on a non-number and on an empty value with a wrong C",
          b"ms " + K("a") + b" 2\r\nhi\r\nma " + K("a") + b"\r\nms " + K("e0") +
          b" 0\r\n\r\nma " + K("e0") + b" C999\r\n")
    # difftest seed 14014 case 3346: ma T sets the TTL of a result written
    # in place (not of a longer one, which is a new item)
    s.run("ma T on a number without a TTL, then read the TTL",
          b"ms " + K("nT") + b" 1\r\n5\r\nma " + K("nT") + b" T1814441\r\nmg " + K("nT") +
          b" s t v\r\n")
    s.run("ma T0 clears it", b"ma " + K("nT") + b" T0 v\r\nmg " + K("nT") + b" t\r\n")
    s.run("ma T on a result that grows keeps the TTL",
          b"ms " + K("nG") + b" 1 T50\r\n9\r\nma " + K("nG") + b" T80\r\nmg " + K("nG") +
          b" t v\r\n")
    s.run("ma N with a TTL, quiet, read the TTL",
          b"ma " + K("nt") + b" N100 J5 q v\r\nmg " + K("nt") + b" t v\r\n")
    r = s.run("invalidation: md I, then readers see X W, X Z",
              b"ms " + K("i") + b" 2\r\nab\r\nmd " + K("i") + b" I T30\r\nmg " + K("i") +
              b" v c t\r\nmg " + K("i") + b" v\r\n")
    cas = s.keep_cas("cas_i", r)
    s.run("stale set with an older CAS and I, then a fresh set",
          b"ms " + K("i") + b" 3 I C%d\r\nnew\r\nmg " % (cas - 1 if cas else 0) + K("i") +
          b" v\r\nms " + K("i") + b" 3\r\nnew\r\nmg " + K("i") + b" v\r\n")
    # difftest seed 4242 case 1295: a replace with C is a cas, I included
    r = s.run("a replace with an older CAS and I is a stale cas",
              b"ms " + K("sr") + b" 1 c\r\na\r\n")
    cas = s.keep_cas("cas_sr", r)
    s.run("... stored as stale, then read",
          b"ms " + K("sr") + b" 1\r\nb\r\nms " + K("sr") + b" 1 MR I C%d\r\nc\r\nmg " % cas +
          K("sr") + b" v\r\nms " + K("sr") + b" 1 MR C%d\r\nd\r\n" % cas)
    s.run("vivify on miss: W for the first, Z for the next",
          b"mg " + K("v") + b" N30 s t v\r\nmg " + K("v") + b" s v\r\nms " + K("v") +
          b" 3\r\nnew\r\nmg " + K("v") + b" v\r\n")
    s.run("recache: a TTL under R wins once",
          b"ms " + K("r") + b" 1 T10\r\nr\r\nmg " + K("r") + b" R30 v t\r\nmg " + K("r") +
          b" R30 v\r\n")
    s.run("ms modes: add, append, prepend, replace, on hits and misses",
          b"ms " + K("p") + b" 1 MA\r\na\r\nms " + K("p") + b" 1 ME\r\ne\r\nms " + K("p") +
          b" 1 ME\r\nx\r\nms " + K("p") + b" 2 MA\r\nxx\r\nms " + K("p") +
          b" 1 MP\r\ny\r\nmg " + K("p") + b" v\r\nms " + K("p") + b" 1 MR\r\nr\r\nms " +
          K("q") + b" 1 MR\r\nr\r\nmg " + K("p") + b" v\r\n")
    r = s.run("CAS read", b"mg " + K("p") + b" c\r\n")
    cas = s.keep_cas("cas_p", r)
    s.run("ms with C: wrong, C0 on append (no compare), right",
          b"ms " + K("p") + b" 1 C%d\r\nw\r\nms " % (cas + 1000) + K("p") +
          b" 1 MA C0\r\nz\r\nmg " + K("p") + b" v c\r\n")
    r = s.run("CAS again", b"mg " + K("p") + b" c\r\n")
    cas = s.keep_cas("cas_p2", r)
    s.run("ms and md with the right C", b"ms " + K("p") + b" 1 C%d c\r\nw\r\nmd " % cas +
          K("p") + b" C1\r\nmd " + K("p") + b" q\r\nmg " + K("p") + b" v\r\n")
    s.run("touch, gat, gats and TTL reads",
          b"set " + K("g") + b" 7 100 2\r\ngg\r\ntouch " + K("g") + b" 50\r\nmg " + K("g") +
          b" t\r\ngat 0 " + K("g") + b"\r\nmg " + K("g") + b" t\r\ntouch " + K("nx") +
          b" 10\r\n")
    r = s.run("gats", b"gats 300 " + K("g") + b"\r\nmg " + K("g") + b" t f v\r\n")
    # difftest seed 20261124 case 3142: mg u T leaves the item unfetched
    s.run("mg u with T does not fetch", b"ms " + K("uT") + b" 1\r\nu\r\nmg " + K("uT") +
          b" u T100 s\r\nme " + K("uT") + b"\r\nmg " + K("uT") + b" h t\r\n")
    # difftest seed 2411 case 5531: an mg's O too long is met after the
    # lookup and N (no fetch, no win counted); an ma's after the ma (its
    # 200-byte O once overran a stack buffer)
    s.run("O too long: mg vivifies, ma applies, then the error",
          b"mg " + K("ol") + b" N30 t O" + b"x" * 40 + b" v\r\nmg " + K("ol") +
          b" t v h\r\nma " + K("om") + b" N0 J5 O" + b"y" * 200 + b" v\r\nmg " + K("om") +
          b" v\r\n")
    # seed 8484 case 5046: a plain mg has fetched the item by then, one
    # with h (or N T R l) has not
    s.run("O too long: fetched or not",
          b"ms " + K("of") + b" 1\r\nx\r\nmg " + K("of") + b" h O" + b"x" * 40 + b"\r\nmg " +
          K("of") + b" h\r\nmg " + K("of") + b" v O" + b"x" * 40 + b"\r\nmg " + K("of") +
          b" h\r\n")
    # difftest seed 2411 case 6824: an item ma N creates takes the TTL of
    # the last of T and N
    s.run("ma N creates with the TTL of the last of T and N",
          b"ma " + K("tn") + b" T-1 N60 v t\r\nmg " + K("tn") + b" v t\r\nma " + K("nt") +
          b" N60 T50 v t\r\nmg " + K("nt") + b" v t\r\n")
    s.run("TTL in the past: gone", b"mg " + K("g") + b" T-1\r\nmg " + K("g") + b" v\r\n")
    # difftest seed 20261124 case 4523: noreply hides "object too large"
    s.run("too large with noreply: nothing, and the old value is gone",
          b"set " + K("tl") + b" 0 0 1\r\nx\r\nset " + K("tl") + b" 0 0 1048577 noreply\r\n" +
          b"z" * 1048577 + b"\r\nget " + K("tl") + b"\r\n")
    s.run("a value over 4 KB", b"ms " + K("big") + b" 5000\r\n" + b"x" * 5000 +
          b"\r\nmg " + K("big") + b" s\r\n")
    s.run("me: debug of a hit and a miss", b"me " + K("big") + b"\r\nme " + K("nx") + b"\r\n")
    s.run("errors: key too long, bad flag, bad data chunk",
          b"mg " + b"k" * 251 + b" v\r\nmg " + K("a") + b" !\r\nms " + K("a") +
          b" 2\r\nabc\r\n")
    # difftest --target against a data process (seed 23 case 428): the reply
    # of an mg whose touch waits for the parity processes is dropped by a
    # get with a key too long; the touch's completion was skipped with it,
    # its mg never completed, and the connection answered nothing more
    s.run("mg with T, then a get with a key too long (the mg's reply dropped)",
          b"ms " + K("mgt") + b" 1\r\nx\r\n", drops=True)
    s.run("... the error only, and the connection answers after it",
          b"mg " + K("mgt") + b" T5 v\r\nget " + b"k" * 251 + b"\r\n", drops=True)
    s.run("... and the touch took effect", b"mg " + K("mgt") + b" t v\r\n", drops=True)
    # found by test_garbage against a data process: a number padded to 300
    # bytes keeps its length when incremented in place (the data engine
    # once built it in a 21-byte stack buffer)
    s.run("incr and ma on a number padded with spaces to 300 bytes",
          b"ms " + K("pad") + b" 300\r\n5" + b" " * 299 + b"\r\nincr " + K("pad") +
          b" 1\r\nma " + K("pad") + b" v\r\nmg " + K("pad") + b" s v\r\n")
    s.run("mn alone", b"")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_memcached(path):
    port = free_port()
    cmd = [path, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "64"]
    if os.geteuid() == 0:
        cmd += ["-u", "nobody"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("memcached did not start")


def is_proxy(host, port):
    """cocytus-proxy's stats name its servers (cluster_servers)."""
    c = Client(host, port)
    try:
        c.sock.sendall(b"stats\r\n")
        while True:
            line = c._line()
            if line.startswith(b"STAT cluster_servers "):
                return True
            if line in (b"END", b"ERROR") or not line.startswith(b"STAT "):
                return False
    finally:
        c.close()


def transcript(host, port, prefix, direct, proxy):
    c = Client(host, port)
    try:
        keys = Keys(prefix, Client(host, port) if direct else None)
        s = Script(c, keys, proxy)
        script(s, keys)
        return s.lines
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--memcached", default=os.environ.get("MEMCACHED") or
                    shutil.which("memcached") or "/usr/bin/memcached")
    ap.add_argument("--direct", action="store_true")
    ap.add_argument("--prefix", default="mc%d_" % os.getpid())
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    if not os.access(args.memcached, os.X_OK):
        print("SKIP: no memcached to compare with (apt-get install memcached)")
        return 77
    host, port = args.target.rsplit(":", 1)
    proxy = is_proxy(host, int(port))
    proc, mport = start_memcached(args.memcached)
    try:
        want = transcript("127.0.0.1", mport, args.prefix, False, proxy)
    finally:
        proc.terminate()
        proc.wait()
    got = transcript(host, int(port), args.prefix, args.direct, proxy)
    label = args.label or args.target
    if got == want:
        print("ok: meta script on %s: %d replies as memcached's" % (label, len(want)))
        return 0
    print("FAIL: meta script on %s differs from memcached" % label)
    for i in range(max(len(got), len(want))):
        w = want[i] if i < len(want) else b"<none>"
        g = got[i] if i < len(got) else b"<none>"
        mark = "   " if w == g else "!! "
        print(mark + "memcached: " + w.decode("latin-1"))
        if w != g:
            print(mark + "target:    " + g.decode("latin-1"))
    return 1


if __name__ == "__main__":
    sys.exit(main())
