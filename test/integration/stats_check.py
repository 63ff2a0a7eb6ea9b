#!/usr/bin/env python3
"""stats_check.py - the `stats` replies monitoring tools read, checked.

Monitoring agents (Prometheus's memcached_exporter, collectd, Datadog,
telegraf) poll a memcached with `stats`, `stats settings`, `stats items`
and `stats slabs`, and mark the server down when one of them answers
ERROR or a line they cannot split: memcached_exporter needs every line to
be `STAT <name> <value>` (three words, `<value>` without spaces), the
number before or after a name's colon to be an integer, `stats settings`
to answer, and cmd_set and the cas counters to be there.  This script
checks those shapes at one target, in the text and the binary protocol,
and `stats reset`.

With --counters it also runs fixed sequences of operations against a
reference memcached started here and against the target, and the replies
must be equal and the target's counters move as memcached's do: text (set,
get, cas in its three outcomes, delete, incr, decr, touch, gat on keys
present and absent), binary (get, getq, gat, gatq, touch, stores with a
cas, delete with a wrong cas, an incr that creates its key, a set too
large) and meta (mg with T, u and N, md with a wrong C, ma that creates,
ms with a wrong C, and quiet mode).

  stats_check.py --target HOST:PORT [--direct] [--counters] [--servers LIST]
                 [--kinds text,binary,meta] [--label L] [--memcached PATH]

With --servers HOST:PORT,...: the target is cocytus-proxy in front of
those servers (every server of its map), and its `stats` (text and
binary) must give the cache's figures as their sums: curr_items,
total_items, bytes and limit_maxbytes, with cluster_servers_answered equal
to their number.

With --metadump: `lru_crawler metadump all`, which memcached-tool's keys
and dump modes read, must list three stored keys with memcached's exp,
fetch, class and size (with --direct, keys the target serves).

--direct: the target is one server of a cluster: keys are chosen among
the ones it serves (meta_check.py's Keys).  Exit status 0 good, 1 a
difference (shown), 77 no memcached for --counters.
"""

import argparse
import os
import re
import shutil
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from meta_check import Client, Keys, start_memcached  # noqa: E402

# The general counters every target must have, as numbers (the exporter's
# cmd_set and cas sums fail without them; the rest are what dashboards
# plot).
NUMERIC = ["pid", "uptime", "time", "curr_connections", "total_connections", "cmd_get",
           "cmd_set", "cmd_flush", "cmd_touch", "get_hits", "get_misses", "delete_hits",
           "delete_misses", "incr_hits", "incr_misses", "decr_hits", "decr_misses",
           "cas_hits", "cas_misses", "cas_badval", "touch_hits", "touch_misses",
           "bytes_read", "bytes_written"]
TIMEVAL = ["rusage_user", "rusage_system"]
# Counters the operation sequence moves; they must move as memcached's.
COUNTED = ["cmd_get", "cmd_set", "cmd_touch", "get_hits", "get_misses", "delete_hits",
           "delete_misses", "incr_hits", "incr_misses", "decr_hits", "decr_misses",
           "cas_hits", "cas_misses", "cas_badval", "touch_hits", "touch_misses"]

problems = []


def problem(text):
    problems.append(text)


def read_text_stats(c, group):
    """The (name, value) lines of `stats <group>`, or None after an error
    line (recorded)."""
    c.sock.sendall(("stats %s\r\n" % group).encode() if group else b"stats\r\n")
    lines = []
    while True:
        line = c._line()
        if line == b"END":
            return lines
        words = line.split(b" ")
        if words[0] != b"STAT":
            problem("`stats %s`: %r instead of STAT lines" % (group, line))
            return None
        if len(words) != 3 or not words[1] or not words[2]:
            problem("`stats %s`: %r is not 'STAT <name> <value>'" % (group, line))
            continue
        lines.append((words[1].decode("latin-1"), words[2].decode("latin-1")))


def check_names(where, lines):
    """A name with one or two colons is a slab class's: the exporter parses
    its class number as an integer."""
    seen = set()
    for name, value in lines:
        if name in seen:
            problem("%s: %s twice" % (where, name))
        seen.add(name)
        parts = name.split(":")
        if len(parts) == 2 and not parts[0].isdigit():
            problem("%s: %s: a class name whose class is not a number" % (where, name))
        if len(parts) == 3 and not parts[1].isdigit():
            problem("%s: %s: an item class whose class is not a number" % (where, name))
        if not all(33 <= ord(ch) < 127 for ch in name + value):
            problem("%s: %r %r is not printable" % (where, name, value))


