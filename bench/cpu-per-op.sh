#!/usr/bin/env bash
# cpu-per-op.sh - server CPU time and system calls per operation, by process
# role, for memcached -t 1, one plain server, PBR(2) and RS(3,5) (issue #13).
#
# The idea: on a shared 2-core machine ops/s moves with whatever else runs,
# but the CPU time a server spends per operation moves much less, and it is
# what replication costs.  Every system runs at once on free loopback ports
# (bench/eval/lib.sh starts and stops them); each (value size, mix, system)
# run is a closed-loop cocytus-bench load of RUN_SECS seconds, and over it we
# read from /proc of every server process:
#   - utime + stime (/proc/PID/stat), summed over the processes of a role;
#   - syscr + syscw (/proc/PID/io): read/write-family system calls only
#     (read, readv, write, writev, ...; not recv/send, not epoll_wait).
# Right after, a second, shorter run of PERF_SECS seconds under
# `perf stat -e raw_syscalls:sys_enter,syscalls:sys_enter_<name>...` (one
# perf per role, counting mode) gives every system call and the breakdown
# (epoll_wait, recvfrom, sendto, read, writev, ...).  It is a separate window
# because counting tracepoints costs the traced processes some CPU, which
# must not leak into the CPU figures.  Rounds alternate the order of the
# systems (A B C D | D C B A | ...); figures are medians over rounds, with
# the spread (max - min) / median.
#
# Systems (no coordinator, no proxy):
#   memcached  Debian's /usr/bin/memcached -t 1
#   plain      one cocytus-server --role plain
#   plain3     three plain processes (slot map): the same fan-out as RS(3,5)'s
#              three data processes, so the fair baseline for a data
#              process's GET (4 connections over 3 processes batch fewer
#              requests per wakeup than 4 on one)
#   pbr        PBR(2): a primary and two backups, full sync
#   pbr3       PBR(2) x3: three such groups (3 primaries, as RS has 3 data
#              processes)
#   rs         RS(3,5): three data and two parity processes
#   rs1        RS(3,5) with the load on one data process (cocytus-bench
#              --only-server: the first RECORDS keys that process owns), so
#              it gets all CONNS connections' requests as one plain process
#              does: the per-process comparison for a data process's GET
#              (the other two data processes idle; their CPU is counted)
#   rstcp      RS(3,5) with its links over loopback TCP (COCYTUS_LINK_TCP_ONLY=1;
#              rs uses Unix sockets between processes on one host)
#   rstls      RS(3,5) with its links over TCP and TLS (link_tls; certificates
#              made with the openssl tool): rstcp is its baseline
# A system's name may end in +batch or +normal (rs+normal, memcached+batch):
# once started, every thread of its servers is put under SCHED_BATCH or
# SCHED_OTHER with chrt (the servers themselves start under SCHED_OTHER).
# With BASE_BUILD=/path/to/other/build, the systems of BASE_SYSTEMS are
# started a second time from that build (named rs@base, ...), in the same
# rounds: a before/after comparison under the same machine load.
#
# usage: bench/cpu-per-op.sh
#   ROUNDS=3 RUN_SECS=5 PERF_SECS=3 RECORDS=20000 CONNS=4 DEPTH=1 (requests in flight per connection: cocytus-bench --depth)
#   SIZES="1024 4096"  MIXES="0.5 0.95 0 1"  (read ratios: 0 = set only, 1 = get only)
#   SYSTEMS="memcached plain plain3 pbr pbr3 rs"  PERF=1 (0: no perf window)
#   BASE_BUILD=  BASE_SYSTEMS="pbr rs"
#   OUT=docs/evaluation/cpu-per-op-run  (writes OUT.csv, OUT-syscalls.csv, OUT.md; the
#   discussion, docs/evaluation/cpu-per-op.md, quotes the -before and -after runs)
# Environment of bench/eval/lib.sh too (COCYTUS_BUILD_DIR, MEMCACHED, EVAL_KEEP).
# Exit 0 when every run completed without client errors, 1 otherwise.

