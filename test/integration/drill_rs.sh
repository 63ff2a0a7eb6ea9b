#!/usr/bin/env bash
# drill_rs.sh - make-check run of the RS kill drills (scripts/drill rs,
# docs/recovery.md): on the default cluster (5 nodes, RS(3,5), coordinator,
# proxy), under a verified load through the proxy, SIGKILL to a data
# process, to a parity process, and to two data processes of one group;
# then a data process killed 50 ms after the coordinator (--leader-first):
# the coordinator, started again by its node on its state file, must see
# from the saved pid that the process came back empty, and take it over;
# and a whole node killed 50 ms after the coordinator (nothing on it comes
# back): the restarted coordinator never hears from those processes, and
# must declare them dead on their peers' word that their links are down
# (coord_lost.c), not only when its 3 s startup grace ends; and a data
# process stopped (SIGSTOP, 3 s) 50 ms after the coordinator: its links
# stay up but carry no keepalive, so its peers report it silent, and the
# coordinator must declare it dead before the grace ends (it would
# otherwise wake first and be kept).
# Each must end with every acknowledged write found, no stale or wrong read,
# no failed get or set, every slot served and every unit rebuilt, and
# cocytus-cli verify and decode-check clean on the degraded layout.  The
# drill stops the cluster it started; the trap removes the directory.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$build_dir/bench/drill-writer" "$build_dir/bench/cocytus-bench" \
    "$build_dir/client/cocytus-cli" "$build_dir/client/cocytus-proxy" \
    "$build_dir/cocytus/cocytus-node"
dir=$(mktemp -d "${TMPDIR:-/tmp}/drill_rs.XXXXXX")
cleanup() {
    local d
    for d in "$dir"/*/; do
        [ -f "$d/cluster.conf" ] && bash "$top_srcdir/scripts/cluster" down --dir "$d" >/dev/null 2>&1
    done
    rm -rf "$dir"
}
on_exit cleanup

for run in dp pp 2dp dp-coordinator node-coordinator hang-coordinator; do
    kill=${run%%-*}
    extra=()
    [ "${run#*-}" = coordinator ] && extra=(--leader-first)
    out=$(bash "$top_srcdir/scripts/drill" rs --kill "$kill" --during-load --seconds 4 \
        --dir "$dir/$run" "${extra[@]}" 2>&1)
    rc=$?
    line=$(printf '%s\n' "$out" | grep "^drill rs kill $kill\( +leader\)\?:")
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        printf '%s\n' "$out" | tail -30
        for f in "$dir/$run"/coordinator.log "$dir/$run"/parity-0-*.log; do
            [ -f "$f" ] && { echo "--- $f"; tail -15 "$f"; }
        done
        # What the recovery processes did (a stalled recovery shows here;
        # a sanitizer's report at exit would hide it in the tails above).
        for f in "$dir/$run"/parity-*.log; do
            [ -f "$f" ] && grep -q "recovery" "$f" && {
                echo "--- recovery lines of $f"
                grep -E "recovery|batch|units|serving|settled|takes over" "$f" | tail -40
            }
        done
        fail "drill rs --kill $kill exited $rc: ${line:-no result line}"
    else
        ok "$line"
    fi
    case $run in
        node-coordinator) want=5 ;;   # node 1 holds one process of each of the 5 groups
        hang-coordinator) want=1 ;;
        *) want="" ;;
    esac
    if [ -n "$want" ]; then
        seen=$(grep -c "dead: not heard from since the coordinator started, and its .* live peer(s) report their links to it down" "$dir/$run/coordinator.log")
        if [ "$seen" = "$want" ]; then
            ok "drill rs --kill $kill --leader-first: the $want dead process(es) were found from their peers' links"
        else
            grep " dead: " "$dir/$run/coordinator.log"
            fail "drill rs --kill $kill --leader-first: $seen of the $want dead process(es) were found from their peers' links"
        fi
    fi
    # A sanitizer build's servers report into their logs (the drill stopped
    # the cluster, so leak reports at exit are in too).
    bad=$(grep -l -E "AddressSanitizer|LeakSanitizer|runtime error" "$dir/$run"/*.log 2>/dev/null)
    [ -z "$bad" ] || { grep -h -A 20 -E "AddressSanitizer|LeakSanitizer|runtime error" $bad | head -60;
                       fail "drill rs --kill $kill: sanitizer report in $bad"; }
done
finish
