#!/usr/bin/env bash
# run-all.sh - runs every experiment of docs/evaluation/ one after the other
# (each starts and stops its own systems), then cpu.sh over the throughput
# runs.  One failing experiment does not stop the others; the exit status
# says whether all succeeded.  Takes about 55 minutes on the 2-core
# development machine.  Settings of each script pass through the
# environment (see each script's header); ONLY="memory sync" runs a subset.
#
# usage: bench/eval/run-all.sh
# The log of each experiment goes to $EVAL_LOGS/<name>.log (default
# /tmp/cocytus-eval-logs); the results themselves are the files in
# docs/evaluation/.

set -u
EVAL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$EVAL_DIR/../.." && pwd)
OUT_DIR=${EVAL_OUT:-$REPO_DIR/docs/evaluation}
ONLY=${ONLY:-"memory throughput cpu schemes sync client-location recovery failure"}
LOG_DIR=${EVAL_LOGS:-${TMPDIR:-/tmp}/cocytus-eval-logs}

mkdir -p "$OUT_DIR" "$LOG_DIR" || exit 1
failed=()
SECONDS=0
for name in $ONLY; do
    [ -x "$EVAL_DIR/$name.sh" ] || { echo "run-all: no bench/eval/$name.sh" >&2; failed+=("$name"); continue; }
    start=$SECONDS
    echo "run-all: $name ..." >&2
    if "$EVAL_DIR/$name.sh" >"$LOG_DIR/$name.log" 2>&1; then
        echo "run-all: $name done in $((SECONDS - start)) s" >&2
    else
        echo "run-all: $name FAILED after $((SECONDS - start)) s (see $LOG_DIR/$name.log)" >&2
        failed+=("$name")
    fi
done
echo "run-all: finished in ${SECONDS} s; ${#failed[@]} failed${failed[*]:+: ${failed[*]}}" >&2
[ "${#failed[@]}" -eq 0 ]
