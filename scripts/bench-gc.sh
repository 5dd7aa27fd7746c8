#!/usr/bin/env bash
# GC benchmark (issue 13): mark and sweep time and peak RSS of `airlock gc`
# over a generated store (scripts/bench/gen-gc-store.py) of BLOBS tiny
# blobs and MANIFESTS manifests plus 10 % aged garbage, reported per 10,000
# blobs, beside the reference: listing the same tree with `find` (the
# least any sweep must do). Target: peak RSS < 128 MiB at 100,000 blobs.
#
#   scripts/bench-gc.sh [--s3] [BLOBS [MANIFESTS]]     # default 100000 10000
#
# --s3: the same store on S3: generated into the directory of s3s-fs
# (scripts/bench/s3s-fs.sh; s3s-fs serves the files under its directory
# as objects, with their mtimes as LastModified), collected by `airlock gc
# --store s3://bench/site --s3-endpoint ...`; the reference is the same
# `find` listing of that directory (s3s-fs's own listing reads it too).
# Every read, move and delete is then a request over loopback.
set -euo pipefail
S3=
if [ "${1:-}" = --s3 ]; then
    S3=1
    shift
fi
BLOBS=${1:-100000}
MANIFESTS=${2:-10000}
. "$(dirname "$0")/bench/lib.sh"
need /usr/bin/time time
need jq jq
need bc bc
need python3 python3
if [ -n "${AIRLOCK_BIN:-}" ]; then
    airlock=$AIRLOCK_BIN
else
    build_airlock
fi
bin=$airlock
if [ -n "$S3" ]; then
    . "$(dirname "$0")/bench/s3s-fs.sh"
    start_s3s_fs "$work/s3"
    data="$work/s3/bench/site"
    store=(--store s3://bench/site --s3-endpoint "$endpoint")
else
    data="$work/data"
    store=(--data "$data")
fi
start=$(date +%s.%N)
python3 "$repo/scripts/bench/gen-gc-store.py" "$data" "$BLOBS" "$MANIFESTS"
echo "generated in $(echo "$(date +%s.%N) - $start" | bc) s"
sync
# Reference: list every file with its mtime (what a sweep reads at least).
/usr/bin/time -f "%e %M" -o "$work/find.time" find "$data/blobs" -type f -printf '%T@ %p\n' >/dev/null
read -r find_s find_kb <"$work/find.time"
echo "$(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg) before gc; store: ${store[*]}"
/usr/bin/time -f "%e %M" -o "$work/gc.time" "$bin" gc "${store[@]}" --json >"$work/gc.json"
read -r gc_s gc_kb <"$work/gc.time"
mark_ms=$(jq .mark_ms "$work/gc.json")
sweep_ms=$(jq .sweep_ms "$work/gc.json")
removed=$(jq .blobs_removed "$work/gc.json")
marked=$(jq .marked "$work/gc.json")
per=$(echo "scale=6; 10000 / $BLOBS" | bc)
printf '%-28s %10s %12s %12s\n' "" "total" "per 10k blobs" "peak RSS"
printf '%-28s %9.0fms %11.1fms %10.1fMiB\n' "gc mark" "$mark_ms" "$(echo "$mark_ms * $per" | bc)" "$(echo "scale=1; $gc_kb / 1024" | bc)"
printf '%-28s %9.0fms %11.1fms\n' "gc sweep" "$sweep_ms" "$(echo "$sweep_ms * $per" | bc)"
printf '%-28s %9.0fms %11.1fms %10.1fMiB\n' "gc whole process" "$(echo "$gc_s * 1000" | bc)" "$(echo "$gc_s * 1000 * $per" | bc)" "$(echo "scale=1; $gc_kb / 1024" | bc)"
printf '%-28s %9.0fms %11.1fms %10.1fMiB\n' "reference: find listing" "$(echo "$find_s * 1000" | bc)" "$(echo "$find_s * 1000 * $per" | bc)" "$(echo "scale=1; $find_kb / 1024" | bc)"
echo "marked $marked digests, removed $removed garbage blobs; gc/find time ratio $(echo "scale=1; $gc_s / ($find_s + 0.001)" | bc)"
[ "$gc_kb" -lt $((128 * 1024)) ] && echo "peak RSS under 128 MiB: ok" || { echo "peak RSS over 128 MiB" >&2; exit 1; }