source "$(dirname "${BASH_SOURCE[0]}")/eval/lib.sh"

ROUNDS=${ROUNDS:-3}
RUN_SECS=${RUN_SECS:-5}
PERF_SECS=${PERF_SECS:-3}
RECORDS=${RECORDS:-20000}
CONNS=${CONNS:-4}
DEPTH=${DEPTH:-1}
SIZES=${SIZES:-"1024 4096"}
MIXES=${MIXES:-"0.5 0.95 0 1"}
PERF=${PERF:-1}
BASE_BUILD=${BASE_BUILD:-}
BASE_SYSTEMS=${BASE_SYSTEMS:-"pbr rs"}
OUT=${OUT:-$REPO_DIR/docs/evaluation/cpu-per-op-run}
read -r -a SYSTEMS <<<"${SYSTEMS:-memcached plain plain3 pbr pbr3 rs}"

for v in ROUNDS RUN_SECS PERF_SECS RECORDS CONNS DEPTH; do
    is_uint "${!v}" && [ "${!v}" -ge 1 ] || { echo "cpu-per-op.sh: $v must be a positive number" >&2; exit 2; }
done

# System calls counted in the perf window; "all" is raw_syscalls:sys_enter.
SYSCALLS="epoll_wait read readv recvfrom recvmsg write writev sendto sendmsg epoll_ctl"
declare -A LABEL=([memcached]="memcached -t 1" [plain]="plain" [plain3]="plain x3" [pbr]="PBR(2)"
                  [pbr3]="PBR(2) x3" [rs]="RS(3,5)" [rs1]="RS(3,5), one data process's keys"
                  [rstcp]="RS(3,5) TCP links" [rstls]="RS(3,5) TLS links")
declare -A ROLES_OF=([memcached]="memcached" [plain]="plain" [plain3]="plain" [pbr]="primary backup"
                     [pbr3]="primary backup" [rs]="data parity" [rs1]="data parity"
                     [rstcp]="data parity" [rstls]="data parity")

kind_of() { local k=${1%@*}; echo "${k%+*}"; }
label_of() { local k; k=$(kind_of "$1"); echo "${LABEL[$k]}${1#"$k"}"; }

# link_certs: WORK/linkcerts/{ca,node}.{pem,key}, a CA and a certificate for
# 127.0.0.1 it signed (for rstls).
link_certs() {
    local d=$WORK/linkcerts
    [ -f "$d/node.pem" ] && return 0
    { bash "$REPO_DIR/scripts/certs" ca "$d" && bash "$REPO_DIR/scripts/certs" signed "$d" node IP:127.0.0.1; } ||
        die "rstls: could not make certificates"
}

# start_one NAME: one system (NAME may carry @base: the build comes from the caller's env).
start_one() {
    local mem=256 region=128
    case $(kind_of "$1") in
        memcached) sys_up_memcached "$1" 1 $mem ;;
        plain) sys_up_cluster "$1" plain 1 --memory $mem ;;
        plain3) sys_up_cluster "$1" plain 3 --memory $mem ;;
        pbr) sys_up_cluster "$1" pbr:2 1 --memory $mem ;;
        pbr3) sys_up_cluster "$1" pbr:2 3 --memory $mem ;;
        rs | rs1) sys_up_cluster "$1" rs:3:5 1 --region $region ;;
        rstcp) COCYTUS_LINK_TCP_ONLY=1 sys_up_cluster "$1" rs:3:5 1 --region $region ;;
        rstls)
            link_certs
            COCYTUS_LINK_TCP_ONLY=1 sys_up_cluster "$1" rs:3:5 1 --region $region \
                --link-tls-cert "$WORK/linkcerts/node.pem" --link-tls-key "$WORK/linkcerts/node.key" \
                --link-tls-ca "$WORK/linkcerts/ca.pem" ;;
        *) die "unknown system '$1'" ;;
    esac
    case $1 in
        *+batch*) sched_set "$1" -b ;;
        *+normal*) sched_set "$1" -o ;;
    esac
}

