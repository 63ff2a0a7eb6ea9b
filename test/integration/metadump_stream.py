#!/usr/bin/env python3
"""metadump_stream.py - a server's `lru_crawler metadump` comes a piece at a
time (memcached/proto_text.c, conn_stream): run by metadump_stream.sh
against one cocytus-server.

  --target HOST:PORT --pid PID [--keys N]             (a plain server, -o idle_timeout=1)
  --behind-write --target DP --pid DP_PID --parity-pid PP_PID [--keys N]

Checks, each printing "ok: ..." or "FAIL: ..." (exit 1 on any failure):
  memory   N keys stored; a dump that its client does not read for 2.5 s
           costs the server a few pieces, not the whole listing (VmRSS of
           PID grows by less than LIMIT_MB while it waits), and other
           clients are answered meanwhile
  whole    that dump, read at last: every key once, then END, then the
           reply of the request pipelined behind it (the connection parsed
           nothing meanwhile, and the idle timeout did not cut it off)
  growth   a dump read slowly while another client stores enough new keys
           for the hash table to double (and deletes some old ones): every
           old key not deleted is listed exactly once, no key twice
  abandon  dumps closed half read, and 3 at once read to the end: the
           server answers and lists the same keys each time
With --behind-write, against a data process of an RS group:
  behind   a dump pipelined behind a set that waits for a stopped parity
           process (set, mn, metadump): the data process does not spin
           while it waits (CPU time over 1.5 s below 0.3 s), and once the
           parity process runs again come STORED, MN and every key once
"""
import argparse
import os
import socket
import sys
import time

LIMIT_MB = 12            # the whole listing of --keys 400000 is about 28 MB
failures = 0


def ok(msg):
    print("ok: " + msg, flush=True)


def fail(msg):
    global failures
    failures += 1
    print("FAIL: " + msg, flush=True)


def connect(target):
    host, port = target.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_until(s, buf, marker):
    """Reads until marker is in buf; returns (through marker, rest)."""
    parts = [buf]
    size = len(buf)
    i = buf.find(marker)
    while i < 0:
        d = s.recv(1 << 20)
        if not d:
            raise RuntimeError("connection closed while waiting for %r" % marker)
        # look where the marker may be: the new bytes and a marker's length before
        look = (parts[-1][-len(marker):] if parts else b"") + d
        j = look.find(marker)
        parts.append(d)
        if j >= 0:
            i = size - (len(look) - len(d)) + j
        size += len(d)
    whole = b"".join(parts)
    i += len(marker)
    return whole[:i], whole[i:]


def store(target, keys, value=b"v"):
    s = connect(target)
    for i in range(0, len(keys), 5000):
        chunk = b"".join(b"set %s 0 0 %d noreply\r\n%s\r\n" % (k, len(value), value)
                         for k in keys[i:i + 5000])
        s.sendall(chunk + b"mn\r\n")
        read_until(s, b"", b"MN\r\n")
    s.close()


def delete(target, keys):
    s = connect(target)
    s.sendall(b"".join(b"delete %s noreply\r\n" % k for k in keys) + b"mn\r\n")
    read_until(s, b"", b"MN\r\n")
    s.close()


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def stat(target, name):
    s = connect(target)
    s.sendall(b"stats\r\n")
    text, _ = read_until(s, b"", b"END\r\n")
    s.close()
    for line in text.split(b"\r\n"):
        w = line.split()
        if len(w) == 3 and w[1] == name.encode():
            return int(w[2])
    return None


def dump_keys(body):
    """The key of every line of a listing (keys here need no decoding)."""
    keys = []
    for line in body.split(b"\n"):
        if line.startswith(b"key="):
            keys.append(line[4:].split(b" ", 1)[0])
    return keys


def check_once(what, listed, expect, may=frozenset()):
    seen = {}
    for k in listed:
        seen[k] = seen.get(k, 0) + 1
    twice = [k for k, n in seen.items() if n > 1]
    missing = [k for k in expect if k not in seen]
    extra = [k for k in seen if k not in expect and k not in may]
    if twice or missing or extra:
        fail("%s: %d listed twice (%r), %d missing (%r), %d unexpected (%r)" %
             (what, len(twice), twice[:3], len(missing), missing[:3], len(extra), extra[:3]))
        return False
    return True


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        w = f.read().rsplit(")", 1)[1].split()
    return (int(w[11]) + int(w[12])) / os.sysconf("SC_CLK_TCK")


