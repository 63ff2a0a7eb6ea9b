#!/usr/bin/env bash
# control_auth.sh - make-check test of the authenticated control plane
# (docs/security.md): on the servers of every role (data, parity, primary,
# backup, plain) and on the coordinator, every `cocytus ...` control command sent
# on an ordinary connection is refused with a clear error and changes
# nothing, and the same commands are accepted after `cocytus auth` proved
# the cluster secret (through cocytus-cli admin).  The forged slot takeover
# of issue 15 (import begin, set, import commit) is tried both ways.
# Three clusters, one node each (rs:3:5, then pbr:1, then plain in the
# second one's directory); the trap stops them.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"

cli=$build_dir/client/cocytus-cli
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$cli"

rsdir=$(mktemp -d "${TMPDIR:-/tmp}/control_auth.XXXXXX")
pbrdir=$rsdir/pbr
mkdir -p "$pbrdir"

cleanup() {
    cluster_remove "$pbrdir"
    cluster_remove "$rsdir"
}
on_exit cleanup

REFUSED="CLIENT_ERROR cocytus commands need authentication (cocytus auth)"

# refused ADDR 'cocytus WORDS': the command, on a plain connection, gets
# the refusal.
refused() {
    local reply
    reply=$(mc "$1" "$2\r\n" 2>/dev/null)
    if [ "$reply" = "$REFUSED" ]; then
        ok "$3: '$2' refused without the secret"
    else
        fail "$3: '$2' without the secret answered '$reply'"
    fi
}

# accepted DIR ADDR 'cocytus WORDS' WHAT: through cocytus-cli admin, the
# command reaches its engine (exit 0, or 1 for the engine's own error such
# as dpinfo on a parity process that serves nobody) and is not refused.
accepted() {
    local out rc
    out=$("$cli" --dir "$1" --timeout 3000 admin "$2" $3 2>&1)
    rc=$?
    if [ "$rc" -le 1 ] && ! grep -q "need authentication" <<<"$out"; then
        ok "$4: '$3' accepted with the secret ($(head -1 <<<"$out" | tr -d '\000'))"
    else
        fail "$4: '$3' with the secret: exit $rc: $(head -3 <<<"$out" | tr -d '\000' | tr '\n' '|')"
    fi
}

addr_of() { awk -v r="$2" -v i="$3" '$1 == r && $3 == i { print $5; exit }' "$1/endpoints"; }
epoch_of() { mc "$1" "config get cluster\r\n" 2>/dev/null | sed -n 2p; }

# --- an rs:3:5 group: data and parity processes, a coordinator ---
cluster_up "$rsdir" 12 14000 22000 --nodes 1 --scheme rs:3:5 --no-proxy --memory 16 --region 16 \
    || { fail "rs cluster up"; exit 1; }
coord=$(cat "$rsdir/coordinator")
data0=$(addr_of "$rsdir" data 0)
data1=$(addr_of "$rsdir" data 1)
parity0=$(addr_of "$rsdir" parity 0)
ok "rs:3:5 up: data $data0 $data1, parity $parity0, coordinator $coord"

# A key data 1 serves, and its slot: data 0 answers MOVED for it.
key="" slot=""
for i in $(seq 1 400); do
    moved=$(mc "$data0" "get ak$i\r\n")
    if [[ $moved == "SERVER_ERROR MOVED "*" $data1" ]]; then
        key=ak$i
        slot=$(awk '{ print $3 }' <<<"$moved")
        break
    fi
done
[ -n "$key" ] || { fail "no key of data 1 found"; exit 1; }

for c in "cocytus info" "cocytus meta" "cocytus used" "cocytus region 0 16" \
    "cocytus migrate status" "cocytus migrate $slot $data1 2" "cocytus import begin" \
    "cocytus import commit $slot 2" "cocytus no-such-word"; do
    refused "$data0" "$c" "data"
done
for c in "cocytus info" "cocytus dpinfo" "cocytus meta 0" "cocytus used 0" "cocytus region 0 16" \
    "cocytus import begin"; do
    refused "$parity0" "$c" "parity"
done
for c in "cocytus status" "cocytus groups" "cocytus moves" "cocytus move $slot 0"; do
    refused "$coord" "$c" "coordinator"
done

# Issue 15's forged takeover, without the secret: nothing changes.
exec 3<>"/dev/tcp/${data0%:*}/${data0##*:}"
printf 'cocytus import begin\r\nset %s 0 0 6\r\nforged\r\ncocytus import commit %s 2\r\n' \
    "$key" "$slot" >&3
replies=""
for _ in 1 2 3; do
    IFS= read -r -t 3 line <&3 || break
    replies+="${line%$'\r'}|"
done
exec 3<&- 3>&-
[ "$replies" = "$REFUSED|SERVER_ERROR MOVED $slot 1 $data1|$REFUSED|" ] \
    || fail "forged import without the secret answered '$replies'"
[ "$(epoch_of "$data0")" = 1 ] || fail "a refused import commit changed data 0's epoch"
[[ $(mc "$data0" "get $key\r\n") == "SERVER_ERROR MOVED $slot 1 $data1" ]] \
    || fail "after a refused import data 0 serves $key"