def check_text(host, port, label):
    c = Client(host, port)
    try:
        general = read_text_stats(c, "")
        if general is not None:
            check_names("`stats`", general)
            d = dict(general)
            for name in NUMERIC:
                if not re.fullmatch(r"\d+", d.get(name, "")):
                    problem("`stats`: %s missing or not a number (%r)" % (name, d.get(name)))
            for name in TIMEVAL:
                if not re.fullmatch(r"\d+\.\d{6}", d.get(name, "")):
                    problem("`stats`: %s missing or not seconds.micros (%r)" % (name, d.get(name)))
        settings = read_text_stats(c, "settings")
        if settings is not None:
            check_names("`stats settings`", settings)
            d = dict(settings)
            for name in ["maxconns", "item_size_max", "tcpport"]:
                if not re.fullmatch(r"\d+", d.get(name, "")):
                    problem("`stats settings`: %s missing or not a number (%r)" % (name, d.get(name)))
        for group in ["items", "slabs", "sizes"]:
            lines = read_text_stats(c, group)
            if lines is not None:
                check_names("`stats %s`" % group, lines)
        c.sock.sendall(b"stats reset\r\n")
        line = c._line()
        if line != b"RESET":
            problem("`stats reset`: %r instead of RESET" % line)
        else:
            after = dict(read_text_stats(c, "") or [])
            for name in ["cmd_get", "cmd_set", "get_hits", "cas_hits", "delete_hits"]:
                if after.get(name) != "0":
                    problem("after `stats reset`: %s is %r, not 0" % (name, after.get(name)))
    finally:
        c.close()


def read_packet(sock, buf):
    """The next binary reply: (header fields, body, the rest of the input).
    ConnectionError when the server closes first."""
    while True:
        if len(buf) >= 24:
            header = struct.unpack(">BBHBBHIIQ", buf[:24])
            nbody = header[6]
            if len(buf) >= 24 + nbody:
                return header, buf[24:24 + nbody], buf[24 + nbody:]
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("server closed the connection")
        buf += data


def check_binary(host, port):
    """Binary STAT for each group: packets up to the one with an empty key,
    all with status 0."""
    s = socket.create_connection((host, port), timeout=10)
    buf = b""
    try:
        for group in [b"", b"settings", b"items", b"slabs", b"reset"]:
            s.sendall(struct.pack(">BBHBBHIIQ", 0x80, 0x10, len(group), 0, 0, 0, len(group),
                                  0x5a5a, 0) + group)
            n = 0
            while True:
                try:
                    header, body, buf = read_packet(s, buf)
                except ConnectionError:
                    problem("binary stat %r: connection closed" % group)
                    return
                magic, op, nkey, _, _, status, _, opaque, _ = header
                if magic != 0x81 or op != 0x10 or opaque != 0x5a5a:
                    problem("binary stat %r: a reply that is not ours" % group)
                    return
                if status != 0:
                    problem("binary stat %r: status 0x%02x %r" % (group, status, body))
                    break
                if nkey == 0:
                    break
                n += 1
            if group == b"settings" and n == 0:
                problem("binary stat settings: no settings")
    finally:
        s.close()


def counters(host, port):
    c = Client(host, port)
    try:
        return dict(read_text_stats(c, "") or [])
    finally:
        c.close()


def binary(sock, buf, op, key, extras=b"", value=b"", cas=0, quiet=False):
    """One binary request; returns (status, the rest of the input).  A quiet
    request is followed by a noop, and its own reply may not come."""
    sock.sendall(struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(extras), 0, 0,
                             len(key) + len(extras) + len(value), 0x77, cas)
                 + extras + key + value)
    if quiet:
        sock.sendall(struct.pack(">BBHBBHIIQ", 0x80, 0x0a, 0, 0, 0, 0, 0, 0x78, 0))
    status = None
    while True:
        header, _, buf = read_packet(sock, buf)
        rop, st = header[1], header[5]
        if rop == 0x0a and quiet:
            return (status if status is not None else "quiet"), buf
        if not quiet:
            return st, buf
        status = st