# sched_set NAME FLAG: every thread of the system's server processes under
# SCHED_BATCH (-b: a woken thread does not preempt the one running) or
# SCHED_OTHER (-o: servers start under it, so +normal matters only for a
# build or wrapper that sets another policy).
sched_set() {
    local role pid
    while read -r role pid; do
        chrt -a "$2" -p 0 "$pid" >/dev/null || die "$1: chrt $2 on $role (pid $pid) failed"
    done < <(sys_procs "$1")
}

start_systems() {
    local sys b
    for sys in "${SYSTEMS[@]}"; do start_one "$sys"; done
    [ -n "$BASE_BUILD" ] || return 0
    [ -x "$BASE_BUILD/memcached/cocytus-server" ] || die "BASE_BUILD=$BASE_BUILD has no cocytus-server"
    b=$(cd "$BASE_BUILD" && pwd)
    for sys in $BASE_SYSTEMS; do
        [ "$sys" != memcached ] || continue
        COCYTUS_BUILD_DIR=$b start_one "$sys@base"
        SYSTEMS+=("$sys@base")
    done
}

# role_pids NAME ROLE: comma-separated pids of the system's processes of ROLE.
role_pids() {
    sys_procs "$1" | awk -v r="$2" '$1 == r { printf "%s%s", sep, $2; sep = "," }'
}

# snapshot NAME: "role ticks syscr syscw" summed per role.
snapshot() {
    local role pid
    while read -r role pid; do
        echo "$role $(proc_ticks "$pid") $(awk '$1 == "syscr:" { r = $2 } $1 == "syscw:" { w = $2 }
            END { print r + 0, w + 0 }' "/proc/$pid/io" 2>/dev/null)"
    done < <(sys_procs "$1") | awk '{ t[$1] += $2; r[$1] += $3; w[$1] += $4 }
        END { for (k in t) print k, t[k], r[k], w[k] }' | sort
}

bench() {
    local name=$1
    shift
    local depth=() only=()
    [ "$DEPTH" -gt 1 ] && case " $* " in *" --run "*) depth=(--depth "$DEPTH") ;; esac
    [ "$(kind_of "$name")" = rs1 ] && only=(--only-server "${SYS_SEEDS[$name]%%,*}")
    timeout -k 5 $((RUN_SECS + PERF_SECS + 60)) "$BENCH" -s "${SYS_SEEDS[$name]}" -q "${depth[@]}" "${only[@]}" "$@"
}

load_size() {
    local size=$1 sys out
    for sys in "${SYSTEMS[@]}"; do
        out="$WORK/load-$sys-$size"
        bench "$sys" --load --no-run -n "$RECORDS" -v "$size" -c 4 >"$out.txt" 2>"$out.err" \
            || die "loading $sys ($size B) failed: $(tail -n 3 "$out.err" | tr '\n' ' ')"
        bench_check "$out" "load of $sys" || die "load of $sys had errors"
        bench "$sys" --no-load --run -n "$RECORDS" -v "$size" -r 0.95 -c "$CONNS" -t 1 >/dev/null 2>&1
    done
    note "$RECORDS records of $size B loaded into ${SYSTEMS[*]}"
}

