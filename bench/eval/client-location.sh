#!/usr/bin/env bash
# client-location.sh - the RAMCloud study's question, on one machine: how
# much do throughput, latency and server CPU per operation depend on where
# the clients sit?  Three plain server processes (with the slot map) listen
# on the root-namespace end of a veth pair this script creates; clients run
# either in the root namespace ("loopback": the kernel delivers traffic to
# a local address over lo) or in a network namespace behind the veth pair
# ("veth"), optionally with tc netem delay added on the namespace's end
# ("veth+100us", "veth+1ms": every request's path grows by that much).
# Read-only, uniform keys, 1 KB values, like the study; connections grow
# 1, 2, 4, 8, 16; rounds alternate the locations.
#
# Needs root (ip netns, ip link, tc).  The namespace, the veth pair, the
# relay and the servers are removed by the EXIT trap, whatever happens.
# When the kernel has no netem qdisc (tc says "Specified qdisc kind is
# unknown"), the delays come from bench/eval/delay-relay.c instead: a relay
# in the namespace that holds each request for D before passing it over
# the veth link to a second set of 3 servers whose slot map names the
# relay's address ("relay", "relay+100us", "relay+1ms"; "relay" with no
# delay measures what the extra hop itself costs).
#
# usage: bench/eval/client-location.sh
#   CONNS_LIST="1 2 4 8 16" ROUNDS=3 RUN_SECS=3 RECORDS=20000 VALUE=1024
#   DELAYS="100us 1ms"     one-way delays, client -> server direction
#   RELAY=auto             auto: relay only without netem; 1: relay cases too; 0: never
# Writes docs/evaluation/client-location.{csv,md,png}.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNS_LIST=${CONNS_LIST:-"1 2 4 8 16"}
ROUNDS=${ROUNDS:-3}
RUN_SECS=${RUN_SECS:-3}
RECORDS=${RECORDS:-20000}
VALUE=${VALUE:-1024}
DELAYS=${DELAYS-"100us 1ms"}
RELAY=${RELAY:-auto}
RELAY_PID=""

for v in ROUNDS RUN_SECS RECORDS VALUE; do
    is_uint "${!v}" && [ "${!v}" -ge 1 ] || { echo "client-location.sh: $v must be a positive number" >&2; exit 2; }
done

NS="" HOST_IF="" NS_IF="" HOST_IP="" NS_IP=""
NETEM_NOTE=""

# make_link: a namespace and a veth pair on a free private /30.
make_link() {
    [ "$(id -u)" -eq 0 ] || die "needs root (ip netns, ip link, tc)"
    command -v ip >/dev/null && command -v tc >/dev/null || die "needs ip and tc (iproute2)"
    local tag=$$ x tries
    NS="cocyloc$tag"
    HOST_IF="cl${tag}h"
    NS_IF="cl${tag}n"
    for ((tries = 0; tries < 50; tries++)); do
        x=$(( (tag + tries * 37) % 250 + 1 ))
        ip -o addr show | grep -q " 10\.213\.$x\." || break
    done
    HOST_IP="10.213.$x.1"
    NS_IP="10.213.$x.2"
    CLEANUP_CMDS+=("ip netns del $NS" "ip link del $HOST_IF")
    ip netns add "$NS" || die "ip netns add $NS failed"
    ip link add "$HOST_IF" type veth peer name "$NS_IF" || die "ip link add veth failed"
    ip link set "$NS_IF" netns "$NS" || die "moving $NS_IF into $NS failed"
    ip addr add "$HOST_IP/30" dev "$HOST_IF" || die "address on $HOST_IF failed"
    ip link set "$HOST_IF" up
    ip netns exec "$NS" ip addr add "$NS_IP/30" dev "$NS_IF" || die "address in $NS failed"
    ip netns exec "$NS" ip link set "$NS_IF" up
    ip netns exec "$NS" ip link set lo up
    for _ in $(seq 50); do
        ip netns exec "$NS" bash -c "exec 3<>/dev/tcp/$HOST_IP/1" 2>&1 | grep -q refused && break
        sleep 0.1
    done
    note "namespace $NS: $NS_IF $NS_IP <-> $HOST_IF $HOST_IP (root namespace)"
}

# netem_works: the kernel has the netem qdisc.
netem_works() {
    ip netns exec "$NS" tc qdisc add dev "$NS_IF" root netem delay 1us >"$WORK/netem.log" 2>&1 || return 1
    ip netns exec "$NS" tc qdisc del dev "$NS_IF" root >/dev/null 2>&1
    return 0
}

