#!/usr/bin/env bash
# Benchmark `airlock import` against the disk it runs on.
#
#   scripts/bench-import.sh [--s3] [SIZE_MIB]        (default 1024)
#
# With --s3 (issue 11) the import goes into S3 instead: s3s-fs (data on
# disk, under BENCH_DIR) on loopback, `airlock import --store s3://bench/..
# --s3-endpoint URL`, and the reference is uploading the same blob files
# with the AWS CLI in parallel (`aws s3 cp --recursive`, its default 10
# concurrent requests) into the same server; target: airlock >= 0.8x.
# It needs s3s-fs (scripts/install-test-deps.sh) and aws (pip install
# awscli).
#
# What it does
#   1. Setup (not timed): builds airlock (`cargo build --release`, a no-op when
#      fresh), generates an OCI image layout of SIZE_MIB MiB of incompressible
#      random layers of mixed sizes (4 KiB .. 256 MiB; see
#      scripts/bench/gen-import-layout.py), a signing key, and one signed bundle of it
#      with `airlock bundle create`.
#   2. Measures, RUNS times each (default 7), interleaved in alternating order
#      (copy then airlock on odd runs, airlock then copy on even ones), dropping
#      the page cache before
#      every run (sync; echo 3 > /proc/sys/vm/drop_caches) so the bundle is read
#      from disk each time:
#        fsync copy  dd if=BUNDLE of=COPY bs=4M conv=fsync  (read + write + fsync:
#                    the best a file-to-file import can do on this disk)
#        sha256sum   sha256sum BUNDLE  (read + hash: the floor set by hashing)
#        airlock     airlock import --data FRESH_DIR --keyring KEY BUNDLE
#                    (read, verify signature, hash every blob, write + fsync
#                    into the store, commit), into a new data dir each run
#      Every run is wrapped in /usr/bin/time -v for CPU% and peak RSS.
#   3. Prints a table of medians: wall seconds, MB/s (bundle bytes / wall
#      seconds, MB = 10^6 bytes, like airlock's own summary), CPU%, peak RSS;
#      the spread (min-max) of each, the per-run ratios airlock/copy (each
#      airlock run against the copy beside it) and their median, the headline
#      ratio, which stays stable when the disk's speed drifts between runs;
#      then the airlock/sha256sum ratio and the targets:
#        airlock MB/s >= 0.8 x fsync copy MB/s
#        airlock peak RSS < 64 MiB  (the largest of the runs)
#
# Reading it: the ratio to the fsync copy is the headline; the ratio to
# sha256sum says whether hashing (CPU) or the disk bounds the import (note:
# coreutils sha256sum may not use the CPU's SHA extensions while airlock's
# sha2 crate does, so airlock can beat it; check `openssl speed sha256`). CPU%
# near 100 % (one core) for airlock with a low ratio means it is CPU-bound;
# low CPU% with a low ratio means it waits on I/O (fsyncs, small writes).
# If the page cache could not be dropped the output says so, and the figures
# then measure cached reads. The load average is printed too: builds or tests
# running alongside (CPU or disk) make the runs noisy -- compare the per-run
# wall times, and rerun on a quiet machine before trusting a ratio.
#
# Exit status: 0 when the benchmark ran, whether or not a target was met;
# non-zero on any error (missing tool, failed build, failed import, ...).
#
# Environment:
#   BENCH_DIR    where the temporary work dir goes (default /var/tmp); it needs
#                about 3 x SIZE_MIB free and is removed at exit
#   RUNS         runs per measurement (default 7; medians, spreads and the
#                median of the per-run ratios are reported)
#   AIRLOCK_BIN  use this binary instead of building target/release/airlock
set -euo pipefail

case "${1:-}" in
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
esac
S3=0
if [ "${1:-}" = --s3 ]; then
    S3=1
    shift