def binary_operations(host, port, keys):
    """The binary sequence: reads, gat, touch, stores with a cas, delete
    with a wrong cas, incr that creates, a refused too-large set."""
    s = socket.create_connection((host, port), timeout=10)
    buf = b""
    out = []

    def op(*args, **kw):
        nonlocal buf
        st, buf = binary(s, buf, *args, **kw)
        out.append(st)

    a, m, i = keys("ba"), keys("bmissing"), keys("bi")
    ext_set = struct.pack(">II", 0, 0)
    ttl = struct.pack(">I", 100)
    try:
        op(0x01, a, ext_set, b"1")                          # set
        op(0x00, a)                                          # get hit
        op(0x00, m)                                          # get miss
        op(0x09, m, quiet=True)                              # getq miss
        op(0x1d, a, ttl)                                     # gat hit
        op(0x1e, m, ttl, quiet=True)                         # gatq miss
        op(0x1c, m, ttl)                                     # touch miss
        op(0x01, a, ext_set, b"2", cas=999999)               # set, wrong cas
        op(0x03, m, ext_set, b"2", cas=999999)               # replace with cas, missing
        op(0x02, a, ext_set, b"2", cas=999999)               # add with cas
        op(0x04, a, cas=999999)                              # delete, wrong cas
        op(0x05, i, struct.pack(">QQI", 1, 5, 0))            # incr that creates
        op(0x05, i, struct.pack(">QQI", 1, 5, 0xffffffff))   # incr hit
        op(0x06, m, struct.pack(">QQI", 1, 5, 0xffffffff))   # decr miss
        op(0x01, a, ext_set, b"z" * (2 * 1024 * 1024))       # too large: dropped
        op(0x00, a)                                          # ... so a miss
    finally:
        s.close()
    return out


def meta_operations(host, port, keys):
    """The meta sequence: mg with T, u and N; md with a wrong C; ma that
    creates; ms with a wrong C."""
    c = Client(host, port)
    out = []
    a, m, v, n, q = keys("ma"), keys("mmissing"), keys("mviv"), keys("mn"), keys("mq")

    def req(text):
        c.sock.sendall(text + b"mn\r\n")
        while True:
            line = c._line()
            if line == b"MN":
                return
            out.append(line)
            if line.startswith(b"VA "):
                out.append(c._exact(int(line.split()[1]) + 2)[:-2])

    try:
        req(b"ms " + a + b" 1\r\nx\r\n")
        req(b"mg " + a + b" v\r\n")
        req(b"mg " + m + b" v\r\n")
        req(b"mg " + a + b" v T30\r\n")
        req(b"mg " + m + b" v T30\r\n")
        req(b"mg " + a + b" v u\r\n")
        req(b"mg " + v + b" v N30\r\n")
        req(b"md " + a + b" C999999\r\n")
        req(b"ma " + n + b" N30\r\n")
        req(b"ma " + n + b"\r\n")
        req(b"ma " + m + b" MD\r\n")
        req(b"ms " + a + b" 1 C999999\r\ny\r\n")
        req(b"md " + a + b"\r\n")
        req(b"md " + a + b"\r\n")
        # quiet mode: the hidden replies count too
        req(b"ms " + q + b" 1 q\r\n1\r\n")
        req(b"mg " + m + b" v q\r\n")
        req(b"mg " + q + b" v q T30\r\n")
        req(b"ma " + q + b" q\r\n")
        req(b"ma " + m + b" q\r\n")
        req(b"ms " + q + b" 1 q C999999\r\n2\r\n")
        req(b"md " + q + b" q\r\n")
        req(b"md " + q + b" q\r\n")
    finally:
        c.close()
    return out


def operations(host, port, keys, kinds):
    """The fixed sequences (text, and binary and meta as kinds say);
    returns the replies, to compare too."""
    out = text_operations(host, port, keys)
    if "binary" in kinds:
        out += [str(st).encode() for st in binary_operations(host, port, keys)]
    if "meta" in kinds:
        out += meta_operations(host, port, keys)
    # key names differ between the two runs (a cluster server gets its own)
    for name, key in sorted(keys.real.items(), key=lambda p: -len(p[1])):
        out = [line.replace(key, b"<" + name.encode() + b">") for line in out]
    return out


