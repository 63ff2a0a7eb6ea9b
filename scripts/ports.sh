# ports.sh - sourced by the drills (drill-rs, drill-soak): blocks of 100
# ports of their own.
#
# make check runs drill_rs.sh and soak.sh side by side, and both kill
# processes.  A port freed by a kill could be taken by the other drill's
# cluster, whose processes the first drill's clients and checks would then
# reach (seen in CI: "authentication refused" from another cluster's
# processes, reads answered from the wrong cluster).  A lock directory per
# block, holding the owner's pid, keeps concurrent drills apart; a block
# whose owner is gone is taken over.

ports_locks=""

# reserve_port_block: sets ports_base to a free block (24000-31900, a
# multiple of 100) held until release_port_blocks; false if none is free.
reserve_port_block() {
    local base lock owner
    for _ in $(seq 400); do
        base=$((24000 + (RANDOM % 80) * 100))
        lock="${TMPDIR:-/tmp}/cocytus-drill-ports.$base"
        if mkdir "$lock" 2>/dev/null; then
            echo "$$" >"$lock/pid"
            ports_base=$base
            ports_locks="$ports_locks $lock"
            return 0
        fi
        owner=$(cat "$lock/pid" 2>/dev/null)
        if [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null; then
            rm -rf "$lock"     # its drill is gone
        fi
    done
    return 1
}

# release_port_blocks: gives back every block this drill holds.
release_port_blocks() {
    local lock
    for lock in $ports_locks; do
        rm -rf "$lock"
    done
    ports_locks=""
}
