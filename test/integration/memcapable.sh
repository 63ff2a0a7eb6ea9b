#!/usr/bin/env bash
# Protocol conformance: runs libmemcached's memccapable in ASCII (-a) and
# binary (-b) mode, each against a freshly started server on a free loopback
# port.  Passes only if both modes report all 27 tests passed; exits 77
# (automake's "skip") when memccapable is not installed.
set -u

RUN_TIMEOUT=60              # seconds for one memccapable run

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
server_pid=""

need_memccapable
need_built "$server_bin"

stop_server() {
    stop_pid "$server_pid"
    server_pid=""
}
on_exit stop_server

# run_mode MODE: one memccapable run against a fresh server.
run_mode() {
    start_server /dev/null || { fail "$server_bin did not start"; return 1; }
    memccapable_check "$server_bin" "$1" "127.0.0.1:$server_port" "$RUN_TIMEOUT"
    stop_server
}

run_mode -a
run_mode -b
finish
