#!/usr/bin/env bash
# What one small GET costs airlock, in figures that do not depend on the
# machine's load: CPU instructions per request (valgrind's callgrind) and
# system calls per request (strace -c), for the two requests of
# scripts/bench-serve.sh's limit rows: (a) GET of a 4 KiB blob and (b) GET of
# a manifest by tag.
#
#   scripts/bench/profile-small-gets.sh
#
# Setup: a fresh data dir loaded over HTTP (serve --allow-push, as
# bench-serve.sh loads it): a 4 KiB random layer, a config and an OCI
# manifest tagged bench/small:v1. Then, for each request kind, airlock
# serve (same flags as bench-serve.sh: --allow-push --log warn) runs under
#   valgrind --tool=callgrind: WARMUP requests, counters zeroed, N requests
#     on one keep-alive connection (curl with N URLs), counters dumped:
#     instructions / N, and the callgrind file is kept for
#     callgrind_annotate;
#   strace -c -f (attached after WARMUP requests): system calls / N.
# The client (curl) runs outside valgrind and strace.
#
# Environment: AIRLOCK_BIN (default target/release/airlock; build it with
# symbols, the release profile has line tables), N (default 2000), WARMUP
# (default 200), OUT (where the callgrind files go; default a temp dir,
# printed).
set -euo pipefail

prog=$(basename "$0")
repo=$(cd "$(dirname "$0")/../.." && pwd)
die() {
    echo "$prog: error: $*" >&2
    exit 1
}
for t in valgrind:valgrind callgrind_control:valgrind strace:strace curl:curl sha256sum:coreutils python3:python3; do
    command -v "${t%%:*}" >/dev/null 2>&1 || die "'${t%%:*}' not found: apt-get install ${t#*:}"
done
airlock=${AIRLOCK_BIN:-$repo/target/release/airlock}
[ -x "$airlock" ] || die "$airlock missing: cargo build --release"
N=${N:-2000}
WARMUP=${WARMUP:-200}
work=$(mktemp -d /var/tmp/airlock-profile.XXXXXX)
OUT=${OUT:-$work/out}
mkdir -p "$OUT"
pid=
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$work/data" "$work"/*.cfg
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base=http://127.0.0.1:$port
serve() { # [wrapper...]
    "$@" "$airlock" serve --data "$work/data" --listen "127.0.0.1:$port" --allow-push --log warn \
        >"$work/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do
        curl -sf -o /dev/null "$base/v2/" && return 0
        kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; die "airlock exited"; }
        sleep 0.1
    done
    die "airlock did not answer within 60 s"
}
stop() {
    kill -INT "$pid"
    wait "$pid" || true
    pid=
}
. "$repo/scripts/bench/small-image.sh"

# --- load ---------------------------------------------------------------------
serve
push_small_image "$base" "$work"
stop

# --- measure --------------------------------------------------------------------
urls() { # URL COUNT -> curl config: COUNT GETs of URL on one connection
    local i
    echo 'header = "Accept: application/vnd.oci.image.manifest.v1+json"'
    for ((i = 0; i < $2; i++)); do
        printf 'url = "%s"\noutput = "/dev/null"\n' "$1"
    done
}
check() { # URL EXPECTED_DIGEST
    local got
    got=$(curl -sSf -H 'Accept: application/vnd.oci.image.manifest.v1+json' "$1" | sha256sum | cut -d' ' -f1)
    [ "sha256:$got" = "$2" ] || die "GET $1 returned content with digest sha256:$got, expected $2"
}
declare -A path=([a]="/v2/bench/small/blobs/$layer" [b]="/v2/bench/small/manifests/v1")
declare -A want=([a]="$layer" [b]="$manifest")
declare -A label=([a]="(a) 4 KiB blob GET" [b]="(b) manifest GET by tag")
for k in a b; do
    url=$base${path[$k]}
    urls "$url" "$WARMUP" >"$work/warm.cfg"
    urls "$url" "$N" >"$work/run.cfg"
    # callgrind
    serve valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.$k.%p" --collect-atstart=yes
    check "$url" "${want[$k]}"
    curl -sSf -K "$work/warm.cfg"
    callgrind_control -z "$pid" >/dev/null 2>&1
    curl -sSf -K "$work/run.cfg"
    callgrind_control -d "requests" "$pid" >/dev/null 2>&1
    sleep 1
    dump=$(ls -t "$OUT"/callgrind."$k".*.* 2>/dev/null | head -n1)
    [ -n "$dump" ] || die "no callgrind dump in $OUT"
    stop
    ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$dump")
    # strace
    serve
    check "$url" "${want[$k]}"
    curl -sSf -K "$work/warm.cfg"
    strace -c -f -q -p "$pid" -o "$work/strace.$k" &
    spid=$!
    sleep 1
    curl -sSf -K "$work/run.cfg"
    sleep 0.5
    kill -INT "$spid"
    wait "$spid" || true
    stop
    calls=$(awk '$NF == "total" { print $4 }' "$work/strace.$k")
    printf '%-26s %10.0f instructions/request  %6.2f syscalls/request   (N=%d; %s)\n' \
        "${label[$k]}" "$(awk -v a="$ir" -v n="$N" 'BEGIN { print a / n }')" \
        "$(awk -v a="$calls" -v n="$N" 'BEGIN { print a / n }')" "$N" "$dump"
    awk 'NR > 2 && $NF != "total" && $1 !~ /^-/ { printf "    %-16s %7.2f/request\n", $NF, $4 / n }' n="$N" "$work/strace.$k" |
        sort -k2 -nr | head -n 12
done
echo "callgrind files: $OUT (callgrind_annotate --inclusive=yes FILE)"