# cpu_run ROUND SIZE MIX SYS: the CPU window; one CSV row per role.
cpu_run() {
    local round=$1 size=$2 rr=$3 sys=$4 out="$WORK/run-$1-$2-$3-$4" s0 s1 ops secs
    sys_alive "$sys" || die "$sys lost a process before round $round"
    s0=$(snapshot "$sys")
    bench "$sys" --no-load --run -n "$RECORDS" -v "$size" -r "$rr" -d zipfian -c "$CONNS" \
        -t "$RUN_SECS" --seed "$round" >"$out.txt" 2>"$out.err" \
        || { note "$sys r=$rr $size B round $round: bench exit $?: $(tail -n 2 "$out.err" | tr '\n' ' ')"; FAILED=1; }
    s1=$(snapshot "$sys")
    bench_check "$out" "$sys r=$rr $size B round $round" || FAILED=1
    ops=$(bval "$out.txt" phase=run ops)
    secs=$(bval "$out.txt" phase=run seconds)
    join <(echo "$s0") <(echo "$s1") | awk -v hz="$CLK_TCK" -v pre="$round,$size,$rr,$sys" -v ops="$ops" -v secs="$secs" \
        '{ cpu = ($5 - $2) / hz; us = 0; rw = 0
           if (ops > 0) { us = 1e6 * cpu / ops; rw = ($6 + $7 - $3 - $4) / ops }
           printf "%s,%s,%s,%s,%.3f,%.2f,%.3f\n", pre, $1, ops, secs, cpu, us, rw }' >>"$CSV"
    note "round $round $size B r=$rr $sys: $(bval "$out.txt" phase=run ops_per_s) ops/s, $(awk -F, -v p="$round,$size,$rr,$sys," \
        'index($0, p) == 1 { s += $9 } END { printf "%.1f", s }' "$CSV") server CPU-us/op"
}

# perf_run ROUND SIZE MIX SYS: the syscall window; one CSV row per role and call.
perf_run() {
    local round=$1 size=$2 rr=$3 sys=$4 out="$WORK/perf-$1-$2-$3-$4" role pids ev c ops
    local -a perfs=()
    ev=raw_syscalls:sys_enter
    for c in $SYSCALLS; do ev="$ev,syscalls:sys_enter_$c"; done
    for role in ${ROLES_OF[$(kind_of "$sys")]}; do
        pids=$(role_pids "$sys" "$role")
        perf stat -x, -e "$ev" -p "$pids" -o "$out.$role" -- sleep 1000 >/dev/null 2>&1 &
        perfs+=($!)
    done
    sleep 0.3
    bench "$sys" --no-load --run -n "$RECORDS" -v "$size" -r "$rr" -d zipfian -c "$CONNS" \
        -t "$PERF_SECS" --seed $((round + 100)) >"$out.txt" 2>"$out.err" || FAILED=1
    # perf stops counting and prints when its workload ends (a background
    # job of a script ignores SIGINT, so perf itself is not signalled).
    for c in "${perfs[@]}"; do pkill -TERM -P "$c" -x sleep 2>/dev/null; done
    for c in "${perfs[@]}"; do wait "$c" 2>/dev/null; done
    ops=$(bval "$out.txt" phase=run ops)
    for role in ${ROLES_OF[$(kind_of "$sys")]}; do
        awk -F, -v pre="$round,$size,$rr,$sys,$role" -v ops="$ops" '
            $3 ~ /^(raw_)?syscalls:/ { n = $3; sub(/^raw_syscalls:sys_enter$/, "all", n); sub(/^syscalls:sys_enter_/, "", n)
              if (ops > 0 && $1 ~ /^[0-9]+$/) printf "%s,%s,%s,%s,%.3f\n", pre, ops, n, $1, $1 / ops }' "$out.$role" >>"$SCSV"
    done
}

# ---- report ----------------------------------------------------------------------

wl_label() {
    case $1 in
        0) echo "set only" ;;
        1) echo "get only" ;;
        *) awk -v r="$1" 'BEGIN { printf "%d:%d", r * 100 + 0.5, 100 - (r * 100 + 0.5) + 0.5 }' ;;
    esac
}

