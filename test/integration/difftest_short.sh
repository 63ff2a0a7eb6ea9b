#!/usr/bin/env bash
# difftest_short.sh - make check's short run of the differential tester
# (test/difftest/difftest.py, scripts/difftest): a fixed number of random
# request sequences from a fixed seed, each sent to Debian's memcached 1.6
# and to a plain cocytus-server, replies compared byte for byte after the
# masks of docs/compat.md.  A few seconds; long runs: scripts/difftest
# --seconds N.  Skipped (77) when memcached is not installed.  difftest.py
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
finish
