#!/usr/bin/env bash
# Metadata benchmark (issue 8 §1): airlock against Debian's docker-registry
# (CNCF distribution 2.8) in the same run, on loopback.
#
# For each server, one client (scripts/bench/metadata-push.py, python3
# http.client over one keep-alive connection) pushes one small OCI image
# manifest, PUTs it under TAGS tags one at a time, then pushes REFERRERS
# artifact manifests whose subject is that manifest, and lists them with the
# referrers API (following Link). Figures:
#   - tag PUT latency p50/p99 (ms) over the last 1,000 PUTs before 1k, 10k
#     and 100k tags (checkpoints above TAGS are skipped),
#   - metadata bytes written per tag PUT: growth of the apparent size of the
#     server's data directory over the last 200 PUTs before each checkpoint,
#   - peak RSS (VmHWM of the server process),
#   - referrer PUT p50/p99, bytes per referrer, and how many the referrers
#     API lists (docker-registry 2.8 has no referrers API: n/a).
# Targets (airlock, at the largest checkpoint): a tag PUT writes < 64 KiB of
# metadata, tag PUT p99 <= docker-registry's, peak RSS < 128 MiB.
#
# Settings (environment): TAGS (default 100000), REFERRERS (default 2000),
# CHECKPOINTS (default 1000,10000,100000), FILL (default 8: the tags outside
# the measured windows are PUT untimed over FILL connections at once, so
# 100,000 tags take minutes; 0: every tag one at a time), BENCH_DIR
# (default /var/tmp), KEEP_LOGS (a directory: the servers' logs are copied
# there; with AIRLOCK_LOG=warn,airlock::state=debug,airlock::store::fs=debug
# airlock's log times each commit's phases), AIRLOCK_BIN (default: cargo
# build --release). Needs docker-registry,
# python3, curl. airlock keeps its default settings (64M page cache).
set -euo pipefail

