# lib.sh - common code of the evaluation scripts in bench/eval/ (sourced,
# not run).  The idea: every experiment starts the systems it compares side
# by side on free loopback ports in a private directory, drives them with
# the one load generator (cocytus-bench), reads memory and CPU time of each
# process from /proc, and turns rounds that alternate the systems into
# medians, spreads, a CSV, a gnuplot PNG and a markdown table under
# docs/evaluation/.  Whatever it started is stopped by the EXIT trap.
#
# Environment understood by every script:
#   COCYTUS_BUILD_DIR  build tree (memcached/, cocytus/, client/, bench/);
#                      default <repo>/build, else the source tree
#   COCYTUS_BENCH      cocytus-bench binary (default $COCYTUS_BUILD_DIR/bench/cocytus-bench)
#   MEMCACHED          Debian's memcached (default /usr/bin/memcached)
#   EVAL_OUT           where results go (default <repo>/docs/evaluation)
#   EVAL_KEEP=1        keep the work directory (logs, raw bench output)
#   EVAL_COORDINATOR=1 start clusters with their coordinator (default: without)

set -u
set -o pipefail

EVAL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$EVAL_DIR/../.." && pwd)
CLUSTER="$REPO_DIR/scripts/cluster"
OUT_DIR=${EVAL_OUT:-$REPO_DIR/docs/evaluation}
MEMCACHED=${MEMCACHED:-/usr/bin/memcached}
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)

EVAL_NAME=""
WORK=""
SYS_NAMES=()                 # every system started, in start order
declare -A SYS_KIND=()       # name -> cluster | memcached | conf
declare -A SYS_DIR=()        # name -> its private directory
declare -A SYS_PID=()        # memcached: its pid
declare -A SYS_SEEDS=()      # name -> host:port,host:port of its serving processes
CLEANUP_CMDS=()              # extra cleanup (network namespaces), run last

note() { echo "${EVAL_NAME:-eval}: $*" >&2; }
die() { echo "${EVAL_NAME:-eval}: error: $*" >&2; exit 1; }
is_uint() { case $1 in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }

# ---- setup and cleanup ------------------------------------------------------------

# find_build: sets BUILD_DIR, SERVER_BIN, NODE_BIN, BENCH (and exports
# COCYTUS_BUILD_DIR so scripts/cluster uses the same binaries).
find_build() {
    local d
    for d in ${COCYTUS_BUILD_DIR:-} "$REPO_DIR/build" "$REPO_DIR"; do
        if [ -x "$d/memcached/cocytus-server" ] && [ -x "$d/cocytus/cocytus-node" ]; then
            BUILD_DIR=$(cd "$d" && pwd)
            break
        fi
    done
    [ -n "${BUILD_DIR:-}" ] || die "no built cocytus-server/cocytus-node (build first, or set COCYTUS_BUILD_DIR)"
    export COCYTUS_BUILD_DIR=$BUILD_DIR
    SERVER_BIN=$BUILD_DIR/memcached/cocytus-server
    NODE_BIN=$BUILD_DIR/cocytus/cocytus-node
    BENCH=${COCYTUS_BENCH:-$BUILD_DIR/bench/cocytus-bench}
    [ -x "$BENCH" ] || die "no cocytus-bench at $BENCH (make in the build tree, or set COCYTUS_BENCH)"
}

