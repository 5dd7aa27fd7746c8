#!/usr/bin/env bash
# Benchmark rootfs flattening: airlock vs `umoci unpack` of the same image.
#
#   scripts/bench-flatten.sh [LAYOUT[:REF]]
#
# What it does
#   1. Setup (not timed): builds airlock (`cargo build --release`, a no-op when
#      fresh); uses LAYOUT (an OCI image layout, ref REF, default `latest`) or
#      builds the bookworm stack image with scripts/make-stack-image.sh into
#      build/stack (reused when present, like scripts/quickstart.sh); bundles
#      it, imports it into a data directory.
#   2. Measures, RUNS times each (default 3), dropping the page cache before
#      every run when it can (sync; echo 3 > /proc/sys/vm/drop_caches):
#        umoci    umoci unpack --image LAYOUT:REF DIR   (verify, decompress and
#                 apply every layer to a directory tree: the reference)
#        airlock  airlock stack promote bench --image stacks/bench:latest
#                 on a fresh copy (hard links) of the imported data directory:
#                 verify, decompress, apply the layers (whiteouts, opaque
#                 directories, hard links) into ONE tar kept as a blob
#                 (hashed, fsynced), and commit the promotion
#   3. Prints the medians (wall seconds, MB/s of rootfs tar bytes, CPU%, peak
#      RSS) and the ratio umoci seconds / airlock seconds. Target: >= 1x.
#
# Both tools run in the same invocation on the same image, one after the
# other, so the ratio holds on any machine; absolute figures do not.
#
# Exit status: 0 when the benchmark ran, whether or not the target was met;
# non-zero on any error (missing tool, failed build, failed promote, ...).
#
# Environment:
#   BENCH_DIR    where the temporary work dir goes (default /var/tmp); removed at exit
#   RUNS         runs per measurement (default 3; the median is reported)
#   AIRLOCK_BIN  use this binary instead of building target/release/airlock
set -euo pipefail
BENCH_DIR=${BENCH_DIR:-/var/tmp}
. "$(dirname "$0")/bench/lib.sh"

case "${1:-}" in
    -h | --help)
        sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
esac
[ $# -le 1 ] || die "usage: $prog [LAYOUT[:REF]]"

RUNS=${RUNS:-3}
need umoci umoci
need /usr/bin/time time
need python3 python3
need jq jq
[ "$(id -u)" -eq 0 ] || die "must run as root (umoci unpack keeps owners; the page cache drop needs root)"

airlock_binary
AIRLOCK=$airlock
stack_layout "$@"

WORK=$work

note "setup: bundle and import $LAYOUT:$REF"
"$AIRLOCK" keys generate --uid "Bench <bench@example.org>" --out "$WORK/key" >/dev/null
cat >"$WORK/mirror.toml" <<EOF
[[image]]
source = "oci:$LAYOUT:$REF"
repository = "stacks/bench"
tags = ["latest"]
EOF
"$AIRLOCK" bundle create --config "$WORK/mirror.toml" --sign-key "$WORK/key.sec.asc" -o "$WORK/bundle.tar" >/dev/null
"$AIRLOCK" import --data "$WORK/base" --keyring "$WORK/key.pub.asc" "$WORK/bundle.tar" >/dev/null

drop_caches() {
    sync
    if echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then
        return 0
    fi
    cache_note="the page cache could not be dropped: figures measure cached reads"
}
cache_note=""

# run NAME CMD...: one timed run; appends "wall cpu% rss_kib" to $WORK/NAME.runs
run() {
    local name=$1
    shift
    drop_caches
    /usr/bin/time -f '%e %P %M' -o "$WORK/time.out" "$@" >"$WORK/$name.stdout" 2>"$WORK/$name.stderr" ||
        die "$name failed: $(tail -3 "$WORK/$name.stderr")"
    tr -d '%' <"$WORK/time.out" >>"$WORK/$name.runs"
}

for i in $(seq 1 "$RUNS"); do
    note "run $i/$RUNS: umoci unpack"
    rm -rf "$WORK/unpacked"
    run umoci umoci unpack --image "$LAYOUT:$REF" "$WORK/unpacked"
    rm -rf "$WORK/unpacked"

    note "run $i/$RUNS: airlock stack promote"
    rm -rf "$WORK/data"
    cp -al "$WORK/base" "$WORK/data"
    run airlock "$AIRLOCK" stack promote --data "$WORK/data" bench --image stacks/bench:latest --json
    size=$(jq -r '.rootfs[0].size' "$WORK/airlock.stdout")
    sha=$(jq -r '.rootfs[0].sha256' "$WORK/airlock.stdout")
    if [ -n "${first_sha:-}" ] && [ "$sha" != "$first_sha" ]; then
        die "the rootfs digest changed between runs: $first_sha, then $sha"
    fi
    first_sha=$sha
done

python3 - "$WORK" "$size" "$sha" "$RUNS" "$cache_note" <<'EOF'
import statistics, sys
work, size, sha, runs, cache_note = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def load(name):
    rows = [l.split() for l in open(f"{work}/{name}.runs") if l.strip()]
    wall = [float(r[0]) for r in rows]
    cpu = [float(r[1]) for r in rows if r[1] != "?"]
    rss = [int(r[2]) for r in rows]
    return statistics.median(wall), (statistics.median(cpu) if cpu else 0), max(rss), wall
u = load("umoci")
a = load("airlock")
print(f"rootfs: {size / 1e6:.1f} MB tar, {sha}; medians of {runs} runs")
print(f"{'':<8} {'wall s':>8} {'MB/s':>8} {'CPU%':>6} {'peak RSS MiB':>13}  runs")
for name, (wall, cpu, rss, walls) in (("umoci", u), ("airlock", a)):
    print(f"{name:<8} {wall:8.2f} {size / 1e6 / wall:8.1f} {cpu:6.0f} {rss / 1024:13.1f}  {' '.join(f'{w:.2f}' for w in walls)}")
ratio = u[0] / a[0]
print(f"ratio umoci/airlock: {ratio:.2f}x  (target >= 1x: {'met' if ratio >= 1 else 'NOT met'})")
if cache_note:
    print(f"note: {cache_note}")
EOF
