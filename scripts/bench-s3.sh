#!/usr/bin/env bash
# The S3 column of the serve benchmark (issue 11), in one run on loopback:
# airlock on S3 (s3s-fs, data on disk) vs the backend's own limit vs
# airlock on the filesystem. The S3 import run is
# `scripts/bench-import.sh --s3`.
#
#   scripts/bench-s3.sh
#
# What it does
#   1. Setup (not timed): builds airlock, generates the serve layout
#      (scripts/bench/gen-serve-layout.py: "small" = one 4 KiB layer, "big" =
#      one 64 MiB layer), signs a bundle of it, starts s3s-fs on a fresh
#      directory and imports the bundle into S3 (`--store s3://bench/site`)
#      and into a data directory; starts `airlock serve` on each, and one
#      more on S3 with `--blob-redirect`, whose 307s give presigned URLs of
#      the very objects airlock serves.
#   2. wrk -t2 -c16 -d${DURATION}s of (a) the 4 KiB blob, (b) the manifest
#      by tag, (c) the 64 MiB blob, against airlock on S3, airlock on the
#      filesystem, and straight from s3s-fs by presigned URL (the backend's
#      own limit; for (b), the manifest's blob object).
#   3. Prints req/s, MiB/s and the ratios. Targets (issue 11): airlock on
#      S3 >= 0.8x the backend on the 64 MiB blob; manifests by tag on S3
#      within 2x of the filesystem backend.
#
# Needs: s3s-fs (scripts/install-test-deps.sh), wrk, python3, curl
# (`apt-get install wrk curl python3`). Numbers on a shared machine are
# indicative: compare the ratios. Environment: DURATION (s, default 10),
# BENCH_DIR (default /tmp), AIRLOCK_BIN (use this binary instead of
# building target/release/airlock).
set -euo pipefail
. "$(dirname "$0")/bench/lib.sh"
. "$(dirname "$0")/bench/s3s-fs.sh"

DURATION=${DURATION:-10}
need wrk wrk
need python3 python3
need curl curl

if [ -n "${AIRLOCK_BIN:-}" ]; then
    airlock=$AIRLOCK_BIN
    [ -x "$airlock" ] || die "AIRLOCK_BIN=$airlock is not executable"
else
    note "building airlock"
    build_airlock
fi

