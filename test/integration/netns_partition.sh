#!/usr/bin/env bash
# netns_partition.sh - the multi-host run (scripts/netns-cluster): the
# default cluster as 5 hosts in network namespaces with ZooKeeper and the
# proxy in two more, then the partition drill: node 2 is cut off from the
# others, ZooKeeper and the proxy for 6 s while a writer on its own host
# keeps setting keys on its data process.  Must end with no acknowledged
# write lost, nothing the cut-off process acknowledged during the cut
# (there must be nothing) contradicted, every group healthy again and
# cocytus-cli verify clean.  Then the same with the leading coordinator's
# host cut off (below), then node 2's host replaced by a spare: its
# host is gone for good, and a new host with a new address takes its name
# (the cluster file names hosts; the peers, the proxy and the checks must
# find the new address by that name), node 3's with the spare up before
# the silence was noticed, node 4's while its old host is only cut off
# and comes back (and node 3's again, with a new leading coordinator
# when it comes back), and last node 2's again while no host's name
# server answers: the servers and the proxy must go on serving while they
# look its name up (the build before stalled the proxy 3 s a lookup),
# and the same on the standby coordinator's host with the spare 5 s
# later.
# Skipped (77) without root, network namespaces, ZooKeeper or a build
# with libzookeeper.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$build_dir/bench/drill-writer" "$build_dir/client/cocytus-cli" \
    "$build_dir/client/cocytus-proxy" "$build_dir/cocytus/cocytus-node"
netns=$top_srcdir/scripts/netns-cluster
dir=$(mktemp -d "${TMPDIR:-/tmp}/netns_partition.XXXXXX")
cleanup() {
    bash "$netns" down --dir "$dir" >/dev/null 2>&1
    rm -rf "$dir"
}
on_exit cleanup

out=$(bash "$netns" up --dir "$dir" 2>&1)
rc=$?
out_up=$out
if [ $rc -eq 77 ]; then
    echo "SKIP: ${out##*cannot run here: }"
    exit 77
fi
if [ $rc -ne 0 ]; then
    printf '%s\n' "$out" | tail -20
    fail "netns-cluster up exited $rc"
    finish
fi
ok "$(printf '%s\n' "$out" | tail -1)"
if grep -q '127\.0\.0\.1' "$dir/cluster.conf" "$dir/endpoints"; then
    fail "the multi-host cluster file or endpoints name 127.0.0.1"
fi

out=$(bash "$netns" drill --kind partition --node 2 --seconds 10 --cut-ms 6000 --dir "$dir" 2>&1)
rc=$?
line=$(printf '%s\n' "$out" | grep '^netns drill partition')
if [ $rc -ne 0 ] || [ -z "$line" ]; then
    printf '%s\n' "$out" | tail -20
    for f in "$dir"/coordinator*.log; do
        [ -f "$f" ] && { echo "--- $f"; grep -v ZOO_ "$f" | tail -20; }
    done
    fail "partition drill exited $rc: ${line:-no result line}"
else
    case $line in
        *"cutoff_stored 0, "*) ok "$line" ;;
        *) fail "a cut-off process acknowledged writes during the cut: $line" ;;
    esac
fi
# Then the leading coordinator's host is cut off for 6 s: the other
# coordinator is elected once the leader's ZooKeeper session expires, and
# never hears from the 5 processes of that host.  Their peers' links to
# them are up but carry no keepalive any more: the new leader must declare
# them dead on the peers' word (coord_lost.c), before its 3 s startup
# grace ends.
leader=$(printf '%s\n' "$out_up" | sed -n 's/.* coordinator [^ ]*-n\([0-9]*\):[0-9]* leads.*/\1/p')
[ -n "$leader" ] || fail "no leading coordinator in: $out_up"
leader_node=${leader:-0}
before=$(cat "$dir"/coordinator*.log | grep -c "report their links to it down")
out=$(bash "$netns" drill --kind partition --node "$leader_node" --seconds 10 --cut-ms 6000 \
    --dir "$dir" 2>&1)
rc=$?
line=$(printf '%s\n' "$out" | grep '^netns drill partition')
if [ -z "$leader" ] || [ $rc -ne 0 ] || [ -z "$line" ]; then
    printf '%s\n' "$out" | tail -20
    fail "partition drill of the leader's host (node $leader_node) exited $rc: ${line:-no result line}"
else
    case $line in
        *"cutoff_stored 0, "*) ok "leader's host: $line" ;;
        *) fail "a cut-off process acknowledged writes during the cut: $line" ;;
    esac
fi
after=$(cat "$dir"/coordinator*.log | grep -c "report their links to it down")
if [ $((after - before)) = 5 ]; then
    ok "the leader's host's 5 processes were found dead from their peers' silent links"
else
    grep -h " dead: " "$dir"/coordinator*.log | tail -n 10
    fail "$((after - before)) of the leader's host's 5 processes were found dead from their peers' links"
fi

