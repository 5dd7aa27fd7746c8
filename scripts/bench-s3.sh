#!/usr/bin/env bash
# The S3 column of the serve and import benchmarks (issue 11), in one run on
# loopback: airlock on S3 (s3s-fs, data on disk) vs the backend's own limit
# vs airlock on the filesystem.
#
#   scripts/bench-s3.sh
#
# What it does
#   1. Setup (not timed): builds airlock, generates the serve layout
#      (scripts/bench/gen-serve-layout.py: "small" = one 4 KiB layer, "big" =
#      one 64 MiB layer), signs a bundle of it, starts s3s-fs on a fresh
#      directory and imports the bundle into S3 (`--store s3://bench/site`)
#      and into a data directory; starts `airlock serve` on each.
#   2. Serve: wrk -t2 -c16 -d${DURATION}s of (a) the 4 KiB blob, (b) the
#      manifest by tag, (c) the 64 MiB blob, against airlock on S3, airlock
#      on the filesystem, and straight from s3s-fs (the same objects by
#      presigned URL, from airlock's redirect mode: the backend's own
#      limit; for (b), the manifest blob).
#   3. Import: a generated layout of IMPORT_MIB MiB
#      (scripts/bench/gen-import-layout.py) as a signed bundle, imported into
#      S3 (wall time), vs uploading the same blob files with the AWS CLI
#      (`aws s3 cp --recursive`, its default 10 parallel requests).
#   4. Prints req/s, MiB/s and the ratios. Targets (issue 11): airlock on S3
#      >= 0.8x the backend on the 64 MiB blob; manifests by tag within 2x of
#      the filesystem backend; import >= 0.8x the AWS CLI upload.
#
# Needs: s3s-fs, wrk, aws (awscli), python3, curl (scripts/install-test-deps.sh
# installs s3s-fs; `apt-get install wrk awscli`). Numbers on a shared machine
# are indicative: compare the ratios.
set -euo pipefail

DURATION=${DURATION:-10}
IMPORT_MIB=${IMPORT_MIB:-256}
root=$(cd "$(dirname "$0")/.." && pwd)
helpers=$root/scripts/bench
prog=$(basename "$0")
die() {
    echo "$prog: error: $*" >&2
    exit 1
}
note() { echo "$prog: $*" >&2; }
for t in s3s-fs wrk aws python3 curl; do
    command -v "$t" >/dev/null 2>&1 || die "$t not found (scripts/install-test-deps.sh; apt-get install wrk awscli)"
done

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0; sleep 0.1; done; die "nothing on port $1"; }

note "building airlock"
(cd "$root" && cargo build --release --quiet)
airlock=$root/target/release/airlock

export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=benchsecret AWS_REGION=us-east-1
s3port=$(free_port)
mkdir -p "$work/s3/bench"
s3s-fs --host 127.0.0.1 --port "$s3port" --access-key "$AWS_ACCESS_KEY_ID" \
    --secret-key "$AWS_SECRET_ACCESS_KEY" "$work/s3" >"$work/s3s.log" 2>&1 &