def text_operations(host, port, keys):
    """The text sequence."""
    c = Client(host, port)
    out = []

    def req(text):
        c.sock.sendall(text)
        line = c._line()
        out.append(line)
        return line

    def get(cmd, key):
        c.sock.sendall(cmd + b" " + key + b"\r\n")
        cas = None
        while True:
            line = c._line()
            if line == b"END":
                break
            words = line.split(b" ")
            if words[0] != b"VALUE":
                out.append(line)
                break
            if len(words) == 5:
                cas = words[4]
            c._exact(int(words[3]) + 2)
            out.append(b"VALUE " + words[1] + b" " + words[2] + b" " + words[3])
        return cas

    a, b, n, m = keys("a"), keys("b"), keys("n"), keys("missing")
    try:
        req(b"set " + a + b" 5 0 3\r\nabc\r\n")
        req(b"set " + n + b" 0 0 2\r\n10\r\n")
        get(b"get", a)
        get(b"get", m)
        cas = get(b"gets", a)
        req(b"cas " + a + b" 0 0 1 " + cas + b"\r\nx\r\n")        # hit
        req(b"cas " + a + b" 0 0 1 " + cas + b"\r\ny\r\n")        # bad value
        req(b"cas " + m + b" 0 0 1 " + cas + b"\r\nz\r\n")        # miss
        req(b"incr " + n + b" 5\r\n")
        req(b"incr " + m + b" 5\r\n")
        req(b"decr " + n + b" 2\r\n")
        req(b"decr " + m + b" 2\r\n")
        req(b"touch " + a + b" 100\r\n")
        req(b"touch " + m + b" 100\r\n")
        get(b"gat 100", a)
        get(b"gat 100", m)
        req(b"set " + b + b" 0 0 1\r\nq\r\n")
        req(b"delete " + b + b"\r\n")
        req(b"delete " + b + b"\r\n")
    finally:
        c.close()
    return out


NAMES = ["a", "b", "n", "missing", "ba", "bmissing", "bi", "ma", "mmissing", "mviv", "mn", "mq"]


def check_counters(host, port, direct, memcached, kinds):
    prefix = "st%d_" % os.getpid()
    proc, mport = start_memcached(memcached)
    try:
        mkeys = Keys(prefix)
        for name in NAMES:
            mkeys(name)
        before = counters("127.0.0.1", mport)
        want_replies = operations("127.0.0.1", mport, mkeys, kinds)
        after = counters("127.0.0.1", mport)
    finally:
        proc.terminate()
        proc.wait()
    want = {k: int(after[k]) - int(before[k]) for k in COUNTED}

    owner = Client(host, port) if direct else None
    tkeys = Keys(prefix, owner)
    for name in NAMES:
        tkeys(name)
    if owner is not None:
        owner.close()
    before = counters(host, port)
    got_replies = operations(host, port, tkeys, kinds)
    after = counters(host, port)
    got = {}
    for k in COUNTED:
        try:
            got[k] = int(after[k]) - int(before[k])
        except (KeyError, ValueError):
            got[k] = None
    if got_replies != want_replies:
        problem("the operations' replies differ from memcached's: %r against %r"
                % (got_replies, want_replies))
    for k in COUNTED:
        if got[k] != want[k]:
            problem("counter %s moved by %r, memcached's by %d" % (k, got[k], want[k]))


def metadump(host, port, keys):
    """Stores three keys (the second with a byte memcached URI-encodes),
    reads the first back once, and returns {index: (exp, fetch, cls, size)}
    of their `lru_crawler metadump all` lines (memcached-tool's keys and
    dump)."""
    c = Client(host, port)
    try:
        c.sock.sendall(b"set " + keys[0] + b" 7 0 3\r\nabc\r\n")
        c._line()
        c.sock.sendall(b"set " + keys[1] + b" 0 3000 1\r\nx\r\n")
        c._line()
        c.sock.sendall(b"set " + keys[2] + b" 0 0 100\r\n" + b"z" * 100 + b"\r\n")
        c._line()
        c.sock.sendall(b"get " + keys[0] + b"\r\n")
        while c._line() != b"END":
            pass
        c.sock.sendall(b"lru_crawler metadump all\r\n")
        found = {}
        while True:
            while b"\n" not in c.buf:
                c._fill()
            line, c.buf = c.buf.split(b"\n", 1)
            if line == b"END\r":
                break
            if not line.startswith(b"key="):
                problem("metadump: %r instead of key lines" % line)
                break
            m = re.fullmatch(rb"key=(\S+) exp=(-?\d+) la=(\d+) cas=(\d+) fetch=(yes|no) "
                             rb"cls=(\d+) size=(\d+)", line)
            if not m:
                problem("metadump: %r is not memcached's line" % line)
                continue
            key = re.sub(rb"%([0-9A-F]{2})", lambda h: bytes([int(h.group(1), 16)]), m.group(1))
            if key in keys:
                exp = m.group(2) if m.group(2) == b"-1" else b"<a time>"
                found[keys.index(key)] = (exp, m.group(5), m.group(6), m.group(7))
        return found
    finally:
        c.close()