# eval_init NAME: work directory, traps, output directory, binaries.
eval_init() {
    EVAL_NAME=$1
    SECONDS=0
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/eval-$1.XXXXXX") || die "mktemp failed"
    trap eval_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    mkdir -p "$OUT_DIR" || die "cannot create $OUT_DIR"
    find_build
    note "work dir $WORK; build $BUILD_DIR; $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

eval_cleanup() {
    local i
    for ((i = ${#SYS_NAMES[@]} - 1; i >= 0; i--)); do
        sys_down "${SYS_NAMES[$i]}"
    done
    for ((i = ${#CLEANUP_CMDS[@]} - 1; i >= 0; i--)); do
        eval "${CLEANUP_CMDS[$i]}" >/dev/null 2>&1
    done
    CLEANUP_CMDS=()
    if [ -n "$WORK" ] && [ "${EVAL_KEEP:-0}" != 1 ]; then
        rm -rf "$WORK"
    elif [ -n "$WORK" ]; then
        note "kept $WORK"
    fi
}

# ---- ports and processes ----------------------------------------------------------

# port_in_use PORT: something holds the TCP port (any state, any address).
port_in_use() {
    ss -Htan 2>/dev/null | awk -v p="$1" '{ n = split($4, a, ":"); if (a[n] == p) f = 1 } END { exit !f }'
}

# free_port: a TCP port nobody uses, from a random start in 30000-59999.
free_port() {
    local p tries
    for ((tries = 0; tries < 200; tries++)); do
        p=$((30000 + (RANDOM * 32768 + RANDOM) % 30000))
        port_in_use "$p" || { echo "$p"; return 0; }
    done
    return 1
}

# free_run COUNT: the first port of COUNT consecutive free ports.
free_run() {
    local base i tries
    for ((tries = 0; tries < 50; tries++)); do
        base=$(free_port) || return 1
        for ((i = 1; i < $1; i++)); do
            port_in_use $((base + i)) && break
        done
        [ "$i" -ge "$1" ] && { echo "$base"; return 0; }
    done
    return 1
}

# answers HOST PORT: the server replies VERSION to `version`.
answers() {
    local line=""
    exec 3<>"/dev/tcp/$1/$2" || return 1
    printf 'version\r\n' >&3
    IFS= read -r -t 2 line <&3
    exec 3<&- 3>&-
    [[ $line == VERSION* ]]
}

# stop_pid PID: SIGTERM, up to 3 s, then SIGKILL.
stop_pid() {
    local pid=$1
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 30); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 0
}

# ---- systems ---------------------------------------------------------------------

# sys_up_cluster NAME SCHEME NODES [scripts/cluster options...]: a local
# cluster without proxy (3 tries: another cluster may take the ports
# between the search and the bind).
sys_up_cluster() {
    local name=$1 scheme=$2 nodes=$3 d="$WORK/sys-$1" try
    shift 3
    mkdir -p "$d"
    SYS_NAMES+=("$name")
    SYS_KIND[$name]=cluster
    SYS_DIR[$name]=$d
    # The coordinator (membership, failover) is control plane, not part of
    # the systems the papers compare: left out unless EVAL_COORDINATOR=1.
    if [ "${EVAL_COORDINATOR:-0}" != 1 ] && grep -q -- --no-coordinator "$CLUSTER"; then
        set -- --no-coordinator "$@"
    fi
    for try in 1 2 3; do
        if "$CLUSTER" up --nodes "$nodes" --scheme "$scheme" --no-proxy --dir "$d" "$@" >"$d.up.log" 2>&1; then
            SYS_SEEDS[$name]=$(awk '$1 == "plain" || $1 == "data" || $1 == "primary" {
                printf "%s%s", sep, $5; sep = "," }' "$d/endpoints")
            note "$name up: $scheme on $nodes node(s), $(wc -l <"$d/endpoints") processes, seeds ${SYS_SEEDS[$name]}"
            return 0
        fi
        note "$name: cluster up (try $try) failed: $(tail -n 2 "$d.up.log" | tr '\n' ' ')"
        "$CLUSTER" down --dir "$d" >/dev/null 2>&1
        sleep 1
    done
    die "could not start $name ($scheme on $nodes nodes)"
}

# sys_up_memcached NAME THREADS MEM_MB: Debian's memcached on a free port.
sys_up_memcached() {
    local name=$1 threads=$2 mem=$3 d="$WORK/sys-$1" port try pid
    [ -x "$MEMCACHED" ] || die "no memcached at $MEMCACHED"
    mkdir -p "$d"
    SYS_NAMES+=("$name")
    SYS_KIND[$name]=memcached
    SYS_DIR[$name]=$d
    for try in 1 2 3; do
        port=$(free_port) || die "no free port"
        "$MEMCACHED" -u root -l 127.0.0.1 -p "$port" -U 0 -t "$threads" -m "$mem" -c 4096 \
            </dev/null >"$d/memcached.log" 2>&1 &
        pid=$!
        SYS_PID[$name]=$pid
        for _ in $(seq 50); do
            if answers 127.0.0.1 "$port" 2>/dev/null; then
                SYS_SEEDS[$name]=127.0.0.1:$port
                echo "memcached 0 0 0 127.0.0.1:$port $pid" >"$d/endpoints"
                note "$name up: memcached -t $threads -m $mem on port $port (pid $pid)"
                return 0
            fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        stop_pid "$pid"
    done
    die "could not start memcached for $name: $(tail -n 2 "$d/memcached.log")"
}

# sys_up_conf NAME HOST NPLAIN MEM_MB [ADVERTISE]: a plain cluster of NPLAIN
# processes listening on HOST, from a cluster file written here
# (scripts/cluster only knows 127.0.0.1).  Without ADVERTISE one cocytus-node
# per process starts them; with it, the cluster file (and so the slot map
# the servers hand out) names ADVERTISE while each server is started
# directly with -l HOST: clients then reach the servers through whatever
# listens on ADVERTISE (bench/eval/delay-relay.c).
sys_up_conf() {
    local name=$1 host=$2 count=$3 mem=$4 adv=${5:-} d="$WORK/sys-$1" base i
    mkdir -p "$d"
    SYS_NAMES+=("$name")
    SYS_KIND[$name]=conf
    SYS_DIR[$name]=$d
    base=$(free_run $((2 * count))) || die "no run of $((2 * count)) free ports"
    rm -f "$d/cluster.conf"
    (umask 077
    {
        echo "cluster eval"
        echo "secret $(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
        echo "scheme plain"
        echo "memory ${mem}m"
        echo "base_port $base"
        for ((i = 0; i < count; i++)); do echo "node $i ${adv:-$host}"; done
    } >"$d/cluster.conf")
    for ((i = 0; i < count; i++)); do
        if [ -z "$adv" ]; then
            setsid "$NODE_BIN" --cluster "$d/cluster.conf" --node "$i" --server "$SERVER_BIN" \
                --log-dir "$d" </dev/null >"$d/node-$i.procs" 2>"$d/node-$i.log" &
            echo "$!" >"$d/node-$i.pid"
        else
            # ports follow the layout: process i has client port base + 2i
            setsid "$SERVER_BIN" --role plain --cluster "$d/cluster.conf" --group "$i" --index 0 -U 0 \
                -m "$mem" -u root -l "$host" -p $((base + 2 * i)) </dev/null >"$d/plain-$i.log" 2>&1 &
            echo "$!" >"$d/node-$i.pid"
            echo "plain $i 0 $i $host:$((base + 2 * i)) $!" >"$d/node-$i.procs"
        fi
    done
    for _ in $(seq 100); do
        [ "$(cat "$d"/node-*.procs 2>/dev/null | wc -l)" -ge "$count" ] && break
        sleep 0.1
    done
    cat "$d"/node-*.procs | sort -k2,2n -k3,3n >"$d/endpoints"
    [ "$(wc -l <"$d/endpoints")" -eq "$count" ] || die "$name: the nodes did not report $count processes"
    local role g idx node addr pid
    while read -r role g idx node addr pid; do
        for _ in $(seq 100); do
            answers "${addr%:*}" "${addr##*:}" 2>/dev/null && break
            sleep 0.1
        done
        answers "${addr%:*}" "${addr##*:}" 2>/dev/null || die "$name: $role $idx at $addr does not answer"
    done <"$d/endpoints"
    if [ -z "$adv" ]; then
        SYS_SEEDS[$name]=$(awk '{ printf "%s%s", sep, $5; sep = "," }' "$d/endpoints")
    else
        SYS_SEEDS[$name]=$(awk -v a="$adv" '{ n = split($5, hp, ":"); printf "%s%s:%s", sep, a, hp[n]; sep = "," }' "$d/endpoints")
    fi
    note "$name up: $count plain processes on $host${adv:+ (advertised as $adv)}, seeds ${SYS_SEEDS[$name]}"
}

sys_down() {
    local name=$1 d=${SYS_DIR[$1]:-} f pg
    case ${SYS_KIND[$name]:-} in
        cluster) "$CLUSTER" down --dir "$d" >/dev/null 2>&1 ;;
        memcached) stop_pid "${SYS_PID[$name]}" ;;
        conf)
            for f in "$d"/node-*.pid; do
                [ -f "$f" ] || continue
                pg=$(cat "$f")
                kill -TERM -- "-$pg" 2>/dev/null
            done
            sleep 0.5
            for f in "$d"/node-*.pid; do
                [ -f "$f" ] || continue
                pg=$(cat "$f")
                kill -KILL -- "-$pg" 2>/dev/null
                rm -f "$f"
            done
            ;;
    esac
    SYS_KIND[$name]=down
}

# sys_procs NAME: "role pid" of every server process of the system.
sys_procs() {
    awk '{ print $1, $6 }' "${SYS_DIR[$1]}/endpoints"
}

# sys_alive NAME: every server process still runs.
sys_alive() {
    local role pid
    while read -r role pid; do
        kill -0 "$pid" 2>/dev/null || { note "$1: $role (pid $pid) is gone"; return 1; }
    done < <(sys_procs "$1")
}

# sys_rss NAME: total VmRSS of the system's server processes, in bytes.
sys_rss() {
    local role pid kb sum=0
    while read -r role pid; do
        kb=$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$pid/status" 2>/dev/null)
        sum=$((sum + ${kb:-0}))
    done < <(sys_procs "$1")
    echo $((sum * 1024))
}

# proc_ticks PID: utime + stime of the process, in clock ticks.
proc_ticks() {
    sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{ print $12 + $13 }'
}

# sys_cpu NAME: "role ticks" per role (summed over the role's processes).
sys_cpu() {
    local role pid
    while read -r role pid; do
        echo "$role $(proc_ticks "$pid")"
    done < <(sys_procs "$1") | awk '{ t[$1] += $2 } END { for (r in t) print r, t[r] }' | sort
}

# ---- the load generator -------------------------------------------------------------

BENCH_PREFIX=()     # e.g. (ip netns exec NS): how to run the bench

# bench_run NAME OUT TIMEOUT_S BENCH_ARGS...: runs cocytus-bench against the
# system's seeds.  Writes OUT.txt (stdout summary), OUT.err, OUT.cpu
# ("role seconds" of the servers over the run, plus "client seconds" of the
# bench itself and "wall seconds").  Returns the bench's exit status.
bench_run() {
    local name=$1 out=$2 limit=$3 rc t0 t1 w0 w1
    shift 3
    t0=$(sys_cpu "$name")
    w0=$(date +%s.%N)
    local TIMEFORMAT='%3U %3S'
    { time "${BENCH_PREFIX[@]}" timeout -k 5 "$limit" "$BENCH" -s "${SYS_SEEDS[$name]}" -q "$@" \
        >"$out.txt" 2>"$out.err"; } 2>"$out.time"
    rc=$?
    w1=$(date +%s.%N)
    t1=$(sys_cpu "$name")
    {
        join -a 2 -e 0 -o 0,1.2,2.2 <(echo "$t0") <(echo "$t1") \
            | awk -v hz="$CLK_TCK" '{ printf "%s %.3f\n", $1, ($3 - $2) / hz }'
        awk '{ printf "client %.3f\n", $1 + $2 }' "$out.time"
        awk -v a="$w0" -v b="$w1" 'BEGIN { printf "wall %.3f\n", b - a }'
    } >"$out.cpu"
    return $rc
}

# bval FILE PREFIX KEY: KEY's value on the summary line that starts with PREFIX
# (e.g. bval run.txt op=get p99_us); "nan" if absent.
bval() {
    awk -v p="$2" -v k="$3" 'index($0, p) == 1 { for (i = 1; i <= NF; i++) {
        split($i, kv, "="); if (kv[1] == k) { print kv[2]; found = 1; exit } } }
        END { if (!found) print "nan" }' "$1"
}

# cval FILE ROLE: seconds of ROLE in a .cpu file (0 if absent).
cval() {
    awk -v r="$2" '$1 == r { print $2; f = 1 } END { if (!f) print 0 }' "$1"
}

# bench_check OUT WHAT: fails loudly when the run reported errors or wrong values.
bench_check() {
    local errs wrong
    errs=$(bval "$1.txt" total_errors total_errors)
    wrong=$(bval "$1.txt" total_errors total_wrong)
    if [ "$errs" != 0 ] || [ "$wrong" != 0 ]; then
        note "$2: errors=$errs wrong=$wrong"
        tail -n 5 "$1.err" >&2
        return 1
    fi
}

# ---- statistics ----------------------------------------------------------------------

# median (numbers on stdin, one per line; "nan" lines ignored)
median() {
    grep -v nan | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan";
        else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# spread: (max - min) / median in percent, numbers on stdin
spread() {
    grep -v nan | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit }
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
        if (m == 0) print "0"; else printf "%.1f\n", 100 * (v[NR] - v[1]) / m }'
}
# ratio A B: A / B with 3 decimals
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || b + 0 == 0) print "nan"; else printf "%.3f", a / b }'; }
# fmt N DECIMALS
fmt() { awk -v a="$1" -v d="$2" 'BEGIN { if (a == "nan") print "nan"; else printf "%.*f", d, a }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# csv_col CSV COLUMN_NAME FILTER_AWK: values of a column for the rows where
# the awk condition (on named columns c["name"]) holds.
csv_col() {
    awk -F, -v col="$2" "NR == 1 { for (i = 1; i <= NF; i++) h[\$i] = i; next }
        { for (n in h) c[n] = \$h[n]; if ($3) print \$h[col] }" "$1"
}

# order_for ROUND ITEMS...: the items in order for odd rounds, reversed for
# even ones (ABC | CBA | ABC ...), so a steady drift favours none.
order_for() {
    local round=$1 i
    shift
    local items=("$@")
    if [ $((round % 2)) -eq 1 ]; then
        echo "${items[@]}"
    else
        for ((i = ${#items[@]} - 1; i >= 0; i--)); do printf '%s ' "${items[$i]}"; done
        echo
    fi
}

# ---- plots ---------------------------------------------------------------------------

# gnuplot_run SCRIPT_FILE: runs gnuplot, says so if it failed (no abort: the
# CSV and table still count).
gnuplot_run() {
    gnuplot "$1" >"$1.log" 2>&1 || { note "gnuplot failed: $(tail -n 3 "$1.log" | tr '\n' ' ')"; return 1; }
}

# plot_header PNG TITLE: the common preamble of every plot.
plot_header() {
    cat <<EOF
set terminal pngcairo size 1000,560 noenhanced font ",10"
set output "$1"
set title "$2"
set grid ytics
set key outside right top
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set datafile separator "\t"
set yrange [0:*]
EOF
}

# md_header / the scale line every md starts with
md_machine() {
    echo "Machine: $(nproc) shared cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
         "$(uname -sr); load average at the end $(cut -d' ' -f1-3 /proc/loadavg); run took ${SECONDS} s" \
         "on $(date -u '+%Y-%m-%d %H:%M UTC')."
}

# dash VALUE: "-" for a missing figure (nan), else the value
dash() { if [ "$1" = nan ] || [ -z "$1" ]; then echo -; else echo "$1"; fi; }

# The common columns of one measured run (after each script's own key
# columns), and their values from bench_run's OUT files.
RUN_COLS="ops,seconds,ops_per_s,get_p50_us,get_p99_us,set_p50_us,set_p99_us,errors,wrong,cpu_servers_s,cpu_client_s"

# lat FILE OP KEY: a latency of the summary, nan when no such operation ran.
lat() {
    if [ "$(bval "$1" "op=$2" count)" = 0 ]; then echo nan; else bval "$1" "op=$2" "$3"; fi
}

# run_fields OUT: the RUN_COLS values of a run.
run_fields() {
    local f="$1.txt"
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$(bval "$f" phase=run ops)" "$(bval "$f" phase=run seconds)" \
        "$(bval "$f" phase=run ops_per_s)" "$(lat "$f" get p50_us)" "$(lat "$f" get p99_us)" \
        "$(lat "$f" set p50_us)" "$(lat "$f" set p99_us)" "$(bval "$f" total_errors total_errors)" \
        "$(bval "$f" total_errors total_wrong)" \
        "$(awk '$1 != "client" && $1 != "wall" { s += $2 } END { printf "%.3f", s }' "$1.cpu")" \
        "$(cval "$1.cpu" client)"
}

# us_per_op CSV FILTER: median server CPU-us per operation over the matching rows.
us_per_op() {
    awk -F, "NR == 1 { for (i = 1; i <= NF; i++) h[\$i] = i; next }
        { for (n in h) c[n] = \$h[n]; if (($2) && c[\"ops\"] > 0) printf \"%.2f\\n\", 1e6 * c[\"cpu_servers_s\"] / c[\"ops\"] }" "$1" | median
}

# medf DECIMALS: median of stdin, rounded, "-" when there is none.
medf() { local m; m=$(median); dash "$(fmt "$m" "$1")"; }
