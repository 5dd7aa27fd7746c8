#!/usr/bin/env bash
# What one small GET costs, airlock beside nginx, in figures that do not
# depend on the machine's load: CPU instructions per request (valgrind's
# callgrind) and system calls per request (strace -c), for the two requests
# of scripts/bench-serve.sh's limit rows: (a) GET of a 4 KiB blob and (b)
# GET of a manifest by tag (nginx: the same file at the same URL).
#
#   scripts/bench/profile-small-gets.sh
#
# Setup: a fresh data dir loaded over HTTP (serve --allow-push, as
# bench-serve.sh loads it): a 4 KiB random layer, a config and an OCI
# manifest tagged bench/small:v1. Then, for each request kind and server:
#   airlock serve --workers 1 --allow-push --log warn, or nginx with one
#   process (master_process off; worker_processes 1; sendfile on; access
#   log off: bench/lib.sh's nginx_conf), runs under
#   valgrind --tool=callgrind: WARMUP requests, counters zeroed, N requests
#     on one keep-alive connection (curl with N URLs), counters dumped:
#     instructions / N, and the callgrind file is kept for
#     callgrind_annotate;
#   strace -c -f (attached after WARMUP requests): system calls / N.
# The client (curl) runs outside valgrind and strace. Each answer is
# checked against its digest first.
#
# The root refresh is driven by time, not by requests: one statx(2) of
# refs/root per root_refresh_ms (1 ms on the filesystem), whatever the load;
# at 100,000 requests/s that is one per hundred requests. Under callgrind,
# which slows the server some fifty times, the same millisecond would fall
# on every few requests and count the refresh ~50 times over, so the
# callgrind runs of airlock pass --root-refresh-ms $PROFILE_ROOT_REFRESH_MS
# (default 60000: no refresh in the window); the strace runs keep the
# default, so the statx calls show there at their real rate. Set
# PROFILE_ROOT_REFRESH_MS=1 to count it the slowed-down way. The last lines are the ratios
# airlock / nginx (the targets of issue 40: instructions <= 1.3x, system
# calls <= 1.0x).
#
# Environment: PROFILE_ROOT_REFRESH_MS (above), AIRLOCK_BIN (default target/release/airlock, built; the
# release profile has line tables), N (default 2000), WARMUP (default 200),
# OUT (where the callgrind files go; default a temp dir, printed), BENCH_DIR.
# Needs: apt-get install valgrind strace curl nginx-light python3 coreutils.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
repo=$(cd "$(dirname "$0")/../.." && pwd) # lib.sh assumes scripts/

for t in valgrind:valgrind callgrind_control:valgrind strace:strace curl:curl nginx:nginx-light \
    sha256sum:coreutils python3:python3; do
    need "${t%%:*}" "${t#*:}"
done
if [ -n "${AIRLOCK_BIN:-}" ]; then airlock=$AIRLOCK_BIN; else build_airlock; fi
[ -x "$airlock" ] || die "$airlock is not executable"
N=${N:-2000}
WARMUP=${WARMUP:-200}
PROFILE_ROOT_REFRESH_MS=${PROFILE_ROOT_REFRESH_MS:-60000}
serve_extra=() # more `airlock serve` flags for the next start
OUT=${OUT:-$(mktemp -d /var/tmp/airlock-profile.XXXXXX)}
mkdir -p "$OUT"
MT=application/vnd.oci.image.manifest.v1+json
port=$(free_port)
base=http://127.0.0.1:$port
pid=
stop() {
    if [ -n "$pid" ]; then
        kill -INT "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    pid=
}
bench_cleanup_extra() { stop; }
# start SERVER [WRAPPER...]: SERVER (airlock or nginx) on $port, under WRAPPER.
start() {
    local server=$1
    shift
    case $server in
    airlock)
        "$@" "$airlock" serve --data "$work/data" --listen "127.0.0.1:$port" --workers 1 \
            --allow-push --log warn "${serve_extra[@]}" >"$work/serve.log" 2>&1 &
        ;;
    nginx)
        "$@" nginx -c "$work/nginx/nginx.conf" -g 'daemon off; master_process off;' \
            >"$work/serve.log" 2>&1 &
        ;;
    esac
    pid=$!
    for _ in $(seq 1 600); do
        curl -sf -o /dev/null "$base/v2/" && return 0
        kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" "$work/nginx/error.log" >&2 2>/dev/null; die "$server exited"; }
        sleep 0.1
    done
    die "$server did not answer within 60 s"
}
. "$repo/scripts/bench/small-image.sh"

