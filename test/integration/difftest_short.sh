#!/usr/bin/env bash
# difftest_short.sh - make check's short run of the differential tester
# (test/difftest/difftest.py, scripts/difftest): a fixed number of random
# request sequences from a fixed seed, each sent to Debian's memcached 1.6
# and to a plain cocytus-server, replies compared byte for byte after the
# masks of docs/compat.md; then every difference a long run ever found,
# replayed.  Some seconds; long runs: scripts/difftest --seconds N.  Skipped (77) when memcached is not installed.  difftest.py
# starts both servers itself and stops them.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin"
memcached_bin=${MEMCACHED:-$(command -v memcached || echo /usr/bin/memcached)}
if [ ! -x "$memcached_bin" ]; then
    echo "SKIP: no memcached to compare with (apt-get install memcached)"
    exit 77
fi
DIFFTEST_SEED=${DIFFTEST_SEED:-14}
DIFFTEST_CASES=${DIFFTEST_CASES:-150}

python3 "$top_srcdir/test/difftest/difftest.py" --seed "$DIFFTEST_SEED" --cases "$DIFFTEST_CASES" \
    --memcached "$memcached_bin" --server "$server_bin"
rc=$?
case $rc in
    0) ok "difftest seed $DIFFTEST_SEED, $DIFFTEST_CASES sequences: no difference" ;;
    77) echo "SKIP: difftest could not start a server"; exit 77 ;;
    *) fail "difftest seed $DIFFTEST_SEED: differences (replay commands above)" ;;
esac

# -X and -W on both servers: dumps and watch refused with memcached's words.
python3 "$top_srcdir/test/difftest/difftest.py" --seed 15 --cases 300 --variant=-X \
    --memcached "$memcached_bin" --server "$server_bin"
case $? in
    0) ok "difftest seed 15, 300 sequences, both servers with -X -W: no difference" ;;
    77) echo "note: difftest could not start a server for -X" ;;
    *) fail "difftest seed 15 with -X -W: differences (replay commands above)" ;;
esac

# Every difference the long runs found (docs/compat.md), replayed:
# seed:case:session.
FOUND="14014:2037:default 14014:2819:default 14014:3346:default 14014:4820:-C
14014:4825:-C 14014:4829:-C 14014:4983:-C 14014:5824:default 14014:12049:default
14014:1173:-F 14014:2474:-Y 20261124:644:default 20261124:680:default
20261124:1736:-C 20261124:3142:default 20261124:4523:default 1414:7503:default
1414:7648:default 77:858:default 1124:1720:-C
2411:1662:default 2411:1918:default 2411:2278:default 2411:5531:default
2411:6824:default 2411:7267:default 4242:61:default
4242:1295:default 3011:1755:-Y 3011:4396:-C 5150:2951:default 6262:2599:default 8484:5046:default 1066:616:-C
1066:661:-C 2511:3667:default 2511:3841:default 2511:4073:default"
# A replay that differs is run again, up to REPLAY_TRIES times: a few of
# these cases depend on timing that neither server fixes (when an expiry
# sweep or memcached's crawler removes a flushed item that a later
# flush_all in the future would revive: case 14014:12049 differed once in
# a distcheck on a loaded machine, docs/compat.md "Items flushed and then
# revived").  A fix that is lost differs every time and still fails.
REPLAY_TRIES=3
replay_log=$(mktemp "${TMPDIR:-/tmp}/difftest_short.XXXXXX")
on_exit "rm -f '$replay_log'"
for f in $FOUND; do
    IFS=: read -r seed n variant <<<"$f"
    equal=0
    for try in $(seq "$REPLAY_TRIES"); do
        if python3 "$top_srcdir/test/difftest/difftest.py" --seed "$seed" --case "$n" \
            --variant="$variant" --no-shrink --memcached "$memcached_bin" --server "$server_bin" \
            >"$replay_log" 2>&1; then
            equal=$try
            break
        fi
    done
    if [ "$equal" -eq 1 ]; then
        ok "difftest seed $seed case $n ($variant)"
    elif [ "$equal" -gt 1 ]; then
        ok "difftest seed $seed case $n ($variant): equal on try $equal (timing-dependent)"
    else
        cat "$replay_log"
        fail "difftest seed $seed case $n ($variant) differs again ($REPLAY_TRIES tries): scripts/difftest --seed $seed --case $n --variant=$variant"
    fi
done
finish