def behind_write(a):
    import signal
    t = a.target
    keys = [b"bw_%06d" % i for i in range(a.keys)]
    store(t, keys)
    os.kill(a.parity_pid, signal.SIGSTOP)
    try:
        d = connect(t)
        d.sendall(b"set bw_pending 0 0 1\r\nx\r\nmn\r\nlru_crawler metadump all\r\n")
        time.sleep(0.3)
        cpu0 = cpu_seconds(a.pid)
        time.sleep(1.5)
        spent = cpu_seconds(a.pid) - cpu0
        d.settimeout(0.1)
        try:
            early = d.recv(100)
        except socket.timeout:
            early = b""
        d.settimeout(30)
    finally:
        os.kill(a.parity_pid, signal.SIGCONT)
    if spent < 0.3:
        ok("behind: a dump behind a set that waits: the data process used %.2f s of CPU "
           "in 1.5 s" % spent)
    else:
        fail("behind: a dump behind a set that waits: the data process used %.2f s of CPU "
             "in 1.5 s (spinning?)" % spent)
    if early:
        fail("behind: a reply came while the set waited: %r" % early[:60])
    head, rest = read_until(d, b"", b"MN\r\n")
    body, _ = read_until(d, rest, b"END\r\n")
    if head != b"STORED\r\nMN\r\n":
        fail("behind: the set and mn answered %r" % head[:60])
    elif check_once("behind", dump_keys(body), set(keys) | {b"bw_pending"}):
        ok("behind: then STORED, MN and the %d keys once each" % (a.keys + 1))
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--keys", type=int, default=400000)
    ap.add_argument("--behind-write", action="store_true")
    ap.add_argument("--parity-pid", type=int, default=0)
    a = ap.parse_args()
    if a.behind_write:
        return behind_write(a)
    t = a.target

    keys = [b"ms_%07d" % i for i in range(a.keys)]
    store(t, keys)
    expect = set(keys)

    # --- memory: a dump nobody reads yet ---
    before = rss_kb(a.pid)
    d = connect(t)
    d.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    d.sendall(b"lru_crawler metadump all\r\nmn\r\n")
    other = connect(t)
    worst = 0.0
    deadline = time.time() + 2.5       # past the server's idle_timeout of 1 s
    while time.time() < deadline:
        t0 = time.time()
        other.sendall(b"get ms_0000001\r\n")
        read_until(other, b"", b"END\r\n")
        worst = max(worst, time.time() - t0)
        time.sleep(0.05)
    grown = (rss_kb(a.pid) - before) / 1024.0
    if grown < LIMIT_MB:
        ok("memory: a dump of %d keys not read for 2.5 s: the server grew by %.1f MB (< %d); "
           "gets meanwhile answered within %.0f ms" % (a.keys, grown, LIMIT_MB, worst * 1000))
    else:
        fail("memory: a dump of %d keys not read yet: the server grew by %.1f MB (limit %d)" %
             (a.keys, grown, LIMIT_MB))
    other.close()

    # --- whole: the rest of it, then the request behind it ---
    body, rest = read_until(d, b"", b"END\r\n")
    tail, _ = read_until(d, rest, b"MN\r\n")
    if check_once("whole", dump_keys(body), expect):
        if tail == b"MN\r\n":
            ok("whole: %d keys listed once each, END, then the pipelined mn's MN" % a.keys)
        else:
            fail("whole: after END came %r, not MN" % tail[:80])
    d.close()

    # --- growth: the table doubles while a dump is read slowly ---
    power0 = stat(t, "hash_power_level")
    d = connect(t)
    d.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    d.sendall(b"lru_crawler metadump all\r\n")
    gone = set(keys[::400])
    new = [b"mg_%07d" % i for i in range(int(a.keys * 1.3))]
    parts = []
    next_new = 0
    deleted = False
    last = b""
    while not last.endswith(b"END\r\n"):
        chunk = d.recv(32 << 10)
        if not chunk:
            break
        parts.append(chunk)
        last = (last + chunk)[-8:]
        if next_new < len(new):
            store(t, new[next_new:next_new + 20000])
            next_new += 20000
        if not deleted and next_new >= len(new) // 2:
            delete(t, sorted(gone))
            deleted = True
    power1 = stat(t, "hash_power_level")
    buf = b"".join(parts)
    if not buf.endswith(b"END\r\n"):
        fail("growth: the dump did not end with END: %r" % buf[-80:])
    elif power0 is None or power1 is None or power1 <= power0:
        fail("growth: the table did not grow during the dump (hash_power_level %s -> %s)" %
             (power0, power1))
    else:
        listed = dump_keys(buf)
        if check_once("growth", listed, expect - gone, may=gone | set(new)):
            ok("growth: hash_power_level %d -> %d during the dump, %d new keys stored and %d "
               "deleted meanwhile: every old key kept listed once (%d lines), none twice" %
               (power0, power1, next_new, len(gone), len(listed)))
    d.close()

    # --- abandon ---
    expect = (expect - gone) | set(new[:next_new])
    for _ in range(5):
        d = connect(t)
        d.sendall(b"lru_crawler metadump all\r\n")
        got = b""
        while len(got) < 10000:
            got += d.recv(4096)
        d.close()
    socks = [connect(t) for _ in range(3)]
    for s in socks:
        s.sendall(b"lru_crawler metadump all\r\n")
    bodies = [read_until(s, b"", b"END\r\n")[0] for s in socks]
    good = all(check_once("abandon %d" % i, dump_keys(b), expect) for i, b in enumerate(bodies))
    v = connect(t)
    v.sendall(b"version\r\n")
    answered, _ = read_until(v, b"", b"\r\n")
    if good and answered.startswith(b"VERSION "):
        ok("abandon: 5 dumps closed half read, then 3 at once list the same %d keys; the server "
           "answers" % len(expect))
    elif not answered.startswith(b"VERSION "):
        fail("abandon: version answered %r" % answered)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