start_s3s_fs "$work/s3"
s3=(--store s3://bench/site --s3-endpoint "$endpoint")

note "generating the serve layout and bundle; importing into S3 and a data directory"
python3 "$repo/scripts/bench/gen-serve-layout.py" "$work/layout" >"$work/images.txt"
"$airlock" keys generate --uid "Bench <bench@example.org>" --out "$work/key" >/dev/null
: >"$work/mirror.toml"
for n in small big; do
    printf '[[image]]\nsource = "oci:%s:%s"\nrepository = "bench/%s"\ntags = ["v1"]\n\n' \
        "$work/layout" "$n" "$n" >>"$work/mirror.toml"
done
"$airlock" bundle create --config "$work/mirror.toml" --sign-key "$work/key.sec.asc" -o "$work/serve.tar" >/dev/null
"$airlock" import "${s3[@]}" --keyring "$work/key.pub.asc" "$work/serve.tar" >/dev/null
"$airlock" import --data "$work/data" --keyring "$work/key.pub.asc" "$work/serve.tar" >/dev/null

# serve NAME ARGS...: starts `airlock serve ARGS` on a free port, in this
# shell (not a command substitution, so that its pid reaches `pids` and the
# exit trap stops it); sets p_NAME to the port.
serve() {
    local port
    port=$(free_port)
    "$airlock" serve --listen "127.0.0.1:$port" "${@:2}" >"$work/$1.log" 2>&1 &
    pids+=($!)
    wait_up "airlock serve ($1)" "$!" "http://127.0.0.1:$port/v2/" "$work/$1.log"
    printf -v "p_$1" '%s' "$port"
}
serve s3 "${s3[@]}"
serve fs --data "$work/data"
serve redirect "${s3[@]}" --blob-redirect

layer_of() { awk -v n="$1" '$1 == n { split($5, l, ","); split(l[1], d, ":"); print d[1] ":" d[2] }' "$work/images.txt"; }
small_layer=$(layer_of small)
big_layer=$(layer_of big)
small_manifest=$(awk '$1 == "small" { print $2 }' "$work/images.txt")
presigned() { # REPO DIGEST -> URL
    curl -s -o /dev/null -w '%{redirect_url}' "http://127.0.0.1:$p_redirect/v2/bench/$1/blobs/$2"
}
direct_small=$(presigned small "$small_layer")
direct_big=$(presigned big "$big_layer")
direct_manifest=$(presigned small "$small_manifest")
for u in "$direct_small" "$direct_big" "$direct_manifest"; do
    [ -n "$u" ] || die "no presigned URL from the redirect mode"
    curl -sf -o /dev/null "$u" || die "presigned GET failed: $u"
done
# The three paths serve the same bytes.
[ "$(curl -sf "$direct_big" | sha256sum | cut -c1-64)" = "${big_layer#sha256:}" ] || die "s3s-fs served other bytes"
[ "$(curl -sf "http://127.0.0.1:$p_s3/v2/bench/big/blobs/$big_layer" | sha256sum | cut -c1-64)" = "${big_layer#sha256:}" ] ||
    die "airlock on S3 served other bytes"

wrk_run() { # URL [ACCEPT] -> "req/s MiB/s"
    local out
    out=$(wrk -t2 -c16 -d"${DURATION}s" --timeout 30s ${2:+-H "Accept: $2"} "$1")
    echo "$out" | awk '
        /^Requests\/sec:/ { rps = $2 }
        /^Transfer\/sec:/ { v = $2; m = v + 0; if (v ~ /GB$/) m *= 1024; else if (v ~ /KB$/) m /= 1024; else if (v ~ /[0-9]B$/) m /= 1048576; tr = m }
        /Non-2xx/ { bad = $NF }
        END { if (bad) print "ERR", bad; else printf "%.0f %.1f\n", rps, tr }'
}
oci=application/vnd.oci.image.manifest.v1+json
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A R
for who in s3 fs; do
    port=p_$who
    note "wrk: airlock on $who"
    R[$who.small]=$(wrk_run "http://127.0.0.1:${!port}/v2/bench/small/blobs/$small_layer")
    R[$who.manifest]=$(wrk_run "http://127.0.0.1:${!port}/v2/bench/small/manifests/v1" "$oci")
    R[$who.big]=$(wrk_run "http://127.0.0.1:${!port}/v2/bench/big/blobs/$big_layer")
done
note "wrk: s3s-fs by presigned URL"
R[direct.small]=$(wrk_run "$direct_small")
R[direct.manifest]=$(wrk_run "$direct_manifest")
R[direct.big]=$(wrk_run "$direct_big")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
field() { echo "${R[$1]}" | awk -v i="$2" '{ print $i }'; }
echo
echo "$(nproc) CPUs; load average $load_start at start, $(cut -d' ' -f1-3 /proc/loadavg) at end; wrk -t2 -c16 -d${DURATION}s; s3s-fs $(s3s-fs --version 2>/dev/null | head -n1) on $work/s3"
printf '%-22s %12s %12s %12s %10s %10s\n' figure "airlock-S3" "s3s-fs" "airlock-fs" "S3/s3s-fs" "S3/fs"
for f in small manifest big; do
    col=1
    unit="req/s"
    [ "$f" = big ] && col=2 && unit="MiB/s"
    a=$(field "s3.$f" $col)
    d=$(field "direct.$f" $col)
    s=$(field "fs.$f" $col)
    printf '%-22s %12s %12s %12s %10s %10s\n' "$f GET ($unit)" "$a" "$d" "$s" "$(ratio "$a" "$d")" "$(ratio "$a" "$s")"
done
echo "targets: big GET S3/s3s-fs >= 0.80; manifest S3/fs >= 0.50 (within 2x)"