case ${1:-} in
-h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
esac
[ $# -eq 0 ] || {
    echo "${0##*/}: usage: ${0##*/}   (settings come from the environment; see --help)" >&2
    exit 1
}
export BENCH_DIR=${BENCH_DIR:-/var/tmp}
[ -d "$BENCH_DIR" ] || {
    echo "${0##*/}: BENCH_DIR $BENCH_DIR is not a directory" >&2
    exit 1
}
. "$(dirname "$0")/bench/lib.sh"
helpers=$repo/scripts/bench
bench_cleanup_extra() {
    [ -z "${KEEP_LOGS:-}" ] || cp "$work"/*.log "$KEEP_LOGS"/ 2>/dev/null || true
}
HOST=127.0.0.1
TAGS=${TAGS:-100000}
REFERRERS=${REFERRERS:-2000}
CHECKPOINTS=${CHECKPOINTS:-1000,10000,100000}
FILL=${FILL:-8}
[[ $TAGS =~ ^[1-9][0-9]*$ ]] || die "TAGS must be a positive integer, got '$TAGS'"
[[ $REFERRERS =~ ^[0-9]+$ ]] || die "REFERRERS must be a non-negative integer, got '$REFERRERS'"
[[ $CHECKPOINTS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "CHECKPOINTS must be a comma-separated list of counts"
[[ $FILL =~ ^[0-9]+$ ]] || die "FILL must be a non-negative integer, got '$FILL'"
# Always measure at the final count too.
CHECKPOINTS=$(echo "$CHECKPOINTS,$TAGS" | tr , '\n' | awk -v t="$TAGS" '$1 <= t' | sort -nu | paste -sd,)

need docker-registry docker-registry
need python3 python3
need curl curl
[ -r "$helpers/metadata-push.py" ] || die "$helpers/metadata-push.py missing"

airlock_binary

need_kib=$((TAGS * 40 + 1024 * 1024))
avail_kib=$(df -Pk "$work" | awk 'NR == 2 { print $4 }')
[ "$avail_kib" -ge "$need_kib" ] || die "$BENCH_DIR has $((avail_kib / 1024)) MiB free; need about $((need_kib / 1024)) MiB"

# run NAME PORT DATA PID: the client's JSON in $work/NAME.json
run() {
    note "$1: $TAGS tag PUTs, $REFERRERS referrer PUTs"
    local t0=$SECONDS
    python3 "$helpers/metadata-push.py" "$HOST" "$2" "$3" "$4" "$TAGS" "$REFERRERS" "$CHECKPOINTS" "$FILL" \
        >"$work/$1.json" || die "$1: client failed"
    note "$1: done in $((SECONDS - t0)) s"
}

# --- airlock -------------------------------------------------------------------
port=$(free_port)
mkdir -p "$work/airlock"
"$airlock" serve --data "$work/airlock" --listen "$HOST:$port" --allow-push >"$work/airlock.log" 2>&1 &
pid=$!
pids+=("$pid")
wait_up airlock "$pid" "http://$HOST:$port/v2/" "$work/airlock.log"
run airlock "$port" "$work/airlock" "$pid"
kill "$pid"
wait "$pid" 2>/dev/null || true

# --- docker-registry -------------------------------------------------------------
port=$(free_port)
start_registry "$HOST:$port" "$work/registry"
pid=$registry_pid
run ref "$port" "$work/registry" "$pid"

# --- table -----------------------------------------------------------------------
python3 - "$work/airlock.json" "$work/ref.json" "$TAGS" "$REFERRERS" <<'EOF'
import json, sys
a, r = (json.load(open(p)) for p in sys.argv[1:3])
tags, refs = sys.argv[3], sys.argv[4]
rows = []
def row(fig, x, y, fmt, target=""):
    ratio = f"{x / y:.2f}" if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y else "-"
    f = lambda v: fmt.format(v) if isinstance(v, (int, float)) else str(v)
    rows.append((fig, f(x), f(y), ratio, target))
last = max(a["tags"], key=int)
for cp in sorted(a["tags"], key=int):
    at, rt = a["tags"][cp], r["tags"][cp]
    final = cp == last
    row(f"tag PUT p50 ms @{cp} tags", at["p50_ms"], rt["p50_ms"], "{:.2f}")
    ok = at["p99_ms"] <= rt["p99_ms"]
    row(f"tag PUT p99 ms @{cp} tags", at["p99_ms"], rt["p99_ms"], "{:.2f}",
        ("<= ref " + ("PASS" if ok else "FAIL")) if final else "")
    ok = at["bytes_per_put"] < 64 * 1024
    row(f"metadata bytes/tag PUT @{cp}", at["bytes_per_put"], rt["bytes_per_put"], "{:.0f}",
        ("< 65536 " + ("PASS" if ok else "FAIL")) if final else "")
if a.get("referrers"):
    ar, rr = a["referrers"], r["referrers"]
    row(f"referrer PUT p50 ms ({refs})", ar["p50_ms"], rr["p50_ms"], "{:.2f}")
    row(f"referrer PUT p99 ms ({refs})", ar["p99_ms"], rr["p99_ms"], "{:.2f}")
    row("metadata bytes/referrer PUT", ar["bytes_per_put"], rr["bytes_per_put"], "{:.0f}")
    row("referrers listed", ar["listed"], rr["listed"] if rr["listed"] >= 0 else "n/a", "{}",
        "= " + refs + (" PASS" if ar["listed"] == int(refs) else " FAIL"))
ok = a["hwm_kib"] < 128 * 1024
row("peak RSS MiB (VmHWM)", a["hwm_kib"] / 1024, r["hwm_kib"] / 1024, "{:.1f}",
    "< 128 " + ("PASS" if ok else "FAIL"))
print(f"airlock metadata benchmark: TAGS={tags} REFERRERS={refs}, airlock vs docker-registry, loopback")
print(f"| {'figure':34} | {'airlock':>10} | {'docker-registry':>15} | {'ratio':>6} | {'target':14} |")
print(f"|{'-' * 36}|{'-' * 12}|{'-' * 17}|{'-' * 8}|{'-' * 16}|")
for fig, x, y, ratio, t in rows:
    print(f"| {fig:34} | {x:>10} | {y:>15} | {ratio:>6} | {t:14} |")
EOF
