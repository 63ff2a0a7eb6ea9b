#!/usr/bin/env python3
"""metadump_check.py - `lru_crawler metadump` through cocytus-proxy, as
memcached-tool's `keys` and `dump` use it.

    metadump_check.py fill --target HOST:PORT --prefix P --count N
    metadump_check.py tool --target HOST:PORT --prefix P --count N [--tool PATH]
    metadump_check.py errors --target HOST:PORT
    metadump_check.py concurrent --target HOST:PORT --prefix P --count N
    metadump_check.py order --target HOST:PORT
    metadump_check.py cachedump --target HOST:PORT --prefix P --count N
    metadump_check.py partial --target HOST:PORT --prefix P --count N --missing M --server S
    metadump_check.py count --target HOST:PORT --prefix P
    metadump_check.py killdump --target HOST:PORT --prefix P --count N --server S --delay D

fill: sets N keys P<i> (some with characters memcached URI-encodes, some
with a TTL) through the target, with flags and values the other checks
know.  tool: runs memcached-tool TARGET keys and dump (each must end by
itself, within 30 s): every key P<i> listed exactly once with its TTL,
and dump's add lines restore every value with its flags.  errors: a bad
class gets BADCLASS, a crawler command other than metadump ERROR, and the
connection still works.  concurrent: 6 metadumps at once, and 5 clients
that send one and close at once: each finished dump lists every key once.
cachedump: `stats cachedump` as libmemcached's memcdump uses it: memcdump
(if installed) lists every key once; a class's dump with a limit of 2 gives
2 lines; bad arguments get the servers' errors.
order: a pipeline of set, ms, metadump, delete, md on one connection: the
dump has both keys (written before it) and both are deleted after it.
partial: with M of the keys on server S, stopped, a metadump still ends
with END, listing exactly the others once and a SERVER_ERROR line naming S.
count: prints how many keys P* one server's own metadump lists.
killdump: kills server S (SIGKILL, by the pid its stats give), waits D
seconds and asks the target for a metadump: while S's keys move to a
recovery process and back, the dump still lists every key P<i> once and
no failure line.
Prints ok/FAIL lines; exits 1 on a failure.
"""
import argparse
import re
import socket
import subprocess
import sys
import time
import urllib.parse

failed = False


def check(label, cond, detail=""):
    global failed
    if cond:
        print("ok: %s" % label)
    else:
        failed = True
        print("FAIL: %s%s" % (label, (": " + detail) if detail else ""))


def connect(target):
    host, port = target.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=30)
    return s, s.makefile("rb")


def key_of(prefix, i):
    # every 7th key has characters memcached-tool must decode
    return "%s%d" % (prefix, i) if i % 7 else "%s%d:a/b%%c" % (prefix, i)


def ttl_of(i):
    return 100000 if i % 5 == 0 else 0


def value_of(i):
    return b"v%05d-" % i + b"x" * (i % 40)


def fill(args):
    s, f = connect(args.target)
    for i in range(args.count):
        v = value_of(i)
        s.sendall(b"set %s %d %d %d\r\n%s\r\n" %
                  (key_of(args.prefix, i).encode(), i % 3, ttl_of(i), len(v), v))
        line = f.readline()
        if line != b"STORED\r\n":
            check("set %s" % key_of(args.prefix, i), False, repr(line))
            return
    check("%d keys set through %s" % (args.count, args.target), True)


def metadump_lines(target):
    """The lines of one `lru_crawler metadump all`, and whether END came."""
    s, f = connect(target)
    s.sendall(b"lru_crawler metadump all\r\n")
    lines = []
    while True:
        line = f.readline()
        if not line:
            return lines, False
        if line == b"END\r\n":
            return lines, True
        lines.append(line.decode())


def ours(lines, prefix):
    """{key: exp} of the key= lines naming our keys; the duplicates."""
    keys, dups = {}, []
    for line in lines:
        m = re.match(r"key=(\S+) exp=(-?\d+) la=\d+ cas=\d+ fetch=(yes|no) cls=\d+ size=\d+\n$",
                     line)
        if m is None:
            continue
        k = urllib.parse.unquote(m.group(1))
        if not k.startswith(prefix):
            continue
        if k in keys:
            dups.append(k)
        keys[k] = int(m.group(2))
    return keys, dups


