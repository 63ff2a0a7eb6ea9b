#!/usr/bin/env python3
"""lost_keys.py - the keys of lost_group.sh, in memcached's text protocol.

  fill ADDR PREFIX N            store PREFIX0..PREFIX<N-1> (value "v<i>-PREFIX")
  delete ADDR PREFIX N          delete them (DELETED or NOT_FOUND, else exit 1)
  owners PREFIX N ADDR...       print "KEY ADDR" for the address that holds
                                each key (a direct get that hits), or "KEY -"
  check ADDR PREFIX N           get every key: print "hits H misses M" and
                                exit 1 on a wrong value or any other reply
  count OWNERS ADDR PREFIX N    like check, but per owner: "ADDR hits H misses M"

Only the standard library; every socket wait is bounded (10 s)."""
import socket
import sys


def connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    return s, s.makefile("rb")


def value_of(prefix, i):
    return b"v%d-%s" % (i, prefix.encode())


def get(s, f, key):
    s.sendall(b"get " + key + b"\r\n")
    line = f.readline()
    if line == b"END\r\n":
        return None
    if not line.startswith(b"VALUE "):
        raise RuntimeError("get %s: %r" % (key.decode(), line))
    n = int(line.split()[3])
    data = f.read(n + 2)[:n]
    end = f.readline()
    if end != b"END\r\n":
        raise RuntimeError("get %s: no END: %r" % (key.decode(), end))
    return data


def fill(addr, prefix, n):
    s, f = connect(addr)
    for i in range(n):
        v = value_of(prefix, i)
        s.sendall(b"set %s%d 0 0 %d\r\n%s\r\n" % (prefix.encode(), i, len(v), v))
        line = f.readline()
        if line != b"STORED\r\n":
            print("set %s%d: %r" % (prefix, i, line))
            return 1
    print("stored %d keys" % n)
    return 0


def delete(addr, prefix, n):
    s, f = connect(addr)
    for i in range(n):
        s.sendall(b"delete %s%d\r\n" % (prefix.encode(), i))
        line = f.readline()
        if line not in (b"DELETED\r\n", b"NOT_FOUND\r\n"):
            print("delete %s%d: %r" % (prefix, i, line))
            return 1
    print("deleted %d keys" % n)
    return 0


def owners(prefix, n, addrs):
    conns = [connect(a) for a in addrs]
    for i in range(n):
        key = b"%s%d" % (prefix.encode(), i)
        owner = "-"
        for a, (s, f) in zip(addrs, conns):
            s.sendall(b"get " + key + b"\r\n")
            line = f.readline()
            if line.startswith(b"VALUE "):
                f.read(int(line.split()[3]) + 2)
                f.readline()
                owner = a
                break
            # a miss (END) or a MOVED line: not there
        print(key.decode(), owner)
    return 0


def check(addr, prefix, n, owner_of=None):
    s, f = connect(addr)
    tally = {}
    for i in range(n):
        key = b"%s%d" % (prefix.encode(), i)
        try:
            got = get(s, f, key)
        except RuntimeError as e:
            print(e)
            return 1
        if got is not None and got != value_of(prefix, i):
            print("get %s: wrong value %r" % (key.decode(), got))
            return 1
        who = owner_of.get(key.decode(), "-") if owner_of is not None else "all"
        t = tally.setdefault(who, [0, 0])
        t[0 if got is not None else 1] += 1
    for who in sorted(tally):
        print("%s hits %d misses %d" % (who, tally[who][0], tally[who][1]))
    return 0


def main(argv):
    if len(argv) >= 4 and argv[0] == "fill":
        return fill(argv[1], argv[2], int(argv[3]))
    if len(argv) == 4 and argv[0] == "delete":
        return delete(argv[1], argv[2], int(argv[3]))
    if len(argv) >= 4 and argv[0] == "owners":
        return owners(argv[1], int(argv[2]), argv[3:])
    if len(argv) == 4 and argv[0] == "check":
        return check(argv[1], argv[2], int(argv[3]))
    if len(argv) == 5 and argv[0] == "count":
        owner_of = {}
        with open(argv[1]) as fh:
            for line in fh:
                k, o = line.split()
                owner_of[k] = o
        return check(argv[2], argv[3], int(argv[4]), owner_of)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