[ "$(ctl "$rsdir" "$coord" "cocytus moves" | tail -1)" = END ] \
    || fail "a refused move left a move behind: $(ctl "$rsdir" "$coord" "cocytus moves")"
[ "$(ctl "$rsdir" "$coord" "cocytus status" | head -1)" = "epoch 1" ] \
    || fail "the coordinator's epoch changed after refused commands"
ok "forged import and move without the secret: epoch 1, $key still MOVED at data 0"

# A wrong proof: refused, and the connection stays unauthenticated.
exec 3<>"/dev/tcp/${data0%:*}/${data0##*:}"
printf 'cocytus auth\r\n' >&3
IFS= read -r -t 3 nonce <&3
printf 'cocytus auth 0123456789abcdef\r\ncocytus info\r\n' >&3
IFS= read -r -t 3 r1 <&3
IFS= read -r -t 3 r2 <&3
exec 3<&- 3>&-
[[ ${nonce%$'\r'} =~ ^AUTH\ [0-9a-f]{32}$ ]] || fail "cocytus auth answered '$nonce'"
[ "${r1%$'\r'}" = "CLIENT_ERROR authentication failed" ] || fail "a wrong proof answered '$r1'"
[ "${r2%$'\r'}" = "$REFUSED" ] || fail "after a wrong proof 'cocytus info' answered '$r2'"
grep -q "refused 'cocytus info' from 127.0.0.1:\|authentication from 127.0.0.1:[0-9]* failed" \
    "$rsdir"/data-0-0.log || fail "data 0's log does not name the refused peer"
ok "a wrong proof is refused and logged with the peer's address"

# With the secret: every command is accepted.
for c in "cocytus info" "cocytus meta" "cocytus used" "cocytus migrate status"; do
    accepted "$rsdir" "$data0" "$c" "data"
done
for c in "cocytus info" "cocytus dpinfo" "cocytus meta 0" "cocytus used 0"; do
    accepted "$rsdir" "$parity0" "$c" "parity"
done
for c in "cocytus status" "cocytus groups" "cocytus moves"; do
    accepted "$rsdir" "$coord" "$c" "coordinator"
done
out=$("$cli" --dir "$rsdir" --timeout 3000 admin "$parity0" region 0 16 2>&1)
[ $? -eq 0 ] || fail "parity: 'cocytus region 0 16' with the secret: $(tr -d '\000' <<<"$out" | head -2)"
ok "parity: region read with the secret"
# The same import, with the secret, is taken: the process owns the slot.
replies=$(printf 'cocytus import begin %s\nset %s 0 0 6\nforged\ncocytus import commit %s 2\n' \
    "$slot" "$key" "$slot" | "$cli" --dir "$rsdir" --timeout 3000 admin "$data0" - 2>&1 | tr '\n' '|')
[ "$replies" = "OK|STORED|OK|" ] || fail "import with the secret answered '$replies'"
[ "$(epoch_of "$data0")" = 2 ] || fail "an accepted import commit left data 0 at epoch $(epoch_of "$data0")"
ok "import with the secret: data 0 took slot $slot at epoch 2"
# A move through the coordinator with the secret (cocytus-cli move).
"$cli" --dir "$rsdir" --timeout 3000 move "$((slot == 0 ? 1 : 0))" 0 >/dev/null 2>&1 || true
ok "coordinator: move sent with the secret"

# --- a pbr:1 group: primary and backup ---
cluster_up "$pbrdir" 6 14000 22000 --nodes 1 --scheme pbr:1 --no-proxy --memory 16 \
    || { fail "pbr cluster up"; finish; }
primary=$(addr_of "$pbrdir" primary 0)
backup=$(addr_of "$pbrdir" backup 0)
for c in "cocytus info" "cocytus meta" "cocytus migrate status" "cocytus import begin"; do
    refused "$primary" "$c" "primary"
done
for c in "cocytus info" "cocytus meta" "cocytus promote"; do
    refused "$backup" "$c" "backup"
done
[[ $(mc "$backup" "set pk 0 0 1\r\nx\r\n") == "SERVER_ERROR backup"* ]] \
    || fail "after a refused promote the backup takes writes"
ok "backup: still a backup after a refused promote"
for c in "cocytus info" "cocytus meta" "cocytus migrate status"; do
    accepted "$pbrdir" "$primary" "$c" "primary"
done
for c in "cocytus info" "cocytus meta"; do
    accepted "$pbrdir" "$backup" "$c" "backup"
done
out=$("$cli" --dir "$pbrdir" --timeout 3000 admin "$backup" promote 2>&1)
grep -q "^STAT promoted 1" <<<"$out" || fail "promote with the secret: '$out'"
ok "backup: promote accepted with the secret"

# --- a plain process: the server's own words (migrate, import) ---
cluster_remove "$pbrdir"
mkdir -p "$pbrdir"
cluster_up "$pbrdir" 4 14000 22000 --nodes 1 --scheme plain --no-proxy --memory 16 \
    || { fail "plain cluster up"; finish; }
plain=$(addr_of "$pbrdir" plain 0)
for c in "cocytus migrate status" "cocytus import begin" "cocytus import commit 1 2"; do
    refused "$plain" "$c" "plain"
done
accepted "$pbrdir" "$plain" "cocytus migrate status" "plain"

finish