# sys_us SIZE MIX SYS [ROLE]: per-round server CPU-us/op (roles summed) on stdin-free lines.
sys_us_rounds() {
    awk -F, -v s="$1" -v m="$2" -v y="$3" -v r="${4:-}" 'NR > 1 && $2 == s && $3 == m && $4 == y && (r == "" || $5 == r) { t[$1] += $9 }
        END { for (k in t) printf "%.3f\n", t[k] }' "$CSV"
}
sys_us() { sys_us_rounds "$@" | median; }
sys_spread() { sys_us_rounds "$@" | spread; }
# per-round ratio of two systems' CPU-us/op (median over rounds)
pair_ratio() {
    awk -F, -v s="$1" -v m="$2" -v a="$3" -v b="$4" 'NR > 1 && $2 == s && $3 == m { if ($4 == a) x[$1] += $9; if ($4 == b) y[$1] += $9 }
        END { for (k in x) if (y[k] > 0) printf "%.3f\n", x[k] / y[k] }' "$CSV" | median
}
# io_per_op SIZE MIX SYS ROLE: median read/write-family calls per op
io_per_op() {
    awk -F, -v s="$1" -v m="$2" -v y="$3" -v r="$4" 'NR > 1 && $2 == s && $3 == m && $4 == y && $5 == r { print $10 }' "$CSV" | median
}
# sc SIZE MIX SYS ROLE CALL: median calls per op of one call (ROLE "" = all roles summed)
sc() {
    awk -F, -v s="$1" -v m="$2" -v y="$3" -v r="$4" -v c="$5" 'NR > 1 && $2 == s && $3 == m && $4 == y && (r == "" || $5 == r) && $7 == c { t[$1] += $9 }
        END { for (k in t) printf "%.3f\n", t[k] }' "$SCSV" | median
}
f1() { dash "$(fmt "$1" 1)"; }
f2() { dash "$(fmt "$1" 2)"; }
fx() { local v; v=$(f2 "$1"); [ "$v" = - ] && echo - || echo "${v}x"; }

has() { local x; for x in "${SYSTEMS[@]}"; do [ "$x" = "$1" ] && return 0; done; return 1; }
replicated() { case $(kind_of "$1") in pbr | pbr3 | rs | rs1) return 0 ;; esac; return 1; }
# ratio_cell SIZE MIX A B: "1.23x", or "-" when a system did not run
ratio_cell() {
    has "$3" && has "$4" || { echo -; return; }
    fx "$(pair_ratio "$1" "$2" "$3" "$4")"
}
# verdict VALUE OP LIMIT: "met" / "not met" (OP: le), "-" without a value
verdict() {
    awk -v v="$1" -v l="$3" 'BEGIN { if (v == "nan" || v == "") print "-"; else if (v + 0 <= l + 0) print "met"; else print "not met" }'
}

cpu_table() {
    local size=$1 rr sys role parts
    printf '| mix |'
    for sys in "${SYSTEMS[@]}"; do printf ' %s |' "$(label_of "$sys")"; done
    printf '\n|---|'
    for sys in "${SYSTEMS[@]}"; do printf -- '---:|'; done
    printf '\n'
    for rr in $MIXES; do
        printf '| %s |' "$(wl_label "$rr")"
        for sys in "${SYSTEMS[@]}"; do
            parts=""
            if replicated "$sys"; then
                for role in ${ROLES_OF[$(kind_of "$sys")]}; do
                    parts="$parts${parts:+ + }$(f1 "$(sys_us "$size" "$rr" "$sys" "$role")")"
                done
                parts=" ($parts)"
            fi
            printf ' %s%s ±%s%% |' "$(f1 "$(sys_us "$size" "$rr" "$sys")")" "$parts" "$(sys_spread "$size" "$rr" "$sys")"
        done
        printf '\n'
    done
}

ratio_table() {
    local size=$1 rr
    echo "| mix | RS / memcached | RS / plain | RS / plain x3 | RS / PBR(2) | RS / PBR(2) x3 | RS / RS@base | PBR(2) / PBR(2)@base |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    for rr in $MIXES; do
        echo "| $(wl_label "$rr") | $(ratio_cell "$size" "$rr" rs memcached) | $(ratio_cell "$size" "$rr" rs plain) |" \
             "$(ratio_cell "$size" "$rr" rs plain3) | $(ratio_cell "$size" "$rr" rs pbr) | $(ratio_cell "$size" "$rr" rs pbr3) |" \
             "$(ratio_cell "$size" "$rr" rs rs@base) | $(ratio_cell "$size" "$rr" pbr pbr@base) |"
    done
}