# delay_us D: "100us" / "1ms" / "250" (us) in microseconds.
delay_us() {
    case $1 in
        *us) echo "${1%us}" ;;
        *ms) echo $(( ${1%ms} * 1000 )) ;;
        *) echo "$1" ;;
    esac
}

build_relay() {
    # Built with the tree (bench/Makefile.am).
    RELAY_BIN="$BUILD_DIR/bench/eval/delay-relay"
    [ -x "$RELAY_BIN" ] || die "$RELAY_BIN not built (make in the build tree)"
}

# start_relay US: the relay in the namespace, NS_IP:port -> HOST_IP:port for
# every server of rsrv, holding client bytes for US microseconds.
start_relay() {
    local maps=() addr
    for addr in ${SYS_SEEDS[rsrv]//,/ }; do
        maps+=("$addr=$HOST_IP:${addr##*:}")
    done
    ip netns exec "$NS" "$RELAY_BIN" --delay-us "$1" "${maps[@]}" >"$WORK/relay.out" 2>"$WORK/relay.err" &
    RELAY_PID=$!
    for _ in $(seq 50); do
        grep -q ready "$WORK/relay.out" 2>/dev/null && return 0
        kill -0 "$RELAY_PID" 2>/dev/null || break
        sleep 0.1
    done
    die "the delay relay did not start: $(cat "$WORK/relay.err")"
}

stop_relay() {
    [ -n "$RELAY_PID" ] || return 0
    stop_pid "$RELAY_PID"
    RELAY_PID=""
}

# set_location LOC: routes the next run: which servers, how the bench is
# run, qdisc or relay on the link.  Sets SYS.
set_location() {
    stop_relay
    case $1 in
        loopback)
            SYS=srv
            BENCH_PREFIX=()
            ;;
        veth)
            SYS=srv
            BENCH_PREFIX=(ip netns exec "$NS")
            [ -z "$NETEM" ] || ip netns exec "$NS" tc qdisc del dev "$NS_IF" root >/dev/null 2>&1
            ;;
        veth+*)
            SYS=srv
            BENCH_PREFIX=(ip netns exec "$NS")
            ip netns exec "$NS" tc qdisc replace dev "$NS_IF" root netem delay "${1#veth+}" limit 100000 \
                || die "tc netem delay ${1#veth+} failed"
            ;;
        relay | relay+*)
            SYS=rsrv
            BENCH_PREFIX=(ip netns exec "$NS")
            [ -z "$NETEM" ] || ip netns exec "$NS" tc qdisc del dev "$NS_IF" root >/dev/null 2>&1
            if [ "$1" = relay ]; then start_relay 0; else start_relay "$(delay_us "${1#relay+}")"; fi
            ;;
    esac
}