fi
BENCH_DIR=${BENCH_DIR:-/var/tmp}
[ -d "$BENCH_DIR" ] || { echo "${0##*/}: error: BENCH_DIR $BENCH_DIR is not a directory" >&2; exit 1; }
. "$(dirname "$0")/bench/lib.sh"
. "$(dirname "$0")/bench/s3s-fs.sh"
[ $# -le 1 ] || die "usage: $prog [--s3] [SIZE_MIB]"
SIZE_MIB=${1:-1024}
[[ $SIZE_MIB =~ ^[1-9][0-9]*$ ]] || die "SIZE_MIB must be a positive integer, got '$SIZE_MIB'"
RUNS=${RUNS:-7}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer, got '$RUNS'"

# --- tools -----------------------------------------------------------------
[ -x /usr/bin/time ] || die "/usr/bin/time not found: apt-get install time"
need sha256sum coreutils
need dd coreutils
need sync coreutils
need stat coreutils
need df coreutils
need sort coreutils
need awk mawk
need nproc coreutils
need python3 python3
/usr/bin/time -v true 2>/dev/null || die "/usr/bin/time does not support -v (need GNU time): apt-get install time"
if [ "$S3" = 1 ]; then
    need aws "awscli (pip install awscli)"
fi

airlock_binary

# --- work dir (lib.sh made $work under BENCH_DIR) --------------------------
base=$BENCH_DIR
avail_kib=$(df -Pk "$base" | awk 'NR == 2 { print $4 }')
need_kib=$((SIZE_MIB * 1024 * (3 + S3) + 256 * 1024))
[ "$avail_kib" -ge "$need_kib" ] ||
    die "$base has $((avail_kib / 1024)) MiB free; need about $((need_kib / 1024)) MiB ($((3 + S3)) x SIZE_MIB)"
trap 'echo "$prog: error: command failed (line $LINENO): $BASH_COMMAND" >&2' ERR

# --- setup (not timed) -----------------------------------------------------
note "generating a $SIZE_MIB MiB OCI layout in $work"
python3 "$repo/scripts/bench/gen-import-layout.py" "$work/layout" "$SIZE_MIB" >"$work/images.txt"
n_images=$(wc -l <"$work/images.txt")
n_layers=$(awk '{ n += $2 } END { print n }' "$work/images.txt")

: >"$work/mirror.toml"
while read -r ref _ _; do
    printf '[[image]]\nsource = "oci:%s:%s"\nrepository = "bench/%s"\ntags = ["latest"]\n\n' \
        "$work/layout" "$ref" "$ref" >>"$work/mirror.toml"
done <"$work/images.txt"

"$airlock" keys generate --uid "Bench <bench@example.org>" --out "$work/key" >/dev/null
note "creating the bundle"
"$airlock" bundle create --config "$work/mirror.toml" --sign-key "$work/key.sec.asc" \
    -o "$work/bundle.tar" >/dev/null
[ "$S3" = 1 ] || rm -rf "$work/layout" # frees SIZE_MIB for the copies
bundle=$work/bundle.tar
bytes=$(stat -c %s "$bundle")

# --- measurement -----------------------------------------------------------
cache_note="page cache dropped before every run"
drop_caches() {
    sync
    if ! { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
        if [ "$cache_note" != "COULD NOT DROP the page cache (not root?): figures are for cached reads" ]; then
            note "warning: cannot write /proc/sys/vm/drop_caches; continuing with a warm cache"
        fi
        cache_note="COULD NOT DROP the page cache (not root?): figures are for cached reads"
    fi
}

now_ns() { date +%s%N; }

# run NAME RUN_NO CMD...: drops caches, runs CMD under /usr/bin/time -v, appends
# "wall_seconds cpu_percent maxrss_kib" to $work/NAME.results.
run() {
    local name=$1 i=$2
    shift 2
    drop_caches
    local t0 t1 tv=$work/$name.$i.time
    t0=$(now_ns)
    if ! /usr/bin/time -v -o "$tv" "$@" >"$work/$name.$i.out" 2>"$work/$name.$i.err"; then
        cat "$work/$name.$i.err" >&2
        die "$name run $i failed: $*"
    fi
    t1=$(now_ns)
    local cpu rss
    cpu=$(awk -F': ' '/Percent of CPU this job got/ { sub(/%/, "", $2); print $2 }' "$tv")
    rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$tv")
    if [ -z "$cpu" ] || [ -z "$rss" ]; then
        die "could not parse /usr/bin/time -v output in $tv"
    fi
    awk -v a="$t0" -v b="$t1" -v c="$cpu" -v r="$rss" \
        'BEGIN { printf "%.3f %s %s\n", (b - a) / 1e9, c, r }' >>"$work/$name.results"
}

# median COLUMN FILE
median() {
    sort -g -k"$1","$1" "$2" | awk -v c="$1" '{ v[NR] = $c } END { print v[int((NR + 1) / 2)] }'
}
maximum() {
    sort -g -k"$1","$1" "$2" | awk -v c="$1" 'END { print $c }'
}

load_start=$(cut -d' ' -f1 /proc/loadavg)
if [ "$S3" = 1 ]; then
    start_s3s_fs "$work/s3"
    ref_label="aws s3 cp"
    store_args() { echo "--store s3://bench/airlock$1 --s3-endpoint $endpoint"; }
    drop_store() { rm -rf "$work/s3/bench/airlock$1"; }
else
    ref_label="fsync copy"
    store_args() { echo "--data $work/data"; }
    drop_store() { rm -rf "$work/data"; }
fi
run_copy() {
    if [ "$S3" = 1 ]; then
        note "run $1/$RUNS: aws s3 cp --recursive"
        run copy "$1" aws --endpoint-url "$endpoint" s3 cp --recursive --quiet "$work/layout/blobs" "s3://bench/cli$1/"
        rm -rf "$work/s3/bench/cli$1"
        return
    fi
    note "run $1/$RUNS: fsync copy"
    rm -f "$work/copy.tar"
    run copy "$1" dd if="$bundle" of="$work/copy.tar" bs=4M conv=fsync status=none
    rm -f "$work/copy.tar"
}
run_airlock() {
    note "run $1/$RUNS: airlock import $(store_args "$1")"
    drop_store "$1"
    # shellcheck disable=SC2046 # store_args is words without spaces
    run airlock "$1" "$airlock" import $(store_args "$1") --keyring "$work/key.pub.asc" "$bundle"
    grep -q "^imported bundle .*: $n_images images" "$work/airlock.$1.out" || {
        cat "$work/airlock.$1.out" "$work/airlock.$1.err" >&2
        die "airlock import did not report $n_images images"
    }
    drop_store "$1"
}
# Interleaved, in alternating order, so that drift of the machine (other
# work, the disk's write-back state) falls on both sides alike; each run's
# airlock time is compared with the copy right beside it.
for i in $(seq 1 "$RUNS"); do
    if [ $((i % 2)) -eq 1 ]; then
        run_copy "$i"
        run_airlock "$i"
    else
        run_airlock "$i"
        run_copy "$i"
    fi
    note "run $i/$RUNS: sha256sum"
    run sha256 "$i" sha256sum "$bundle"
done

# --- report ----------------------------------------------------------------
row() { # label name
    local wall cpu rss runs
    wall=$(median 1 "$work/$2.results")
    cpu=$(median 2 "$work/$2.results")
    rss=$(maximum 3 "$work/$2.results")
    runs=$(awk '{ printf "%s%.2f", (NR > 1 ? " " : ""), $1 }' "$work/$2.results")
    awk -v l="$1" -v w="$wall" -v c="$cpu" -v r="$rss" -v b="$bytes" -v runs="$runs" \
        'BEGIN { printf "  %-12s %9.2f %9.1f %7s%% %9.1f   %s\n", l, w, b / 1e6 / w, c, r / 1024, runs }'
}
mbps() { awk -v w="$(median 1 "$work/$1.results")" -v b="$bytes" 'BEGIN { printf "%.3f", b / 1e6 / w }'; }

copy_mbps=$(mbps copy)
sha_mbps=$(mbps sha256)
air_mbps=$(mbps airlock)
air_rss_kib=$(maximum 3 "$work/airlock.results")

echo
echo "airlock import benchmark: bundle $(awk -v b="$bytes" 'BEGIN { printf "%.1f MB (%.1f MiB)", b / 1e6, b / 1048576 }'), $n_images images, $n_layers layers"
echo "  filesystem: $(df -PT "$base" | awk 'NR == 2 { print $1 " (" $2 ")" }') at $base; $cache_note"
echo "  median of $RUNS runs; peak RSS is the largest of the runs; MB = 10^6 bytes"
echo "  $(nproc) CPUs; load average $load_start at start, $(cut -d' ' -f1 /proc/loadavg) at end (other work on the machine skews the figures)"
echo
printf '  %-12s %9s %9s %8s %9s   %s\n' "" "wall s" "MB/s" "CPU" "RSS MiB" "each run (wall s)"
row "$ref_label" copy
row "sha256sum" sha256
row "airlock" airlock
echo
# Per-run ratios (copy wall / airlock wall of the same run = airlock's
# throughput relative to the copy), their median and spread.
paste -d' ' "$work/copy.results" "$work/airlock.results" | awk '{ printf "%.4f\n", $1 / $4 }' >"$work/ratios"
ratio_med=$(median 1 "$work/ratios")
ratio_min=$(sort -g "$work/ratios" | head -n1)
ratio_max=$(sort -g "$work/ratios" | tail -n1)
spread() { # NAME -> "min-max" wall seconds
    sort -g -k1,1 "$work/$1.results" | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f-%.2f", lo, hi }'
}
echo "  wall-time spread (min-max s): $ref_label $(spread copy), airlock $(spread airlock), sha256sum $(spread sha256)"
echo "  per-run ratios airlock/$ref_label: $(tr '\n' ' ' <"$work/ratios")"
awk -v a="$air_mbps" -v c="$copy_mbps" -v s="$sha_mbps" -v r="$air_rss_kib" \
    -v med="$ratio_med" -v lo="$ratio_min" -v hi="$ratio_max" -v ref="$ref_label" 'BEGIN {
    rc = med; rs = a / s; mib = r / 1024
    printf "  airlock / %-11s %5.2fx (median of per-run ratios; spread %.2f-%.2fx; ratio of medians %.2fx)   target >= 0.80x   %s\n", ref, rc, lo, hi, a / c, (rc >= 0.8 ? "PASS" : "FAIL")
    printf "  airlock / sha256sum   %5.2fx\n", rs
    printf "  airlock peak RSS  %6.1f MiB   target <  64 MiB  %s\n", mib, (mib < 64 ? "PASS" : "FAIL")
}'
echo
echo "  airlock's own summary (last run): $(cat "$work/airlock.$RUNS.out")"