syscall_table() {
    local size=$1 rr sys kind role all ep rv sd rd wv other
    echo "| mix | system | role | all | epoll_wait | read | recvfrom | sendto | writev + sendmsg | other | rw (/proc) |"
    echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    for rr in $MIXES; do
        for sys in "${SYSTEMS[@]}"; do
            kind=$(kind_of "$sys")
            for role in ${ROLES_OF[$kind]} ""; do
                [ -z "$role" ] && ! replicated "$sys" && continue
                all=$(sc "$size" "$rr" "$sys" "$role" all)
                ep=$(sc "$size" "$rr" "$sys" "$role" epoll_wait)
                rd=$(sc "$size" "$rr" "$sys" "$role" read)
                rv=$(sc "$size" "$rr" "$sys" "$role" recvfrom)
                sd=$(sc "$size" "$rr" "$sys" "$role" sendto)
                wv=$(awk -v a="$(sc "$size" "$rr" "$sys" "$role" writev)" -v b="$(sc "$size" "$rr" "$sys" "$role" sendmsg)" \
                    'BEGIN { if (a == "nan") print "nan"; else printf "%.3f", a + b }')
                other=$(awk -v a="$all" -v b="$ep" -v c="$rv" -v d="$sd" -v e="$rd" -v f="$wv" \
                    'BEGIN { if (a == "nan") print "nan"; else printf "%.3f", a - b - c - d - e - f }')
                printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$(wl_label "$rr")" \
                    "$(label_of "$sys")" "${role:-**total**}" "$(f2 "$all")" "$(f2 "$ep")" "$(f2 "$rd")" \
                    "$(f2 "$rv")" "$(f2 "$sd")" "$(f2 "$wv")" "$(f2 "$other")" \
                    "$([ -n "$role" ] && f2 "$(io_per_op "$size" "$rr" "$sys" "$role")" || echo -)"
            done
        done
    done
}

# The issue's "done when" figures, each against its limit.
targets_table() {
    local size=$1 v rr worst
    echo "| target | measured | limit | |"
    echo "|---|---:|---:|---|"
    v=$(pair_ratio "$size" 0.5 rs memcached)
    echo "| RS(3,5) / memcached, 50:50 | $(fx "$v") | 2.0x | $(verdict "$v" le 2.0) |"
    v=$(pair_ratio "$size" 0.95 rs memcached)
    echo "| RS(3,5) / memcached, 95:5 | $(fx "$v") | 1.3x | $(verdict "$v" le 1.3) |"
    for b in pbr pbr3; do
        has "$b" || continue
        worst=nan
        for rr in $MIXES; do
            v=$(pair_ratio "$size" "$rr" rs "$b")
            worst=$(awk -v a="$worst" -v b="$v" 'BEGIN { if (b == "nan") print a; else if (a == "nan" || b + 0 > a + 0) print b; else print a }')
        done
        echo "| RS(3,5) / $(label_of "$b"), worst mix | $(fx "$worst") | 1.0x | $(verdict "$worst" le 1.0) |"
    done
    if [ -s "$SCSV" ]; then
        v=$(sc "$size" 0 rs "" all)
        echo "| syscalls per SET, whole RS(3,5) group (set only) | $(f2 "$v") | 5 | $(verdict "$v" le 5) |"
    fi
    for b in plain plain3; do
        has "$b" || continue
        v=$(awk -v a="$(sys_us "$size" 1 rs data)" -v b="$(sys_us "$size" 1 "$b")" 'BEGIN { if (a == "nan" || b == "nan" || b == 0) print "nan"; else printf "%.3f", a / b }')
        echo "| data-process GET / $(label_of "$b") GET (get only) | $(fx "$v") | 1.1x | $(verdict "$v" le 1.1) |"
    done
    if has rs1 && has plain; then
        # one data process with all the load against one plain process: the
        # same requests per wake-up, so the engines' GET paths compared
        v=$(pair_ratio "$size" 1 rs1 plain)
        echo "| data-process GET / plain GET, one process each (get only; every RS process counted) | $(fx "$v") | 1.1x | $(verdict "$v" le 1.1) |"
    fi
}