# --- load ---------------------------------------------------------------------
start airlock
push_small_image "$base" "$work"
stop
small_image_locations "$work/data" | nginx_conf "$work/nginx" 1 "127.0.0.1:$port"

# --- measure --------------------------------------------------------------------
urls() { # URL COUNT -> curl config: COUNT GETs of URL on one connection
    local i
    echo "header = \"Accept: $MT\""
    for ((i = 0; i < $2; i++)); do
        printf 'url = "%s"\noutput = "/dev/null"\n' "$1"
    done
}
check() { # SERVER URL EXPECTED_DIGEST
    local got
    got=$(curl -sSf -H "Accept: $MT" "$2" | sha256sum | cut -d' ' -f1)
    [ "sha256:$got" = "$3" ] || die "$1: GET $2 returned content with digest sha256:$got, expected $3"
}
declare -A path=([a]="/v2/bench/small/blobs/$layer" [b]="/v2/bench/small/manifests/v1")
declare -A want=([a]="$layer" [b]="$manifest")
declare -A label=([a]="(a) 4 KiB blob GET" [b]="(b) manifest GET by tag")
declare -A ir calls
for k in a b; do
    url=$base${path[$k]}
    urls "$url" "$WARMUP" >"$work/warm.cfg"
    urls "$url" "$N" >"$work/run.cfg"
    for s in airlock nginx; do
        # callgrind
        serve_extra=(--root-refresh-ms "$PROFILE_ROOT_REFRESH_MS")
        start "$s" valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.$k.$s.%p" --collect-atstart=yes
        check "$s" "$url" "${want[$k]}"
        curl -sSf -K "$work/warm.cfg"
        callgrind_control -z "$pid" >/dev/null 2>&1
        curl -sSf -K "$work/run.cfg"
        callgrind_control -d "requests" "$pid" >/dev/null 2>&1
        sleep 1
        dump=$(ls -t "$OUT"/callgrind."$k.$s".*.* 2>/dev/null | head -n1)
        [ -n "$dump" ] || die "no callgrind dump of $s in $OUT"
        stop
        ir[$k.$s]=$(awk '/^(summary|totals):/ { print $2; exit }' "$dump")
        # strace
        serve_extra=()
        start "$s"
        check "$s" "$url" "${want[$k]}"
        curl -sSf -K "$work/warm.cfg"
        strace -c -f -q -p "$pid" -o "$work/strace.$k.$s" &
        spid=$!
        sleep 1
        curl -sSf -K "$work/run.cfg"
        sleep 0.5
        kill -INT "$spid"
        wait "$spid" || true
        stop
        calls[$k.$s]=$(awk '$NF == "total" { print $4 }' "$work/strace.$k.$s")
        printf '%-26s %-8s %10.0f instructions/request  %6.2f syscalls/request   (N=%d; %s)\n' \
            "${label[$k]}" "$s" "$(awk -v a="${ir[$k.$s]}" -v n="$N" 'BEGIN { print a / n }')" \
            "$(awk -v a="${calls[$k.$s]}" -v n="$N" 'BEGIN { print a / n }')" "$N" "$dump"
        awk 'NR > 2 && $NF != "total" && $1 !~ /^-/ && $4 / n >= 0.01 { printf "    %-16s %7.2f/request\n", $NF, $4 / n }' \
            n="$N" "$work/strace.$k.$s" | sort -k2 -nr | head -n 12
    done
done
echo
printf '%-26s %14s %14s\n' figure 'instr. ratio' 'syscall ratio'
for k in a b; do
    printf '%-26s %13.2fx %13.2fx\n' "${label[$k]}" \
        "$(awk -v a="${ir[$k.airlock]}" -v n="${ir[$k.nginx]}" 'BEGIN { print a / n }')" \
        "$(awk -v a="${calls[$k.airlock]}" -v n="${calls[$k.nginx]}" 'BEGIN { print a / n }')"
done
echo "callgrind files: $OUT (callgrind_annotate --threshold=100 FILE)"
echo "airlock under callgrind: --root-refresh-ms $PROFILE_ROOT_REFRESH_MS (the refresh is per millisecond, not per request; see the header)"