pids+=($!)
wait_port "$s3port"
endpoint=http://127.0.0.1:$s3port
s3=(--store s3://bench/site --s3-endpoint "$endpoint")

note "generating the serve layout and bundle"
python3 "$helpers/gen-serve-layout.py" "$work/layout" >"$work/images.txt"
"$airlock" keys generate --uid "Bench <bench@example.org>" --out "$work/key" >/dev/null
: >"$work/mirror.toml"
for n in small big; do
    printf '[[image]]\nsource = "oci:%s:%s"\nrepository = "bench/%s"\ntags = ["v1"]\n\n' \
        "$work/layout" "$n" "$n" >>"$work/mirror.toml"
done
"$airlock" bundle create --config "$work/mirror.toml" --sign-key "$work/key.sec.asc" -o "$work/serve.tar" >/dev/null
"$airlock" import "${s3[@]}" --keyring "$work/key.pub.asc" "$work/serve.tar" >/dev/null
"$airlock" import --data "$work/data" --keyring "$work/key.pub.asc" "$work/serve.tar" >/dev/null

serve() { # NAME ARGS...
    local port
    port=$(free_port)
    "$airlock" serve --listen "127.0.0.1:$port" "${@:2}" >"$work/$1.log" 2>&1 &
    pids+=($!)
    wait_port "$port"
    echo "$port"
}
p_s3=$(serve s3 "${s3[@]}")
p_fs=$(serve fs --data "$work/data")
p_redirect=$(serve redirect "${s3[@]}" --blob-redirect)

small_layer=$(awk '$1 == "small" { split($5, l, ","); split(l[1], d, ":"); print d[1] ":" d[2] }' "$work/images.txt")
big_layer=$(awk '$1 == "big" { split($5, l, ","); split(l[1], d, ":"); print d[1] ":" d[2] }' "$work/images.txt")
small_manifest=$(awk '$1 == "small" { print $2 }' "$work/images.txt")
presigned() { # REPO DIGEST -> URL
    curl -s -o /dev/null -w '%{redirect_url}' "http://127.0.0.1:$p_redirect/v2/bench/$1/blobs/$2"
}
direct_small=$(presigned small "$small_layer")
direct_big=$(presigned big "$big_layer")
direct_manifest=$(presigned small "$small_manifest")
[ -n "$direct_big" ] || die "no presigned URL from the redirect mode"
for u in "$direct_small" "$direct_big"; do
    curl -sf -o /dev/null "$u" || die "presigned GET failed: $u"
done

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
declare -A R
for who in s3 fs; do
    port=p_$who
    R[$who.small]=$(wrk_run "http://127.0.0.1:${!port}/v2/bench/small/blobs/$small_layer")
    R[$who.manifest]=$(wrk_run "http://127.0.0.1:${!port}/v2/bench/small/manifests/v1" "$oci")
    R[$who.big]=$(wrk_run "http://127.0.0.1:${!port}/v2/bench/big/blobs/$big_layer")
done
R[direct.small]=$(wrk_run "$direct_small")
R[direct.manifest]=$(wrk_run "$direct_manifest")
R[direct.big]=$(wrk_run "$direct_big")

note "import: ${IMPORT_MIB} MiB into S3 vs aws s3 cp --recursive"
python3 "$helpers/gen-import-layout.py" "$work/imp" "$IMPORT_MIB" >"$work/imp.txt"
: >"$work/imp.toml"
while read -r ref _; do
    printf '[[image]]\nsource = "oci:%s:%s"\nrepository = "imp/%s"\ntags = ["v1"]\n\n' \
        "$work/imp" "$ref" "$ref" >>"$work/imp.toml"
done <"$work/imp.txt"
"$airlock" bundle create --config "$work/imp.toml" --sign-key "$work/key.sec.asc" -o "$work/imp.tar" >/dev/null
t0=$(date +%s%N)
"$airlock" import --store s3://bench/imp --s3-endpoint "$endpoint" --keyring "$work/key.pub.asc" "$work/imp.tar" >/dev/null
t1=$(date +%s%N)
aws --endpoint-url "$endpoint" s3 cp --recursive --quiet "$work/imp/blobs" s3://bench/cli/
t2=$(date +%s%N)
imp_ms=$(((t1 - t0) / 1000000))
cli_ms=$(((t2 - t1) / 1000000))

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
field() { echo "${R[$1]}" | awk -v i="$2" '{ print $i }'; }
echo
echo "nproc $(nproc); wrk -t2 -c16 -d${DURATION}s; s3s-fs 0.14.1 on $work/s3"
printf '%-28s %14s %14s %14s %10s %10s\n' figure "airlock-S3" "s3s-fs" "airlock-fs" "S3/s3s" "S3/fs"
for f in small manifest big; do
    col=1
    unit="req/s"
    [ "$f" = big ] && col=2 && unit="MiB/s"
    a=$(field "s3.$f" $col)
    d=$(field "direct.$f" $col)
    s=$(field "fs.$f" $col)
    printf '%-28s %14s %14s %14s %10s %10s\n' "$f GET ($unit)" "$a" "$d" "$s" "$(ratio "$a" "$d")" "$(ratio "$a" "$s")"
done
echo "targets: big GET S3/s3s >= 0.8; manifest S3/fs >= 0.5 (within 2x)"
printf 'import %d MiB: airlock into S3 %d ms, aws s3 cp %d ms, ratio (cli time / airlock time) %s (target >= 0.8)\n' \
    "$IMPORT_MIB" "$imp_ms" "$cli_ms" "$(ratio "$cli_ms" "$imp_ms")"