main() {
    eval_init client-location
    CSV="$OUT_DIR/client-location.csv"
    FAILED=0
    make_link
    LOCATIONS=(loopback veth)
    NETEM=""
    local d use_relay=0
    netem_works && NETEM=1
    if [ -n "$DELAYS" ] && [ -n "$NETEM" ]; then
        for d in $DELAYS; do LOCATIONS+=("veth+$d"); done
    fi
    if [ "$RELAY" = 1 ] || { [ "$RELAY" = auto ] && [ -z "$NETEM" ]; }; then
        use_relay=1
        LOCATIONS+=(relay)
        for d in $DELAYS; do LOCATIONS+=("relay+$d"); done
    fi
    if [ -z "$NETEM" ]; then
        NETEM_NOTE="tc netem is not available on this kernel ($(head -n 1 "$WORK/netem.log"))"
        if [ "$use_relay" -eq 1 ]; then
            NETEM_NOTE="$NETEM_NOTE: the delays come from bench/eval/delay-relay.c instead (see below)."
        else
            NETEM_NOTE="$NETEM_NOTE, and RELAY=0: the delayed locations ($DELAYS) were skipped."
        fi
        note "$NETEM_NOTE"
    fi
    echo "round,conns,location,$RUN_COLS,cpu_relay_s" >"$CSV"
    local mem=$(( RECORDS * (VALUE + 100) / 3 * 2 / 1048576 + 32 )) out round c loc s relay_s
    sys_up_conf srv "$HOST_IP" 3 "$mem"
    if [ "$use_relay" -eq 1 ]; then
        build_relay
        sys_up_conf rsrv "$HOST_IP" 3 "$mem" "$NS_IP"
        CLEANUP_CMDS+=("stop_relay")
    fi
    local systems=(srv) checks=(veth)
    if [ "$use_relay" -eq 1 ]; then systems+=(rsrv); checks+=(relay); fi
    for s in "${systems[@]}"; do
        if [ "$s" = rsrv ]; then set_location relay; else set_location loopback; fi
        out="$WORK/load-$s"
        bench_run "$s" "$out" 300 --load --no-run -n "$RECORDS" -v "$VALUE" -c 4 || die "load of $s failed: $(tail -n 3 "$out.err")"
        bench_check "$out" "load of $s" || die "load had errors"
    done
    for loc in "${LOCATIONS[@]}"; do     # reach every server once from every location
        set_location "$loc"
        bench_run "$SYS" "$WORK/warm-$loc" 60 --no-load --run -n "$RECORDS" -v "$VALUE" -r 1 -d uniform -c 4 -t 1 \
            || die "warm-up from $loc failed: $(tail -n 3 "$WORK/warm-$loc.err" | tr '\n' ' ')"
    done
    for ((round = 1; round <= ROUNDS; round++)); do
        for c in $CONNS_LIST; do
            for loc in $(order_for "$round" "${LOCATIONS[@]}"); do
                set_location "$loc"
                sys_alive "$SYS" || die "a server died"
                out="$WORK/run-$round-$c-$loc"
                local r0=0
                [ -z "$RELAY_PID" ] || r0=$(proc_ticks "$RELAY_PID")
                bench_run "$SYS" "$out" $((RUN_SECS + 60)) --no-load --run -n "$RECORDS" -v "$VALUE" -r 1 \
                    -d uniform -c "$c" -t "$RUN_SECS" --seed "$round" || { note "bench exit $? ($loc)"; FAILED=1; }
                relay_s=0
                [ -z "$RELAY_PID" ] || relay_s=$(awk -v a="$r0" -v b="$(proc_ticks "$RELAY_PID")" -v hz="$CLK_TCK" \
                    'BEGIN { printf "%.3f", (b - a) / hz }')
                bench_check "$out" "$loc c=$c round $round" || FAILED=1
                echo "$round,$c,$loc,$(run_fields "$out"),$relay_s" >>"$CSV"
                note "round $round c=$c $loc: $(bval "$out.txt" phase=run ops_per_s) ops/s, get p50 $(bval "$out.txt" op=get p50_us) us"
            done
        done
    done
    for loc in "${checks[@]}"; do
        set_location "$loc"
        out="$WORK/verify-$loc"
        bench_run "$SYS" "$out" 120 --no-load --run -n "$RECORDS" -v "$VALUE" -r 1 -o 3000 -c 2 --verify \
            || { note "verify run ($loc) failed"; FAILED=1; }
        bench_check "$out" "verify run ($loc)" || FAILED=1
    done
    stop_relay
    report
    note "done in ${SECONDS} s"
    [ "$FAILED" -eq 0 ] || { note "something failed (see above)"; exit 1; }
}

