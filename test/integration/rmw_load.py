#!/usr/bin/env python3
"""rmw_load.py - the read-modify-write commands memcached users count and
log with (incr, decr, append, prepend, gets + cas) through a kill.

  rmw_load.py --target HOST:PORT --seconds S --at T --cmd CMD
              [--threads N] [--keys K] [--prefix P] [--max-failed F]
              [--json FILE]

N threads (one pymemcache Client each, noreply=False) own K keys of each
kind and change them for S seconds; CMD (a shell command, the kill) runs T
seconds in.  Each thread counts, per key, the changes acknowledged and
the ones whose call failed (a failed call may or may not have been
applied: cocytus-proxy answers such a call "may have been applied" and
does not send it again).  At the end every key is read, and:

  counter (incr 1)     acknowledged <= value <= acknowledged + failed
  countdown (decr 1)   the same, counted down from START
  cas counter (gets, then cas value+1 with its token)
                       the same; EXISTS, which no other writer can cause
                       here, is counted apart (a cas token need not
                       survive a takeover) but must be rare
  log (append "<seq>,") every acknowledged token exactly once, a failed
                       one at most once, in the order sent
  stack (prepend)      the same, in the reverse order

Before the load, keys with a TTL: set with 3 s and touched to 100 s,
set with 100 s and touched to 3 s, set with 3 s and read with gat 100
(get-and-touch), set with 3 s.  At the end (S >= 4 seconds later) the
touched-up and gat ones must be there and the others gone: a TTL and its
changes travel with the key through a takeover and a rebuild, and an
expired key does not come back.

Also while running: an incr's or decr's reply must lie in the same
bounds (a counter never goes back), and no call may answer NOT_FOUND / NOT_STORED
for a key that was created (a lost key).  Prints the counts and the
longest time without a successful call after CMD; exits 1 on any
violation, when nothing succeeded after CMD, when CMD failed, or
(--max-failed) when more than F calls failed.
Exit 77 without pymemcache.
"""

import argparse
import json
import socket
import subprocess
import sys
import threading
import time

try:
    from pymemcache.client.base import Client
    from pymemcache import exceptions as pmexc
except ImportError:
    print("SKIP: pymemcache is not installed (apt-get install python3-pymemcache)")
    sys.exit(77)

START = 1000000          # a countdown's first value
KINDS = ("counter", "countdown", "cas", "log", "stack")