def check_metadump(host, port, direct, memcached):
    prefix = "dump%d_" % os.getpid()
    # One server of a cluster lists the keys it serves: chosen among those,
    # and the same keys go to memcached (an item's size counts its key).
    owner = Client(host, port) if direct else None
    tkeys = Keys(prefix, owner)
    keys = [tkeys(n) for n in ("md_a", "md%b", "md_c")]
    if owner is not None:
        owner.close()
    proc, mport = start_memcached(memcached)
    try:
        want = metadump("127.0.0.1", mport, keys)
    finally:
        proc.terminate()
        proc.wait()
    got = metadump(host, port, keys)
    if got != want:
        problem("metadump: %r, memcached's %r" % (got, want))


TOTALS = ["curr_items", "total_items", "bytes", "limit_maxbytes"]


def binary_general_stats(host, port):
    """The name -> value map of a binary STAT without a key."""
    s = socket.create_connection((host, port), timeout=10)
    buf = b""
    got = {}
    try:
        s.sendall(struct.pack(">BBHBBHIIQ", 0x80, 0x10, 0, 0, 0, 0, 0, 0x7a7a, 0))
        while True:
            header, body, buf = read_packet(s, buf)
            nkey, extlen = header[2], header[3]
            if header[5] != 0 or nkey == 0:
                return got
            got[body[extlen:extlen + nkey].decode("latin-1")] = body[extlen + nkey:].decode("latin-1")
    finally:
        s.close()


def check_totals(host, port, servers):
    """The proxy's figures are the sums over its servers, read while nothing
    changes them (a once-a-second expiry sweep may, and a proxy whose map is
    older than a server's fetches the new one then: up to 3 tries)."""
    why = ""
    for attempt in range(3):
        if attempt:
            time.sleep(0.5)
        sums = dict.fromkeys(TOTALS, 0)
        for server in servers:
            c = Client(*server)
            try:
                d = dict(read_text_stats(c, "") or [])
            finally:
                c.close()
            for name in TOTALS:
                sums[name] += int(d.get(name, "0"))
        c = Client(host, port)
        try:
            text = dict(read_text_stats(c, "") or [])
        finally:
            c.close()
        binary = binary_general_stats(host, port)
        why = ""
        for where, d in [("text", text), ("binary", binary)]:
            if d.get("cluster_servers_answered") != str(len(servers)):
                why += " %s: cluster_servers_answered %r of %d;" % (
                    where, d.get("cluster_servers_answered"), len(servers))
            for name in TOTALS:
                if d.get(name) != str(sums[name]):
                    why += " %s: %s %r, the servers' sum %d;" % (where, name, d.get(name), sums[name])
        if not why:
            print("ok: the proxy's stats are its %d servers' sums: %s" % (
                len(servers), ", ".join("%s %d" % (n, sums[n]) for n in TOTALS)))
            return
    problem("`stats` through the proxy:" + why)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--direct", action="store_true")
    ap.add_argument("--counters", action="store_true")
    ap.add_argument("--metadump", action="store_true",
                    help="lru_crawler metadump all, compared with memcached's")
    ap.add_argument("--kinds", default="text,binary,meta",
                    help="the sequences --counters runs (text always)")
    ap.add_argument("--label", default="")
    ap.add_argument("--servers", default="",
                    help="HOST:PORT,...: the proxy's servers, whose sums its stats must give")
    ap.add_argument("--memcached", default=os.environ.get("MEMCACHED") or
                    shutil.which("memcached") or "/usr/bin/memcached")
    args = ap.parse_args()
    host, port = args.target.rsplit(":", 1)
    port = int(port)
    label = args.label or args.target
    if args.counters or args.metadump:
        if not os.access(args.memcached, os.X_OK):
            print("SKIP: no memcached to compare with (apt-get install memcached)")
            return 77
        if args.counters:
            check_counters(host, port, args.direct, args.memcached, args.kinds.split(","))
        if args.metadump:
            check_metadump(host, port, args.direct, args.memcached)
    check_text(host, port, label)
    check_binary(host, port)
    if args.servers:
        check_totals(host, port, [(h, int(p)) for h, p in
                                  (a.rsplit(":", 1) for a in args.servers.split(","))])
    if problems:
        print("FAIL: stats of %s:" % label)
        for p in problems:
            print("  " + p)
        return 1
    print("ok: stats of %s: every group answers in memcached's shape%s%s"
          % (label, ", counters move as memcached's" if args.counters else "",
             ", metadump lists keys as memcached's" if args.metadump else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