report() {
    local md="$OUT_DIR/client-location.md" c loc dat="$WORK/loc.dat" gp="$WORK/loc.gp"
    rows() { csv_col "$CSV" "$1" "c[\"conns\"] == \"$2\" && c[\"location\"] == \"$3\""; }
    client_us() {
        awk -F, -v c="$1" -v l="$2" -v col="$3" 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
            $2 == c && $3 == l && $h["ops"] > 0 { printf "%.2f\n", 1e6 * $h[col] / $h["ops"] }' "$CSV" | medf 1
    }
    {
        echo "# Client location: loopback vs a veth link (RAMCloud study, sections III-IV)"
        echo
        echo "Command: \`bench/eval/client-location.sh\` (CONNS_LIST=\"$CONNS_LIST\" ROUNDS=$ROUNDS RUN_SECS=$RUN_SECS RECORDS=$RECORDS)."
        md_machine
        echo
        echo "Servers: 3 plain cocytus-server processes (slot map, one cocytus-node each) listening on"
        echo "$HOST_IP, the root-namespace end of a veth pair; $RECORDS records of $VALUE B. Clients:"
        echo "cocytus-bench, read-only, uniform keys (as the study), C connections, $RUN_SECS s per run,"
        echo "$ROUNDS rounds alternating the locations. *loopback*: the bench in the root namespace (traffic"
        echo "to a local address goes over lo); *veth*: the bench in network namespace $NS behind the veth"
        echo "pair; *veth+D*: the same with tc netem delay D on the namespace's end (client -> server)."
        echo "*relay*, *relay+D*: the bench in the namespace talks to bench/eval/delay-relay.c in the"
        echo "namespace, which passes requests over the veth pair to a second set of 3 servers (same"
        echo "records) after holding them for D; replies pass at once. The servers' slot map names the"
        echo "relay's address, so routing is unchanged. *relay* (D = 0) is the cost of the extra user-space"
        echo "hop itself: read the delays against it, not against veth."
        [ -z "$NETEM_NOTE" ] || { echo; echo "**$NETEM_NOTE**"; }
        echo
        echo "Medians; spread = (max - min) / median; ratio = ops/s / loopback ops/s at the same"
        echo "connection count; CPU us/op = CPU time per operation of the servers (all 3 processes), the"
        echo "client (cocytus-bench) and the relay."
        echo
        echo "| conns | location | ops/s | spread | ratio vs loopback | get p50 us | get p99 us | server CPU us/op | client CPU us/op | relay CPU us/op |"
        echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        for c in $CONNS_LIST; do
            for loc in "${LOCATIONS[@]}"; do
                printf '| %s | %s | %s | %s%% | %s | %s | %s | %s | %s | %s |\n' "$c" "$loc" \
                    "$(fmt "$(rows ops_per_s "$c" "$loc" | median)" 0)" "$(rows ops_per_s "$c" "$loc" | spread)" \
                    "$(ratio "$(rows ops_per_s "$c" "$loc" | median)" "$(rows ops_per_s "$c" loopback | median)")" \
                    "$(rows get_p50_us "$c" "$loc" | medf 0)" "$(rows get_p99_us "$c" "$loc" | medf 0)" \
                    "$(fmt "$(us_per_op "$CSV" "c[\"conns\"] == \"$c\" && c[\"location\"] == \"$loc\"")" 1)" "$(client_us "$c" "$loc" cpu_client_s)" \
                    "$(client_us "$c" "$loc" cpu_relay_s)"
            done
        done
        echo
        echo "![client-location](client-location.png)"
    } >"$md"
    {
        for col in ops_per_s get_p50_us; do
            printf 'conns'; for loc in "${LOCATIONS[@]}"; do printf '\t%s' "$loc"; done; printf '\n'
            for c in $CONNS_LIST; do
                printf '%s' "$c"
                for loc in "${LOCATIONS[@]}"; do printf '\t%s' "$(rows "$col" "$c" "$loc" | median)"; done
                printf '\n'
            done
            printf '\n\n'
        done
        printf 'conns'; for loc in "${LOCATIONS[@]}"; do printf '\t%s' "$loc"; done; printf '\n'
        for c in $CONNS_LIST; do
            printf '%s' "$c"
            for loc in "${LOCATIONS[@]}"; do
                printf '\t%s' "$(us_per_op "$CSV" "c[\"conns\"] == \"$c\" && c[\"location\"] == \"$loc\"")"
            done
            printf '\n'
        done
    } >"$dat"
    local n=${#LOCATIONS[@]}
    {
        echo 'set terminal pngcairo size 1400,500 noenhanced font ",10"'
        echo "set output '$OUT_DIR/client-location.png'"
        echo 'set grid'
        echo 'set key top left'
        echo 'set datafile separator "\t"'
        echo 'set xlabel "client connections"'
        echo 'set logscale x 2'
        echo 'set yrange [0:*]'
        echo "set multiplot layout 1,3 title \"Client location: read-only, uniform, $VALUE B (medians of $ROUNDS rounds)\""
        echo 'set title "throughput (gets/s)"'
        echo "plot for [i=2:$((n + 1))] '$dat' index 0 using 1:i with linespoints lw 2 title columnheader(i)"
        echo 'set title "get p50 latency (us)"'
        echo "plot for [i=2:$((n + 1))] '$dat' index 1 using 1:i with linespoints lw 2 title columnheader(i)"
        echo 'set title "server CPU us per get"'
        echo "plot for [i=2:$((n + 1))] '$dat' index 2 using 1:i with linespoints lw 2 title columnheader(i)"
        echo 'unset multiplot'
    } >"$gp"
    gnuplot_run "$gp"
    cat "$md"
}

main "$@"