# build_source_rev DIR: the commit of the source tree DIR was configured from
# (an out-of-tree build is no git work tree itself; its Makefile names the
# source), with " with local changes" when that tree differs from it
# outside docs/.  It says what the tree holds now, not at build time.
build_source_rev() {
    local src rev
    src=$(sed -n 's/^abs_top_srcdir = //p' "$1/Makefile" 2>/dev/null)
    src=${src:-$1}
    rev=$(git -C "$src" rev-parse --short HEAD 2>/dev/null) || { echo "$src, not a git tree"; return; }
    git -C "$src" diff --quiet HEAD -- ':(top)' ':(top,exclude)docs' 2>/dev/null \
        && echo "$src at $rev" || echo "$src at $rev with local changes"
}

report() {
    local md="$OUT.md" size
    {
        echo "# CPU time and system calls per operation, by role"
        echo
        echo "Command: \`bench/cpu-per-op.sh\` (ROUNDS=$ROUNDS RUN_SECS=$RUN_SECS PERF_SECS=$PERF_SECS RECORDS=$RECORDS"
        echo "CONNS=$CONNS DEPTH=$DEPTH SIZES=\"$SIZES\" MIXES=\"$MIXES\" SYSTEMS=\"${SYSTEMS[*]}\"${BASE_BUILD:+ BASE_BUILD=$BASE_BUILD}); build $BUILD_DIR"
        echo "(source: $(build_source_rev "$BUILD_DIR"))."
        md_machine
        echo
        echo "Load: cocytus-bench, $CONNS connections ($DEPTH request(s) in flight each, closed loop), zipfian keys over"
        echo "$RECORDS records, $RUN_SECS s per run. CPU = utime + stime of the server processes (/proc/PID/stat)"
        echo "per operation, summed over a role; medians over $ROUNDS rounds that alternate the order of the"
        echo "systems; ± = spread, (max - min) / median of the per-round totals. Ratios are medians of the"
        echo "per-round ratios. System calls: every call from \`perf stat -e raw_syscalls:sys_enter\` in a separate"
        echo "$PERF_SECS s window per run (tracepoints cost CPU, kept out of the CPU window); rw = read/write-family"
        echo "calls from /proc/PID/io (syscr + syscw) in the CPU window (send/recv and sendmsg are not counted there)."
        for size in $SIZES; do
            echo
            echo "## $size B values: server CPU-us per operation (replicated systems: total (roles))"
            echo
            cpu_table "$size"
            echo
            echo "Ratios of server CPU per operation:"
            echo
            ratio_table "$size"
            echo
            echo "Targets of issue #13:"
            echo
            targets_table "$size"
            [ -s "$SCSV" ] || continue
            echo
            echo "## $size B values: system calls per operation (perf window)"
            echo
            syscall_table "$size"
        done
    } >"$md"
}

main() {
    eval_init cpu-per-op
    [ "$PERF" = 0 ] || command -v perf >/dev/null || die "no perf (PERF=0 runs without the syscall window)"
    CSV="$OUT.csv"
    SCSV="$OUT-syscalls.csv"
    mkdir -p "$(dirname "$OUT")"
    echo "round,size,read_ratio,system,role,ops,seconds,cpu_s,cpu_us_per_op,rw_calls_per_op" >"$CSV"
    echo "round,size,read_ratio,system,role,ops,syscall,count,per_op" >"$SCSV"
    FAILED=0
    start_systems
    local size round rr sys
    for size in $SIZES; do
        load_size "$size"
        for ((round = 1; round <= ROUNDS; round++)); do
            for rr in $MIXES; do
                for sys in $(order_for "$round" "${SYSTEMS[@]}"); do
                    cpu_run "$round" "$size" "$rr" "$sys"
                    [ "$PERF" = 0 ] || perf_run "$round" "$size" "$rr" "$sys"
                done
            done
        done
        report
    done
    note "wrote $CSV, $SCSV, $OUT.md in ${SECONDS} s"
    cat "$OUT.md"
    return "$FAILED"
}

main "$@"