def target_of(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


class Key:
    """One key a thread owns: what it acknowledged and what may have applied."""

    def __init__(self, name, kind):
        self.name = name
        self.kind = kind
        self.acked = 0           # counters: changes acknowledged
        self.failed = 0          # counters: calls that failed
        self.tokens = []         # log/stack: (seq, acknowledged) in the order sent
        self.last_seen = None    # counter, countdown: changes applied, by the last reply


class Worker(threading.Thread):
    def __init__(self, addr, prefix, tid, stop_at, nkeys):
        super().__init__()
        self.addr = addr
        self.stop_at = stop_at
        self.keys = [Key("%s%d_%s_%d" % (prefix, tid, kind, i), kind)
                     for i in range(nkeys) for kind in KINDS]
        self.ok_times = []
        self.errors = []         # calls that failed (may have been applied)
        self.violations = []     # what must never happen
        self.cas_exists = 0
        self.calls = 0
        self.c = None

    def conn(self):
        if self.c is None:
            self.c = Client(self.addr, connect_timeout=5, timeout=10)
        return self.c

    def drop(self):
        if self.c is not None:
            self.c.close()
            self.c = None

    def create(self):
        c = self.conn()
        for k in self.keys:
            first = b"%d" % START if k.kind == "countdown" else b"0"
            if k.kind in ("log", "stack"):
                first = b""
            if not c.set(k.name, first, noreply=False):
                raise RuntimeError("set %s: not stored" % k.name)

    def failed_call(self, k, what, e):
        self.errors.append("%.3f %s %s: %s: %s" % (time.monotonic(), what, k.name,
                                                   type(e).__name__, e))
        self.drop()

    def step_arith(self, k):
        """incr a counter or decr a countdown by 1: its reply must lie in the
        bounds of the final check and never go back."""
        verb = "incr" if k.kind == "counter" else "decr"
        try:
            if verb == "incr":
                got = self.conn().incr(k.name, 1, noreply=False)
            else:
                got = self.conn().decr(k.name, 1, noreply=False)
        except (pmexc.MemcacheError, OSError) as e:
            k.failed += 1
            self.failed_call(k, verb, e)
            return
        if got is None:
            self.violations.append("%s %s: NOT_FOUND (acknowledged %d)" % (verb, k.name, k.acked))
            return
        k.acked += 1
        done = got if verb == "incr" else START - got
        if not k.acked <= done <= k.acked + k.failed:
            self.violations.append("%s %s returned %d: acknowledged %d, failed %d" %
                                   (verb, k.name, got, k.acked, k.failed))
        if k.last_seen is not None and done <= k.last_seen:
            self.violations.append("%s %s went back: %d changes after %d" %
                                   (verb, k.name, done, k.last_seen))
        k.last_seen = done
        self.ok_times.append(time.monotonic())

    def step_cas(self, k):
        c = self.conn()
        try:
            value, token = c.gets(k.name)
            if value is None:
                self.violations.append("gets %s: missing (acknowledged %d)" % (k.name, k.acked))
                return
            stored = c.cas(k.name, b"%d" % (int(value) + 1), token, noreply=False)
        except (pmexc.MemcacheError, OSError) as e:
            k.failed += 1           # counted even if the gets failed: an upper bound
            self.failed_call(k, "gets/cas", e)
            return
        if stored is None:
            self.violations.append("cas %s: NOT_FOUND" % k.name)
        elif not stored:
            self.cas_exists += 1
        else:
            k.acked += 1
            self.ok_times.append(time.monotonic())

    def step_list(self, k):
        seq = len(k.tokens)
        token = b"%d," % seq
        c = self.conn()
        try:
            if k.kind == "log":
                stored = c.append(k.name, token, noreply=False)
            else:
                stored = c.prepend(k.name, token, noreply=False)
        except (pmexc.MemcacheError, OSError) as e:
            k.tokens.append((seq, False))
            self.failed_call(k, k.kind == "log" and "append" or "prepend", e)
            return
        if not stored:
            self.violations.append("%s %s: NOT_STORED" % (k.kind, k.name))
            k.tokens.append((seq, False))
            return
        k.tokens.append((seq, True))
        self.ok_times.append(time.monotonic())

    def run(self):
        steps = {"counter": self.step_arith, "countdown": self.step_arith,
                 "cas": self.step_cas, "log": self.step_list, "stack": self.step_list}
        i = 0
        while time.monotonic() < self.stop_at:
            k = self.keys[i % len(self.keys)]
            i += 1
            self.calls += 1
            steps[k.kind](k)
        self.drop()


def check_counter(k, got):
    """The final value of a counter-like key, or a violation."""
    if got is None:
        return "%s: missing (acknowledged %d)" % (k.name, k.acked)
    try:
        v = int(got)
    except ValueError:
        return "%s: not a number: %r" % (k.name, got)
    done = START - v if k.kind == "countdown" else v
    if k.acked <= done <= k.acked + k.failed:
        return None
    return "%s: %d changes applied, acknowledged %d, failed %d" % (k.name, done,
                                                                   k.acked, k.failed)


def check_list(k, got):
    """Every acknowledged token once, a failed one at most once, in order."""
    if got is None:
        return "%s: missing (%d tokens)" % (k.name, len(k.tokens))
    parts = [p for p in got.split(b",") if p != b""]
    try:
        seqs = [int(p) for p in parts]
    except ValueError:
        return "%s: not a list of tokens: %r" % (k.name, got[:80])
    if k.kind == "stack":
        seqs.reverse()
    if seqs != sorted(set(seqs)):
        return "%s: tokens repeated or out of order: %r" % (k.name, got[:80])
    have = set(seqs)
    sent = dict(k.tokens)
    stray = [s for s in seqs if s not in sent]
    if stray:
        return "%s: tokens never sent: %r" % (k.name, stray[:5])
    missing = [s for s, acked in k.tokens if acked and s not in have]
    if missing:
        return "%s: acknowledged tokens missing: %r" % (k.name, missing[:5])
    return None


TTL_KEYS = 100
# name, the TTL it is set with, how it is then changed, present at the end
TTL_KINDS = (("ttl_up", 3, "touch 100", True), ("ttl_down", 100, "touch 3", False),
             ("ttl_gat", 3, "gat 100", True), ("ttl_short", 3, None, False))


def ttl_setup(addr, prefix):
    """The TTL keys (above); gat has no call in pymemcache 3.5, so the text protocol."""
    c = Client(addr, connect_timeout=5, timeout=10)
    sock = socket.create_connection(addr, timeout=10)
    try:
        for name, ttl, change, _ in TTL_KINDS:
            for i in range(TTL_KEYS):
                key = "%s%s_%d" % (prefix, name, i)
                if not c.set(key, b"v", expire=ttl, noreply=False):
                    raise RuntimeError("set %s: not stored" % key)
                if change is None:
                    continue
                verb, secs = change.split()
                if verb == "touch":
                    if not c.touch(key, int(secs), noreply=False):
                        raise RuntimeError("touch %s: not found" % key)
                    continue
                sock.sendall(b"gat %s %s\r\n" % (secs.encode(), key.encode()))
                reply = b""
                while not reply.endswith(b"END\r\n") and b"ERROR" not in reply:
                    more = sock.recv(4096)
                    if not more:
                        break
                    reply += more
                if not reply.startswith(b"VALUE %s " % key.encode()):
                    raise RuntimeError("gat %s: %r" % (key, reply[:80]))
    finally:
        c.close()
        sock.close()


def ttl_check(c, prefix):
    bad = []
    for name, _, change, live in TTL_KINDS:
        keys = ["%s%s_%d" % (prefix, name, i) for i in range(TTL_KEYS)]
        got = c.get_many(keys)
        if live and len(got) != len(keys):
            bad.append("%s (%s): %d of %d keys gone" % (name, change or "unchanged",
                                                        len(keys) - len(got), len(keys)))
        if not live and got:
            bad.append("%s (%s): %d of %d keys expired, yet there" %
                       (name, change or "unchanged", len(got), len(keys)))
    return bad


def final_check(addr, prefix, workers):
    c = Client(addr, connect_timeout=5, timeout=10)
    bad, checked = [], 0
    for w in workers:
        for k in w.keys:
            checked += 1
            try:
                got = c.get(k.name)
            except (pmexc.MemcacheError, OSError) as e:
                bad.append("%s: read failed: %s" % (k.name, e))
                c.close()
                continue
            why = (check_list if k.kind in ("log", "stack") else check_counter)(k, got)
            if why:
                bad.append(why)
    try:
        bad += ttl_check(c, prefix)
    except (pmexc.MemcacheError, OSError) as e:
        bad.append("TTL keys: read failed: %s" % e)
    c.close()
    return checked, bad


def longest_gap(workers, since):
    times = sorted(t for w in workers for t in w.ok_times if t >= since)
    gap, prev = 0.0, since
    for t in times:
        gap = max(gap, t - prev)
        prev = t
    return len(times), gap


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--at", type=float, default=3)
    ap.add_argument("--cmd", required=True)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--keys", type=int, default=20)
    ap.add_argument("--prefix", default="rmw",
                    help="of every key: loads run side by side need different ones")
    ap.add_argument("--max-failed", type=int)
    ap.add_argument("--json")
    args = ap.parse_args()

    addr = target_of(args.target)
    start = time.monotonic()
    if args.seconds < 4:
        ap.error("--seconds must be at least 4 (the TTL keys' 3 s must pass)")
    ttl_setup(addr, args.prefix)
    workers = [Worker(addr, args.prefix, t, start + args.seconds, args.keys)
               for t in range(args.threads)]
    for w in workers:
        w.create()
        w.drop()
    for w in workers:
        w.start()
    time.sleep(args.at)
    cmd_at = time.monotonic()
    cmd = subprocess.run(args.cmd, shell=True, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    print("command at %.1f s: %s (exit %d)" % (cmd_at - start, cmd.stdout.strip(),
                                              cmd.returncode))
    for w in workers:
        w.join()

    checked, bad = final_check(addr, args.prefix, workers)
    after, gap = longest_gap(workers, cmd_at)
    keys = [k for w in workers for k in w.keys]
    result = {
        "calls": sum(w.calls for w in workers),
        "acknowledged": sum(k.acked for k in keys) +
        sum(1 for k in keys for _, a in k.tokens if a),
        "failed_calls": sum(len(w.errors) for w in workers),
        "cas_exists": sum(w.cas_exists for w in workers),
        "keys_checked": checked,
        "violations": sum(len(w.violations) for w in workers) + len(bad),
        "ok_after_cmd": after,
        "longest_gap_after_cmd_ms": round(gap * 1000),
    }
    print("rmw load: " + " ".join("%s %s" % kv for kv in result.items()))
    for w in workers:
        for e in w.errors[:3] + w.violations[:5]:
            print("  " + e)
    for e in bad[:10]:
        print("  " + e)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
    failed = result["violations"] or not after or cmd.returncode != 0
    # EXISTS without a rival writer: at most the calls around a takeover
    if result["cas_exists"] > max(10, result["failed_calls"] * 2):
        print("FAIL: %d cas calls answered EXISTS with no other writer" % result["cas_exists"])
        failed = True
    if args.max_failed is not None and result["failed_calls"] > args.max_failed:
        print("FAIL: %d calls failed, at most %d allowed" % (result["failed_calls"],
                                                          args.max_failed))
        failed = True
    if cmd.returncode != 0:
        print("FAIL: the command failed (exit %d)" % cmd.returncode)
    if not after:
        print("FAIL: no call succeeded after the command")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
