#!/usr/bin/env python3
"""pymemcache_client.py - pymemcache, a client memcached users run, against
a target.

  pymemcache_client.py api --target HOST:PORT [--memcached PATH]
      The calls an application makes (set/get/get_many/gets/cas/add/
      replace/append/prepend/incr/decr/touch/delete/delete_many/set_many,
      flags, a 1 MB value and one too large, expiry, keys pymemcache
      refuses, version, flush_all) against a reference memcached started
      here and against the target: the results must be equal, cas tokens
      aside (only their type is compared).

  pymemcache_client.py load --target HOST:PORT --seconds S --kill-at T
                            --kill-cmd CMD [--threads N] [--json FILE]
                            [--max-errors E] [--tls-ca FILE]
      N threads (one pymemcache Client each) write and read back their keys
      with noreply=False for S seconds; CMD (a shell command) runs T
      seconds in.  Then every key is read: its value must be the last one
      a set acknowledged, or one written after it whose set failed (an
      unacknowledged write may or may not have been applied).  Prints the
      counts and the longest time without a successful operation after the
      kill; exits 1 when an acknowledged write is lost, a read returned
      another key's or an older value, nothing succeeded after the kill,
      or (--max-errors) more than E calls failed.

Exit status 0 good, 1 a failure (shown), 77 without pymemcache.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from meta_check import start_memcached  # noqa: E402  (a reference memcached on a free port)

try:
    from pymemcache.client.base import Client
    from pymemcache import exceptions as pmexc
except ImportError:
    print("SKIP: pymemcache is not installed (apt-get install python3-pymemcache)")
    sys.exit(77)


def target_of(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


TLS_CONTEXT = None     # load --tls-ca: the clients speak TLS (cocytus-proxy --tls-cert)


def client(addr):
    return Client(addr, connect_timeout=5, timeout=10, tls_context=TLS_CONTEXT)


# ---- api ----

def api_results(addr, prefix):
    c = client(addr)
    out = []

    def k(name):
        return prefix + name

    def r(name, f):
        try:
            v = f()
        except pmexc.MemcacheError as e:
            v = "%s: %s" % (type(e).__name__, e)
        out.append((name, v))

    def cas_flow():
        v, token = c.gets(k("c"))
        first = c.cas(k("c"), b"v2", token, noreply=False)
        again = c.cas(k("c"), b"v3", token, noreply=False)
        return (v, type(token).__name__, first, again, c.get(k("c")))

    big = b"y" * (1024 * 1024 - 512)
    r("set", lambda: c.set(k("a"), b"v1", noreply=False))
    r("set default noreply", lambda: c.set(k("b"), b"v2"))
    r("get after noreply", lambda: c.get(k("b")))
    r("get missing", lambda: c.get(k("none")))
    r("get_many", lambda: sorted(c.get_many([k("a"), k("b"), k("none")]).items()))
    r("set for cas", lambda: c.set(k("c"), b"v1", noreply=False))
    r("gets/cas", cas_flow)
    r("cas missing", lambda: c.cas(k("none"), b"x", b"1", noreply=False))
    r("add", lambda: (c.add(k("a"), b"z", noreply=False), c.add(k("d"), b"z", noreply=False)))
    r("replace", lambda: (c.replace(k("none"), b"z", noreply=False),
                          c.replace(k("d"), b"zz", noreply=False), c.get(k("d"))))
    r("append/prepend", lambda: (c.append(k("d"), b"A", noreply=False),
                                 c.prepend(k("d"), b"P", noreply=False), c.get(k("d")),
                                 c.append(k("none"), b"A", noreply=False)))
    r("incr/decr", lambda: (c.set(k("n"), b"10", noreply=False), c.incr(k("n"), 5),
                            c.decr(k("n"), 100), c.incr(k("none"), 1)))
    r("incr non-number", lambda: c.incr(k("a"), 1))
    r("incr wraps", lambda: (c.set(k("w"), b"18446744073709551615", noreply=False),
                             c.incr(k("w"), 1)))
    r("touch", lambda: (c.touch(k("a"), 100, noreply=False),
                        c.touch(k("none"), 100, noreply=False)))
    r("delete", lambda: (c.delete(k("b"), noreply=False), c.delete(k("b"), noreply=False),
                         c.get(k("b"))))
    r("set_many", lambda: (c.set_many({k("m%d" % i): b"x" * i for i in range(40)},
                                      noreply=False),
                           sorted(c.get_many([k("m%d" % i) for i in range(40)]).items())))
    r("delete_many", lambda: (c.delete_many([k("m1"), k("m2"), k("none")], noreply=False),
                              sorted(c.get_many([k("m1"), k("m2"), k("m3")]).items())))
    r("flags", lambda: (c.set(k("f"), b"v", noreply=False, flags=12345), c.get(k("f"))))
    r("1 MB value", lambda: (c.set(k("big"), big, noreply=False), c.get(k("big")) == big))
    r("too large", lambda: c.set(k("big2"), b"z" * (2 * 1024 * 1024), noreply=False))
    r("big kept", lambda: c.get(k("big")) == big)
    r("expiry", lambda: (c.set(k("e"), b"v", expire=2, noreply=False), c.get(k("e")),
                         time.sleep(3.2), c.get(k("e"))))
    r("key with space", lambda: c.set(k("bad key"), b"v", noreply=False))
    r("key too long", lambda: c.set("k" * 251, b"v", noreply=False))
    r("version", lambda: type(c.version()).__name__)
    r("flush_all", lambda: (c.flush_all(noreply=False), c.get(k("a"))))
    c.close()
    return out


def run_api(args):
    if not os.access(args.memcached, os.X_OK):
        print("SKIP: no memcached to compare with (apt-get install memcached)")
        return 77
    prefix = "pm%d_" % os.getpid()
    proc, port = start_memcached(args.memcached)
    try:
        want = api_results(("127.0.0.1", port), prefix)
    finally:
        proc.terminate()
        proc.wait()
    got = api_results(target_of(args.target), prefix)
    bad = [(w, g) for w, g in zip(want, got) if w != g]
    if not bad and len(want) == len(got):
        print("ok: pymemcache: %d calls answered as memcached's" % len(want))
        return 0
    print("FAIL: pymemcache calls differ from memcached's:")
    for w, g in bad:
        print("  %s: memcached %r" % (w[0], w[1]))
        print("  %s: target    %r" % (g[0], g[1]))
    return 1


# ---- load ----

class Worker(threading.Thread):
    def __init__(self, addr, tid, stop_at, keys_per_thread):
        super().__init__()
        self.addr = addr
        self.tid = tid
        self.stop_at = stop_at
        self.nkeys = keys_per_thread
        self.acked = {}        # key -> last acknowledged value
        self.maybe = {}        # key -> values written after it, not acknowledged
        self.ok_times = []     # monotonic times of successful operations
        self.errors = []
        self.wrong_reads = []
        self.acks = 0

    def run(self):
        c = client(self.addr)
        i = 0
        while time.monotonic() < self.stop_at:
            key = "pl%d_%d" % (self.tid, i % self.nkeys)
            value = ("%d:%d:" % (self.tid, i)).encode() * 8
            i += 1
            try:
                stored = c.set(key, value, noreply=False)
            except (pmexc.MemcacheError, OSError) as e:
                self.errors.append("%.3f set %s: %s: %s" % (time.monotonic(), key,
                                                            type(e).__name__, e))
                self.maybe.setdefault(key, set()).add(value)
                c.close()
                continue
            if not stored:
                self.errors.append("set %s: not stored" % key)
                continue
            self.acks += 1
            self.acked[key] = value
            self.maybe.pop(key, None)
            self.ok_times.append(time.monotonic())
            try:
                got = c.get(key)
            except (pmexc.MemcacheError, OSError) as e:
                self.errors.append("%.3f get %s: %s: %s" % (time.monotonic(), key,
                                                            type(e).__name__, e))
                c.close()
                continue
            self.ok_times.append(time.monotonic())
            if got != value:
                self.wrong_reads.append("get %s right after its set: %r" % (key, got))
        c.close()


def run_load(args):
    addr = target_of(args.target)
    start = time.monotonic()
    stop_at = start + args.seconds
    workers = [Worker(addr, t, stop_at, args.keys) for t in range(args.threads)]
    for w in workers:
        w.start()
    time.sleep(args.kill_at)
    killed_at = time.monotonic()
    kill = subprocess.run(args.kill_cmd, shell=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    print("kill at %.1f s: %s (exit %d)" % (killed_at - start, kill.stdout.strip(),
                                           kill.returncode))
    for w in workers:
        w.join()

    # every key: the last acknowledged value, or a later unacknowledged one
    c = client(addr)
    lost, stale, checked = [], [], 0
    for w in workers:
        for key, value in w.acked.items():
            checked += 1
            try:
                got = c.get(key)
            except (pmexc.MemcacheError, OSError) as e:
                lost.append("%s: read failed: %s" % (key, e))
                continue
            if got == value or got in w.maybe.get(key, ()):
                continue
            (lost if got is None else stale).append("%s: %r, acknowledged %r" %
                                                    (key, got, value))
    c.close()

    times = sorted(t for w in workers for t in w.ok_times)
    after = [t for t in times if t >= killed_at]
    gap, prev = 0.0, killed_at
    for t in after:
        gap = max(gap, t - prev)
        prev = t
    result = {
        "acknowledged": sum(w.acks for w in workers),
        "keys_checked": checked,
        "client_errors": sum(len(w.errors) for w in workers),
        "wrong_reads": sum(len(w.wrong_reads) for w in workers),
        "lost": len(lost),
        "stale": len(stale),
        "ops_after_kill": len(after),
        "longest_gap_after_kill_ms": round(gap * 1000),
    }
    print("pymemcache load: " + " ".join("%s %s" % kv for kv in result.items()))
    for w in workers:
        for e in w.errors[:3] + w.wrong_reads[:3]:
            print("  " + e)
    for e in (lost + stale)[:10]:
        print("  " + e)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
    if kill.returncode != 0:
        print("FAIL: the kill command failed (exit %d)" % kill.returncode)
    too_many = args.max_errors is not None and result["client_errors"] > args.max_errors
    if too_many:
        print("FAIL: %d calls failed, at most %d allowed" % (result["client_errors"],
                                                          args.max_errors))
    failed = (result["lost"] or result["stale"] or result["wrong_reads"] or not after
              or kill.returncode != 0 or too_many)
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("api")
    a.add_argument("--target", required=True)
    a.add_argument("--memcached", default=os.environ.get("MEMCACHED") or
                   shutil.which("memcached") or "/usr/bin/memcached")
    lo = sub.add_parser("load")
    lo.add_argument("--target", required=True)
    lo.add_argument("--seconds", type=float, default=10)
    lo.add_argument("--kill-at", type=float, default=3)
    lo.add_argument("--kill-cmd", required=True)
    lo.add_argument("--threads", type=int, default=4)
    lo.add_argument("--keys", type=int, default=2000)
    lo.add_argument("--json")
    lo.add_argument("--max-errors", type=int)
    lo.add_argument("--tls-ca", help="connect with TLS, trusting this CA file")
    args = ap.parse_args()
    if getattr(args, "tls_ca", None):
        import ssl
        global TLS_CONTEXT
        TLS_CONTEXT = ssl.create_default_context(cafile=args.tls_ca)
    return run_api(args) if args.cmd == "api" else run_load(args)


if __name__ == "__main__":
    sys.exit(main())