def tool(args):
    want = {key_of(args.prefix, i): i for i in range(args.count)}
    now = time.time()
    try:
        out = subprocess.run(["perl", args.tool, args.target, "keys"], capture_output=True,
                             timeout=30, check=False).stdout.decode()
    except subprocess.TimeoutExpired:
        check("memcached-tool keys ends by itself", False, "still reading after 30 s")
        return
    lines = [line + "\n" for line in out.splitlines()]
    got, dups = ours(lines, args.prefix)
    check("memcached-tool keys lists the %d keys" % args.count, set(got) == set(want),
          "missing %s, unexpected %s" % (sorted(set(want) - set(got))[:5],
                                         sorted(set(got) - set(want))[:5]))
    check("each key once", not dups, "twice: %s" % dups[:5])
    bad_exp = [k for k, i in want.items() if k in got and
               ((ttl_of(i) == 0 and got[k] != -1) or
                (ttl_of(i) > 0 and not now + ttl_of(i) - 60 <= got[k] <= now + ttl_of(i) + 60))]
    check("exp is -1 without a TTL, the expiry time with one", not bad_exp, str(bad_exp[:5]))
    try:
        out = subprocess.run(["perl", args.tool, args.target, "dump"], capture_output=True,
                             timeout=60, check=False).stdout
    except subprocess.TimeoutExpired:
        check("memcached-tool dump ends by itself", False, "still running after 60 s")
        return
    restored = {}
    pos = 0
    while pos < len(out):
        eol = out.index(b"\r\n", pos)
        head = out[pos:eol].decode().split()
        n = int(head[4])
        restored[head[1]] = (int(head[2]), out[eol + 2:eol + 2 + n])
        pos = eol + 2 + n + 2
    wrong = [k for k, i in want.items()
             if restored.get(k) != (i % 3, value_of(i))]
    check("memcached-tool dump gives every value with its flags", not wrong,
          "%d wrong, e.g. %s" % (len(wrong), wrong[:3]))


def errors(args):
    s, f = connect(args.target)
    for req, want in ((b"lru_crawler metadump 99\r\n", b"BADCLASS invalid class id\r\n"),
                      (b"lru_crawler metadump 1,x\r\n", b"BADCLASS invalid class id\r\n"),
                      (b"lru_crawler metadump\r\n", b"ERROR\r\n"),
                      (b"lru_crawler crawl all\r\n", b"ERROR\r\n"),
                      (b"version\r\n", None)):
        s.sendall(req)
        line = f.readline()
        if want is None:
            check("the connection works after them", line.startswith(b"VERSION "), repr(line))
        else:
            check("%r -> %r" % (req.strip(), want.strip()), line == want, repr(line))


def partial(args):
    start = time.time()
    lines, ended = metadump_lines(args.target)
    spent = time.time() - start
    got, dups = ours(lines, args.prefix)
    check("with a server stopped the metadump still ends (%.1f s)" % spent, ended)
    check("...listing the keys of the others once (%d of %d, %d on the stopped one)" %
          (len(got), args.count, args.missing),
          len(got) == args.count - args.missing and not dups, "twice: %s" % dups[:5])
    said = [line for line in lines
            if line.startswith("SERVER_ERROR metadump of %s failed: " % args.server)]
    check("...and a line saying which server is missing", len(said) == 1,
          repr([line for line in lines if not line.startswith("key=")][:3]))


def concurrent(args):
    import threading
    results = []

    def one():
        lines, ended = metadump_lines(args.target)
        got, dups = ours(lines, args.prefix)
        results.append((ended, len(got), len(dups)))

    for _ in range(5):
        s, _ = connect(args.target)
        s.sendall(b"lru_crawler metadump all\r\n")
        s.close()
    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    check("6 metadumps at once (and 5 abandoned): each lists the %d keys once" % args.count,
          results == [(True, args.count, 0)] * 6, str(results))


