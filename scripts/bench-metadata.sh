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
# The three servers run side by side: airlock with its defaults, airlock
# with `--metadata-copies 1` (what the second copies of issue 38 cost) and
# docker-registry; the client sends each measured PUT to each in turn.
# Targets (airlock, at the largest checkpoint): a tag PUT writes < 64 KiB of
# metadata, tag PUT p99 <= docker-registry's, peak RSS < 128 MiB; against
# one copy: tag PUT p99 <= 1.2x, bytes per tag PUT <= 2.2x.
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

# --- the servers ---------------------------------------------------------------
# airlock with its defaults (two metadata copies on the filesystem store),
# airlock with one copy (the cost of the copies, issue 38), docker-registry;
# the client sends each measured PUT to each of them in turn.
start_airlock() { # NAME ARGS...: sets pid, port
    local name=$1
    shift
    port=$(free_port)
    mkdir -p "$work/$name"
    "$airlock" serve --data "$work/$name" --listen "$HOST:$port" --allow-push "$@" >"$work/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_up "$name" "$pid" "http://$HOST:$port/v2/" "$work/$name.log"
}
start_airlock airlock
a_port=$port a_pid=$pid
start_airlock airlock1 --metadata-copies 1
o_port=$port o_pid=$pid
port=$(free_port)
start_registry "$HOST:$port" "$work/registry"
r_port=$port r_pid=$registry_pid

note "all three: $TAGS tag PUTs, $REFERRERS referrer PUTs"
t0=$SECONDS
python3 "$helpers/metadata-push.py" "$HOST" "$a_port,$o_port,$r_port" \
    "$work/airlock,$work/airlock1,$work/registry" "$a_pid,$o_pid,$r_pid" \
    "$TAGS" "$REFERRERS" "$CHECKPOINTS" "$FILL" >"$work/all.json" || die "client failed"
note "done in $((SECONDS - t0)) s"

# --- table -----------------------------------------------------------------------
python3 - "$work/all.json" "$TAGS" "$REFERRERS" <<'EOF'
import json, sys
a, o, r = json.load(open(sys.argv[1]))
tags, refs = sys.argv[2], sys.argv[3]
rows = []
def ratio(x, y):
    return f"{x / y:.2f}" if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y else "-"
def row(fig, x, y, fmt, target="", one=None, one_target=""):
    f = lambda v: fmt.format(v) if isinstance(v, (int, float)) else str(v)
    rows.append((fig, f(x), f(one) if one is not None else "", f(y), ratio(x, y),
                 ratio(x, one) if one is not None else "", target, one_target))
last = max(a["tags"], key=int)
for cp in sorted(a["tags"], key=int):
    at, ot, rt = a["tags"][cp], o["tags"][cp], r["tags"][cp]
    final = cp == last
    row(f"tag PUT p50 ms @{cp} tags", at["p50_ms"], rt["p50_ms"], "{:.2f}", one=ot["p50_ms"])
    ok = at["p99_ms"] <= rt["p99_ms"]
    ok1 = at["p99_ms"] <= 1.2 * ot["p99_ms"]
    row(f"tag PUT p99 ms @{cp} tags", at["p99_ms"], rt["p99_ms"], "{:.2f}",
        ("<= ref " + ("PASS" if ok else "FAIL")) if final else "", ot["p99_ms"],
        "<= 1.2 " + ("PASS" if ok1 else "FAIL"))
    ok = at["bytes_per_put"] < 64 * 1024
    ok1 = at["bytes_per_put"] <= 2.2 * ot["bytes_per_put"]
    row(f"metadata bytes/tag PUT @{cp}", at["bytes_per_put"], rt["bytes_per_put"], "{:.0f}",
        ("< 65536 " + ("PASS" if ok else "FAIL")) if final else "", ot["bytes_per_put"],
        "<= 2.2 " + ("PASS" if ok1 else "FAIL"))
if a.get("referrers"):
    ar, rr = a["referrers"], r["referrers"]
    orr = o["referrers"]
    row(f"referrer PUT p50 ms ({refs})", ar["p50_ms"], rr["p50_ms"], "{:.2f}", one=orr["p50_ms"])
    row(f"referrer PUT p99 ms ({refs})", ar["p99_ms"], rr["p99_ms"], "{:.2f}", one=orr["p99_ms"])
    row("metadata bytes/referrer PUT", ar["bytes_per_put"], rr["bytes_per_put"], "{:.0f}",
        one=orr["bytes_per_put"])
    row("referrers listed", ar["listed"], rr["listed"] if rr["listed"] >= 0 else "n/a", "{}",
        "= " + refs + (" PASS" if ar["listed"] == int(refs) else " FAIL"))
ok = a["hwm_kib"] < 128 * 1024
row("peak RSS MiB (VmHWM)", a["hwm_kib"] / 1024, r["hwm_kib"] / 1024, "{:.1f}",
    "< 128 " + ("PASS" if ok else "FAIL"), o["hwm_kib"] / 1024)
print(f"airlock metadata benchmark: TAGS={tags} REFERRERS={refs}, loopback, requests in turn;")
print("airlock: its defaults (2 metadata copies); 1 copy: --metadata-copies 1")
print(f"| {'figure':34} | {'airlock':>10} | {'1 copy':>10} | {'docker-registry':>15} "
      f"| {'vs ref':>6} | {'vs 1 copy':>9} | {'target (ref)':14} | {'target (1 copy)':15} |")
print(f"|{'-' * 36}|{'-' * 12}|{'-' * 12}|{'-' * 17}|{'-' * 8}|{'-' * 11}|{'-' * 16}|{'-' * 17}|")
for fig, x, one, y, rr, r1, t, t1 in rows:
    print(f"| {fig:34} | {x:>10} | {one:>10} | {y:>15} | {rr:>6} | {r1:>9} | {t:14} | {t1:15} |")
EOF