# replace LABEL NODE [drill options...]: a replace drill of NODE's host;
# on a failure the drill's end, the proxy's and the coordinators' lines.
replace() {
    local label=$1 node=$2 out rc line
    shift 2
    out=$(bash "$netns" drill --kind replace --node "$node" --seconds 10 --dir "$dir" "$@" 2>&1)
    rc=$?
    line=$(printf '%s\n' "$out" | grep '^netns drill replace')
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        printf '%s\n' "$out" | tail -n 70
        tail -n 10 "$dir/proxy.log"
        grep -h "says hello\|restarted\|n$node:" "$dir"/coordinator*.log | tail -n 12
        fail "replace drill ($label) exited $rc: ${line:-no result line}"
    else
        ok "$label: $line"
        # Slow to full redundancy (seen in CI, not here): say where the
        # time went, from the coordinators' view of this drill.
        local healthy_ms=${line##*healthy_ms }
        healthy_ms=${healthy_ms%%,*}
        if [ "${healthy_ms:-0}" -gt 10000 ] 2>/dev/null; then
            echo "healthy only after $healthy_ms ms; the drill's timeline (ms after the fault):"
            cat "$dir/drill-timeline" 2>/dev/null
            local f
            for f in "$dir"/coordinator*.log; do
                echo "-- the last 25 lines of $(basename "$f") (the node's coordinator; its spare's too)"
                tail -n 25 "$f" | cut -c1-200
            done
        fi
    fi
}

# Node 2's host is replaced by a spare with another address under its name.
replace "spare once served" 2
grep -q '^node 2 [0-9]' "$dir/cluster.conf" && fail "the cluster file gives node 2 an address, not a name"
# And node 3's, with the spare up at once: its processes say hello before
# the coordinator noticed their predecessors' silence.  It must take them
# for new processes (the predecessors dead), not for the same ones: the
# build before had them in their groups' ack sets, empty, and writes hung.
before=$(cat "$dir"/coordinator*.log | grep -c "says hello in its place")
replace "spare at once" 3 --spare-ms 0
n=$(( $(cat "$dir"/coordinator*.log | grep -c "says hello in its place") - before ))
# On a machine loaded enough that the spare's processes start more than
# 1.5 s after the fault, the deaths are seen first and the drill takes
# the usual path: said, not failed (the drill itself must pass anyway).
if [ "$n" -ge 1 ]; then
    ok "$n process(es) of node 3 replaced before their silence was noticed"
else
    echo "note: node 3's spare said hello only after its predecessors' silence was noticed" \
        "(a loaded machine); the successor-first path was not exercised this time"
fi
# Then node 4's host is only cut off when the spare replaces it, and
# comes back: its processes, declared dead, must be told to exit rather
# than take their places back from the spare's (the build before had no
# word for it), and they cannot start again (the name is the spare's).
replace "old host back" 4 --old-back-ms 1000
# And node 3's old host back after the leading coordinator was killed: the
# one that leads then must tell the old processes to exit as well (it reads
# the incarnations declared dead from the saved state).  The build before
# did not know them: each old process displaced its successor, which was
# declared dead and rebuilt, and only then was the old one told to exit.
replace "old host back, new leader" 3 --old-back-ms 1000 --leader killed
# Last, node 2's host (the spare of the first drill) again, with every
# host asking a name server that never answers while the name is gone
# (each lookup of it takes 3-6 s).  The drill's probe (a get of another
# node's key through the proxy every 100 ms) must never wait 1.5 s, and
# the proxy must find the spare by name.  The build before looked names
# up on the proxy's loop: the probe waited 3 s.
replace "name server silent" 2 --dns silent
# Then the host of the coordinator that does not lead, the spare started
# 5 s after the fault.  Every server's coordinator link redials that
# coordinator meanwhile (cc88e12 looked names up on the servers' loops:
# each redial stopped its server for 3 s and the leader declared all 25
# processes dead, DATA LOSS in every group).  And the proxy must reach the
# spare's servers at once: its check through the proxy read nothing back
# in 5 s in three of five CI passes before e2f8ef7 (lookups that failed
# after the name was back postponed the next one; idle connections to the
# old address timed out first).  docs/operations.md, "A name server that
# does not answer".
standby=0
case $(cat "$dir/coordinator" 2>/dev/null) in *-n0:*) standby=1 ;; esac
replace "name server silent, a coordinator's host" "$standby" --dns silent --spare-ms 5000
if cat "$dir"/coordinator*.log | grep -q "DATA LOSS"; then
    grep -h "DATA LOSS\|no heartbeat" "$dir"/coordinator*.log | tail -n 8
    fail "a group lost data while a name did not resolve"
fi

bad=$(grep -l -E "AddressSanitizer|LeakSanitizer|runtime error" "$dir"/*.log 2>/dev/null)
[ -z "$bad" ] || { grep -h -A 20 -E "AddressSanitizer|LeakSanitizer|runtime error" $bad | head -60;
                   fail "sanitizer report in $bad"; }
finish
