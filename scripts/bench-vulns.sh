#!/usr/bin/env bash
# Benchmark package inventories and vulnerability matching.
#
#   scripts/bench-vulns.sh [LAYOUT[:REF]]
#
# What it does
#   1. Setup (not timed): builds airlock (`cargo build --release`, a no-op
#      when fresh); uses LAYOUT (an OCI image layout, ref REF, default
#      `latest`) or builds the bookworm stack image with
#      scripts/make-stack-image.sh into build/stack (reused when present);
#      generates (scripts/bench/gen-vulns.py) an image of 5,000 dpkg
#      packages and a Debian-sized OSV feed of 40,000 records; bundles the
#      stack image WITHOUT its SBOM (`sbom = false`, so the site reads the
#      layers), the generated image and the feed; imports them; unpacks the
#      stack image with umoci for dpkg-query.
#   2. Measures, RUNS times each (default 5), page cache warm:
#        dpkg-query   dpkg-query --admindir=ROOT/var/lib/dpkg -W (the
#                     reference: reads the database of the unpacked root)
#        inventory    airlock sbom --data D stacks/bench:latest (opens the
#                     store, streams and verifies every layer of the image,
#                     keeps the dpkg database and os-release, writes SPDX)
#        matching     airlock vulns --data D stacks/synth:latest --json
#                     (inventory of the 5,000-package image, then every
#                     advisory line of the 40,000-record feed matched with
#                     dpkg version ordering)
#   3. Prints the medians (wall seconds, CPU seconds (user + system), CPU%,
#      peak RSS) and the ratio
#      inventory / dpkg-query. Targets: inventory <= 1 s; matching <= 2 s and
#      <= 128 MiB peak RSS.
#
# Exit status: 0 when the benchmark ran, whether or not a target was met.
#
# Environment:
#   BENCH_DIR    where the temporary work dir goes (default /var/tmp)
#   RUNS         runs per measurement (default 5; the median is reported)
#   AIRLOCK_BIN  use this binary instead of building target/release/airlock
set -euo pipefail
BENCH_DIR=${BENCH_DIR:-/var/tmp}
. "$(dirname "$0")/bench/lib.sh"

case "${1:-}" in
    -h | --help)
        sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
esac
[ $# -le 1 ] || die "usage: $prog [LAYOUT[:REF]]"

RUNS=${RUNS:-5}
need umoci umoci
need dpkg-query dpkg
need /usr/bin/time time
need python3 python3
need jq jq

airlock_binary
AIRLOCK=$airlock
stack_layout "$@"
WORK=$work

note "setup: generate, bundle, import, unpack"
python3 "$repo/scripts/bench/gen-vulns.py" "$WORK/synth" "$WORK/feed.jsonl"
"$AIRLOCK" keys generate --uid "Bench <bench@example.org>" --out "$WORK/key" >/dev/null
cat >"$WORK/mirror.toml" <<EOF
[[image]]
source = "oci:$LAYOUT:$REF"
repository = "stacks/bench"
tags = ["latest"]
sbom = false

[[image]]
source = "oci:$WORK/synth:latest"
repository = "stacks/synth"
tags = ["latest"]
sbom = false

[[feed]]
name = "generated-osv"
source = "$WORK/feed.jsonl"
EOF
"$AIRLOCK" bundle create --config "$WORK/mirror.toml" --sign-key "$WORK/key.sec.asc" -o "$WORK/bundle.tar" >/dev/null
"$AIRLOCK" import --data "$WORK/data" --keyring "$WORK/key.pub.asc" "$WORK/bundle.tar" >/dev/null
umoci unpack --image "$LAYOUT:$REF" "$WORK/unpacked" >/dev/null
ROOT=$WORK/unpacked/rootfs

# run NAME CMD...: one timed run; appends "wall cpu% rss_kib cpu_s" to $WORK/NAME.runs
run() {
    local name=$1
    shift
    /usr/bin/time -f '%e %P %M %U %S' -o "$WORK/time.out" "$@" >"$WORK/$name.stdout" 2>"$WORK/$name.stderr" ||
        die "$name failed: $(tail -3 "$WORK/$name.stderr")"
    tr -d '%' <"$WORK/time.out" | awk '{print $1, $2, $3, $4 + $5}' >>"$WORK/$name.runs"
}

for i in $(seq 1 "$RUNS"); do
    note "run $i/$RUNS"
    run dpkg-query dpkg-query --admindir="$ROOT/var/lib/dpkg" -W -f '${Package} ${Version} ${Architecture}\n'
    run inventory "$AIRLOCK" sbom --data "$WORK/data" stacks/bench:latest
    run matching "$AIRLOCK" vulns --data "$WORK/data" stacks/synth:latest --json
done

# Sanity: the same packages; the matching found something.
want=$(sort -u "$WORK/dpkg-query.stdout" | wc -l)
got=$(jq '[.packages[] | select(.primaryPackagePurpose == "LIBRARY")] | length' "$WORK/inventory.stdout")
[ "$want" -eq "$got" ] || die "inventory lists $got packages, dpkg-query $want"
found=$(jq '.platforms[0].vulnerabilities | length' "$WORK/matching.stdout")
packages=$(jq '.platforms[0].packages' "$WORK/matching.stdout")
[ "$found" -gt 0 ] || die "matching found nothing"

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
col() { awk -v c="$2" '{print $c}' "$WORK/$1.runs" | median; }
layer_mb=$(du -sm "$LAYOUT/blobs" | cut -f1)
echo "bench-vulns: $RUNS runs, median; load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
printf '%-12s %8s %6s %6s %8s  %s\n' what seconds cpu_s cpu% rss_mib detail
for n in dpkg-query inventory matching; do
    case $n in
        dpkg-query) detail="$want packages (unpacked root)" ;;
        inventory) detail="$got packages from $layer_mb MB of layers" ;;
        matching) detail="$packages packages x $(wc -l <"$WORK/feed.jsonl") records: $found vulnerabilities" ;;
    esac
    printf '%-12s %8s %6s %6s %8s  %s\n' "$n" "$(col "$n" 1)" "$(col "$n" 4)" "$(col "$n" 2)" "$(($(col "$n" 3) / 1024))" "$detail"
done
inv=$(col inventory 1)
dq=$(col dpkg-query 1)
awk -v a="$inv" -v b="$dq" 'BEGIN { printf "inventory / dpkg-query: %.1fx the time (dpkg-query reads an unpacked root; airlock streams and verifies the layers)\n", a / (b > 0 ? b : 0.005) }'
awk -v s="$inv" 'BEGIN { print "target inventory <= 1 s: " (s <= 1 ? "met" : "NOT met") }'
m=$(col matching 1)
r=$(($(col matching 3) / 1024))
awk -v s="$m" -v r="$r" 'BEGIN { print "target matching <= 2 s and <= 128 MiB: " ((s <= 2 && r <= 128) ? "met" : "NOT met") }'
