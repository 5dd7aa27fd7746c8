#!/usr/bin/env bash
# Peak resident set of `airlock serve` while CLIENTS clients each pull a
# different large blob at once, over plain HTTP/1.1 on loopback (issue 26:
# 64 clients, 256 MiB blobs, RSS < 64 MiB).
#
#   scripts/bench-many-blobs.sh
#
# Setup (not measured): builds airlock, starts `airlock serve --allow-push`
# on a fresh data dir, pushes CLIENTS blobs of BLOB_MIB MiB each
# (scripts/bench/push-many-blobs.py: different digests, every digest
# computed) and restarts it (a fresh process, as after an import). Then two passes, each one `curl --parallel --parallel-max
# CLIENTS` fetching every blob once, all at once:
#   1. first reads: each blob is hashed as it is sent (verify once),
#   2. verified reads: sent from the file with sendfile(2).
# For each pass: wall time, aggregate MiB/s, airlock's peak VmRSS (sampled
# every 50 ms) and its CPU time per MiB; every download must be complete.
# Prints a table; exit 0 when the benchmark ran, whether or not the target
# was met.
#
# Environment:
#   CLIENTS      clients at once, one blob each (default 64)
#   BLOB_MIB     size of each blob in MiB (default 256)
#   BENCH_DIR    where the temporary work dir goes (default /var/tmp; needs
#                CLIENTS * BLOB_MIB MiB free plus 1 GiB); removed at exit
#   AIRLOCK_BIN  use this binary instead of building target/release/airlock
set -euo pipefail

case "${1:-}" in
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
esac
BENCH_DIR=${BENCH_DIR:-/var/tmp}
. "$(dirname "$0")/bench/lib.sh" # die note need free_port wait_up airlock_binary cpu_ticks rss_sampler; $work, $pids
[ $# -eq 0 ] || die "usage: $prog   (settings come from the environment; see --help)"
CLIENTS=${CLIENTS:-64}
BLOB_MIB=${BLOB_MIB:-256}
[[ $CLIENTS =~ ^[1-9][0-9]*$ ]] || die "CLIENTS must be a positive integer, got '$CLIENTS'"
[[ $BLOB_MIB =~ ^[1-9][0-9]*$ ]] || die "BLOB_MIB must be a positive integer, got '$BLOB_MIB'"
need curl curl
need python3 python3
HOST=127.0.0.1
size=$((BLOB_MIB << 20))

avail_mib=$(($(df -Pk "$work" | awk 'NR == 2 { print $4 }') / 1024))
[ "$avail_mib" -ge $((CLIENTS * BLOB_MIB + 1024)) ] ||
    die "$BENCH_DIR has $avail_mib MiB free; need $((CLIENTS * BLOB_MIB + 1024)) MiB"
airlock_binary

port=$(free_port)
start() { # airlock serve on $port over $work/data; its pid in $pid
    "$airlock" serve --data "$work/data" --listen "$HOST:$port" --log warn --allow-push \
        >>"$work/airlock.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_up airlock "$pid" "http://$HOST:$port/v2/" "$work/airlock.log"
}
note "starting airlock on $HOST:$port (--allow-push)"
start
note "pushing $CLIENTS blobs of $BLOB_MIB MiB"
python3 "$repo/scripts/bench/push-many-blobs.py" "$HOST:$port" bench/many "$CLIENTS" "$size" >"$work/digests" ||
    die "pushing the blobs failed"
# A fresh process, as after an import: nothing of the uploads in memory, and
# no blob verified yet (verify-once records live in the process).
note "restarting airlock"
kill "$pid"
wait "$pid" 2>/dev/null || true
start
base_kib=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")

pass() { # NAME: every blob at once; $work/res.NAME = "wall_s mib_s peak_rss_kib cpu_ms_per_mib"
    local args=() d c0 c1 t0 t1 peak ok sampler
    while read -r d; do args+=(-o /dev/null "http://$HOST:$port/v2/bench/many/blobs/$d"); done <"$work/digests"
    note "($1) $CLIENTS downloads at once"
    rss_sampler "$pid" "$work/rss.$1"
    c0=$(cpu_ticks "$pid")
    t0=$(date +%s%N)
    curl -sS --parallel --parallel-immediate --parallel-max "$CLIENTS" -w '%{http_code} %{size_download}\n' \
        "${args[@]}" >"$work/curl.$1" 2>&1 || true
    t1=$(date +%s%N)
    c1=$(cpu_ticks "$pid")
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    ok=$(grep -cx "200 $size" "$work/curl.$1" || true)
    [ "$ok" = "$CLIENTS" ] || {
        cat "$work/curl.$1" >&2
        die "($1) $ok of $CLIENTS downloads complete"
    }
    peak=$(cat "$work/rss.$1")
    awk -v n="$CLIENTS" -v m="$BLOB_MIB" -v t0="$t0" -v t1="$t1" -v a="$c0" -v b="$c1" -v hz="$(getconf CLK_TCK)" -v p="$peak" \
        'BEGIN { w = (t1 - t0) / 1e9; printf "%.2f %.1f %s %.3f\n", w, n * m / w, p, (b - a) / hz * 1000 / (n * m) }' >"$work/res.$1"
    sleep 1
}
pass first
pass verified
sent=$(curl -sf "http://$HOST:$port/metrics" | awk '$1 == "airlock_sendfile_bytes_total" { print $2 }')

echo
echo "airlock: $CLIENTS clients at once, each pulling a different $BLOB_MIB MiB blob (loopback, $(nproc) CPUs, one curl --parallel)"
echo "  RSS of the restarted server before the passes: $(awk -v k="$base_kib" 'BEGIN { printf "%.1f", k / 1024 }') MiB; bytes sent with sendfile(2) in all: ${sent:-?}"
echo
printf '| %-28s | %8s | %10s | %13s | %12s | %-12s |\n' pass "wall s" "MiB/s" "peak RSS MiB" "CPU ms/MiB" "RSS < 64 MiB"
printf '|%s|%s|%s|%s|%s|%s|\n' "$(printf '%30s' '' | tr ' ' -)" "$(printf '%10s' '' | tr ' ' -)" "$(printf '%12s' '' | tr ' ' -)" \
    "$(printf '%15s' '' | tr ' ' -)" "$(printf '%14s' '' | tr ' ' -)" "$(printf '%14s' '' | tr ' ' -)"
for p in first verified; do
    read -r w t k c <"$work/res.$p"
    lab="first reads (hashed)"
    [ $p = verified ] && lab="verified reads (sendfile)"
    awk -v l="$lab" -v w="$w" -v t="$t" -v k="$k" -v c="$c" 'BEGIN {
        r = k / 1024
        printf "| %-28s | %8.2f | %10.1f | %13.1f | %12.3f | %-12s |\n", l, w, t, r, c, (r < 64 ? "PASS" : "FAIL")
    }'
done
