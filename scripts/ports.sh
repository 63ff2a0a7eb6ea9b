# ports.sh - sourced by the drills (drill-rs, drill-soak) and the
# integration tests (test/integration/lib.sh): ports no concurrent run takes.
#
# make check runs drills and cluster tests side by side, and they kill
# processes.  A port freed by a kill could be taken by another test's
# cluster, whose processes the first test's clients and checks would then
# reach (seen in CI: "authentication refused" from another cluster's
# processes, reads answered from the wrong cluster).  Ports are held in
# buckets of 100: a lock directory per bucket, holding the owner's pid,
# keeps concurrent runs apart; a bucket whose owner is gone is taken over.

ports_locks=""

# take_over_stale LOCK: removes LOCK if the run holding it is gone (its pid
# dead, or no pid written a minute after it was made).  One run at a time
# does this (a takeover lock, itself dropped when older than 10 s): two
# runs that both saw the dead owner must not remove the lock the first of
# them has made again since.
take_over_stale() {
    local lock=$1 mutex="${TMPDIR:-/tmp}/cocytus-ports.takeover" owner
    if ! mkdir "$mutex" 2>/dev/null; then
        [ -n "$(find "$mutex" -maxdepth 0 -mmin +0.17 2>/dev/null)" ] && rmdir "$mutex" 2>/dev/null
        return 0
    fi
    owner=$(cat "$lock/pid" 2>/dev/null)
    if [ -n "$owner" ]; then
        kill -0 "$owner" 2>/dev/null || rm -rf "$lock"
    elif [ -n "$(find "$lock" -maxdepth 0 -mmin +1 2>/dev/null)" ]; then
        rm -rf "$lock"      # made, but its maker died before writing its pid
    fi
    rmdir "$mutex" 2>/dev/null
    return 0
}

# reserve_ports BASE COUNT: holds every bucket of 100 ports that
# [BASE, BASE+COUNT) touches, for this shell's process ($$), until
# release_port_blocks (or release_ports); false, holding none of them, when
# a live run holds one.  The held lock directories are added to ports_locks
# and listed in ports_taken.
reserve_ports() {
    local base=$1 count=$2 b lock
    ports_taken=""
    for ((b = base / 100; b <= (base + count - 1) / 100; b++)); do
        lock="${TMPDIR:-/tmp}/cocytus-ports.$((b * 100))"
        if ! mkdir "$lock" 2>/dev/null; then
            take_over_stale "$lock"
            if ! mkdir "$lock" 2>/dev/null; then
                release_ports "$ports_taken"
                ports_taken=""
                return 1
            fi
        fi
        echo "$$" >"$lock/pid"
        ports_taken="$ports_taken $lock"
    done
    ports_locks="$ports_locks $ports_taken"
    return 0
}

# release_ports LOCKS: gives back the lock directories LOCKS (a list from
# ports_taken) if this process still holds them.
release_ports() {
    local lock
    for lock in $1; do
        [ "$(cat "$lock/pid" 2>/dev/null)" = "$$" ] && rm -rf "$lock"
    done
    return 0
}

# reserve_port_block: sets ports_base to a free block (24000-31900, a
# multiple of 100) held until release_port_blocks; false if none is free.
reserve_port_block() {
    local base
    for _ in $(seq 400); do
        base=$((24000 + (RANDOM % 80) * 100))
        if reserve_ports "$base" 100; then
            ports_base=$base
            return 0
        fi
    done
    return 1
}

# release_port_blocks: gives back every bucket this run holds.
release_port_blocks() {
    release_ports "$ports_locks"
    ports_locks=""
}