def cachedump(args):
    want = {key_of(args.prefix, i) for i in range(args.count)}
    try:
        out = subprocess.run(["memcdump", "--servers=" + args.target], capture_output=True,
                             timeout=60, check=False)
        keys = [k for k in out.stdout.decode().splitlines() if k.startswith(args.prefix)]
        check("memcdump lists the %d keys once" % args.count,
              out.returncode == 0 and sorted(keys) == sorted(want),
              "exit %d, %d keys, %d distinct: %s" % (out.returncode, len(keys), len(set(keys)),
                                                    out.stderr.decode()[:200]))
    except FileNotFoundError:
        print("note: no memcdump (libmemcached-tools): not run")
    # the class with the most of our keys, from a metadump's cls=
    lines, _ = metadump_lines(args.target)
    per_class = {}
    for line in lines:
        m = re.match(r"key=(\S+) .* cls=(\d+) ", line)
        if m and urllib.parse.unquote(m.group(1)).startswith(args.prefix):
            per_class[int(m.group(2))] = per_class.get(int(m.group(2)), 0) + 1
    cls = max(per_class, key=per_class.get)
    s, f = connect(args.target)
    for req, want_lines in ((b"stats cachedump %d 2\r\n" % cls, 2),
                            (b"stats cachedump %d 0\r\n" % cls, per_class[cls])):
        s.sendall(req)
        items = []
        while True:
            line = f.readline()
            if not line or line == b"END\r\n":
                break
            items.append(line)
        ok = len(items) >= want_lines if want_lines == per_class[cls] else len(items) == want_lines
        check("%r: %d ITEM lines" % (req.strip(), want_lines),
              ok and all(i.startswith(b"ITEM ") for i in items), repr(items[:3]))
    for req, want in ((b"stats cachedump\r\n", b"CLIENT_ERROR bad command line\r\n"),
                      (b"stats cachedump 1\r\n", b"CLIENT_ERROR bad command line\r\n"),
                      (b"stats cachedump x 0\r\n", b"CLIENT_ERROR bad command line format\r\n"),
                      (b"stats cachedump 64 0\r\n", b"CLIENT_ERROR Illegal slab id\r\n"),
                      (b"stats cachedump 0 0\r\n", b"END\r\n")):
        s.sendall(req)
        line = f.readline()
        check("%r -> %r" % (req.strip(), want.strip()), line == want, repr(line))


def order(args):
    s, f = connect(args.target)
    s.sendall(b"set md_order_c 0 0 1\r\nc\r\nms md_order_m 1\r\nm\r\n"
              b"lru_crawler metadump all\r\ndelete md_order_c\r\nmd md_order_m\r\n")
    check("set first", f.readline() == b"STORED\r\n")
    check("ms second", f.readline() == b"HD\r\n")
    lines = []
    while True:
        line = f.readline()
        if not line or line == b"END\r\n":
            break
        lines.append(line.decode())
    got, _ = ours(lines, "md_order_")
    check("the metadump lists the keys set before it", set(got) == {"md_order_c", "md_order_m"},
          str(sorted(got)))
    check("delete after it", f.readline() == b"DELETED\r\n")
    check("md after it", f.readline() == b"HD\r\n")


def count(args):
    lines, ended = metadump_lines(args.target)
    if not ended:
        check("metadump at %s ends" % args.target, False)
        return
    print(len(ours(lines, args.prefix)[0]))


def killdump(args):
    import os
    import signal
    s, f = connect(args.server)
    s.sendall(b"stats\r\n")
    pid = None
    while True:
        line = f.readline()
        if not line or line == b"END\r\n":
            break
        if line.startswith(b"STAT pid "):
            pid = int(line.split()[2])
    s.close()
    if pid is None:
        check("the pid of %s" % args.server, False)
        return
    os.kill(pid, signal.SIGKILL)
    time.sleep(args.delay)
    start = time.time()
    lines, ended = metadump_lines(args.target)
    spent = time.time() - start
    got, dups = ours(lines, args.prefix)
    others = [line.strip() for line in lines if not line.startswith("key=")]
    check("%s killed, a metadump %.3f s later (%.2f s): every key once, no failure line" %
          (args.server, args.delay, spent),
          ended and len(got) == args.count and not dups and not others,
          "ended %s, %d keys, %d twice, %s" % (ended, len(got), len(dups), others[:2]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("fill", "tool", "errors", "partial", "count",
                                     "concurrent", "order", "cachedump", "killdump"))
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--server", default="")
    ap.add_argument("--target", required=True)
    ap.add_argument("--prefix", default="md_")
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--missing", type=int, default=0)
    ap.add_argument("--tool", default="/usr/share/memcached/scripts/memcached-tool")
    args = ap.parse_args()
    {"fill": fill, "tool": tool, "errors": errors, "partial": partial, "count": count,
     "concurrent": concurrent, "order": order, "cachedump": cachedump,
     "killdump": killdump}[args.what](args)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
