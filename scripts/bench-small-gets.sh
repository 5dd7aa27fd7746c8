#!/usr/bin/env bash
# Small GETs, airlock vs nginx (issue 7 §7): the two limit rows of
# scripts/bench-serve.sh, (a) GET of a 4 KiB blob and (b) GET of a manifest
# by tag, alone and repeated, so that one short run on a busy machine still
# gives a usable ratio.
#
#   scripts/bench-small-gets.sh
#
# Setup (not timed): a fresh data dir loaded over HTTP (serve
# --allow-push): a 4 KiB random layer, a config and an OCI manifest tagged
# bench/small:v1; airlock serve (--log warn) on it; nginx (Debian's
# nginx-light, 2 workers, sendfile, tcp_nodelay, access log off, as in
# bench-serve.sh) serving the same blob files at the same URLs. Both
# answers are checked against the digests first.
# Then ROUNDS rounds, each: for (a) and (b), nginx then airlock (then
# AIRLOCK_BASE_BIN's airlock, when given, on the same data dir):
#   wrk -t2 -c64 -d${DURATION}s URL
# Prints every run's requests/s, the load average (uptime) before each
# round, and per figure the best and the median of the rounds and their
# ratio to nginx's. Requests/s only: bench-serve.sh has the latency
# percentiles and CPU figures.
#
# PIN=1: the pinned run of issue 40: every server on CPU 0 (taskset; airlock
# --workers 1, nginx worker_processes 1) and the client on CPU 1 (taskset -c 1
# wrk -t1 -c16), and each run also reports the server's CPU time per request
# (user + system clock ticks of the server and its children over the
# requests answered, in microseconds), with the medians' ratio to nginx's.
#
# Environment: DURATION (seconds per run, default 5), ROUNDS (default 3),
# AIRLOCK_BIN (default: target/release/airlock, built), AIRLOCK_BASE_BIN (a
# second airlock binary to compare, e.g. the base commit's; optional),
# BENCH_DIR (default /tmp).
# Needs: apt-get install wrk nginx-light curl python3 coreutils.
# Run it under the machine's bench lock when others share the machine.
set -euo pipefail
. "$(dirname "$0")/bench/lib.sh"

for t in wrk:wrk nginx:nginx-light curl:curl python3:python3 sha256sum:coreutils; do
    need "${t%%:*}" "${t#*:}"
done
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
PIN=${PIN:-0}
if [ "$PIN" = 1 ]; then
    need taskset util-linux
    [ "$(nproc)" -ge 2 ] || die "PIN=1 needs 2 CPUs"
    on_server=(taskset -c 0) server_workers=1 client=(taskset -c 1 wrk -t1 -c16)
else
    on_server=() server_workers=2 client=(wrk -t2 -c64)
fi
if [ -n "${AIRLOCK_BIN:-}" ]; then
    airlock=$AIRLOCK_BIN
else
    build_airlock
fi
[ -x "$airlock" ] || die "$airlock is not executable"
base_bin=${AIRLOCK_BASE_BIN:-}
MT=application/vnd.oci.image.manifest.v1+json
. "$repo/scripts/bench/small-image.sh"

# --- load ----------------------------------------------------------------------------
start_airlock() { # NAME BINARY -> port in port_of[NAME]
    local port
    port=$(free_port)
    local workers=()
    [ "$PIN" = 1 ] && workers=(--workers 1)
    "${on_server[@]}" "$2" serve --data "$work/data" --listen "127.0.0.1:$port" --allow-push --log warn \
        "${workers[@]}" >"$work/$1.log" 2>&1 &
    pids+=("$!")
    pid_of[$1]=$!
    wait_up "$1" "$!" "http://127.0.0.1:$port/v2/" "$work/$1.log"
    port_of[$1]=$port
}
declare -A port_of pid_of
start_airlock airlock "$airlock"
base=http://127.0.0.1:${port_of[airlock]}
push_small_image "$base" "$work"
servers=(nginx airlock)
if [ -n "$base_bin" ]; then
    start_airlock base "$base_bin"
    servers+=(base)
fi

# --- nginx -------------------------------------------------------------------------------
port_of[nginx]=$(free_port)
small_image_locations "$work/data" | nginx_conf "$work/nginx" "$server_workers" "127.0.0.1:${port_of[nginx]}"
"${on_server[@]}" nginx -c "$work/nginx/nginx.conf" -g 'daemon off;' >"$work/nginx/stdout.log" 2>&1 &
pids+=("$!")
pid_of[nginx]=$!
wait_up nginx "$!" "http://127.0.0.1:${port_of[nginx]}/v2/" "$work/nginx/error.log"

# --- check -------------------------------------------------------------------------------
declare -A path=([a]="/v2/bench/small/blobs/$layer" [b]="/v2/bench/small/manifests/v1")
declare -A want=([a]="$layer" [b]="$manifest")
declare -A label=([a]="(a) 4 KiB blob GET" [b]="(b) manifest GET by tag")
for s in "${servers[@]}"; do
    for k in a b; do
        got=$(curl -sSf -H "Accept: $MT" "http://127.0.0.1:${port_of[$s]}${path[$k]}" | sha256sum | cut -d' ' -f1)
        [ "sha256:$got" = "${want[$k]}" ] || die "$s: GET ${path[$k]} returned sha256:$got, expected ${want[$k]}"
    done
done

# --- measure -----------------------------------------------------------------------------
declare -A runs cpus
for ((r = 1; r <= ROUNDS; r++)); do
    note "round $r/$ROUNDS, load: $(uptime | sed 's/.*load average: //')"
    for k in a b; do
        for s in "${servers[@]}"; do
            t0=$(cpu_ticks "${pid_of[$s]}")
            out=$("${client[@]}" -d"${DURATION}s" -H "Accept: $MT" "http://127.0.0.1:${port_of[$s]}${path[$k]}")
            t1=$(cpu_ticks "${pid_of[$s]}")
            if grep -q 'Non-2xx' <<<"$out"; then
                echo "$out" >&2
                die "$s: non-2xx answers to ${path[$k]}"
            fi
            rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
            runs[$k.$s]="${runs[$k.$s]:-} $rps"
            # clock ticks (1/100 s) over the requests answered, in µs
            us=$(awk -v t="$((t1 - t0))" -v r="$rps" -v d="$DURATION" 'BEGIN { printf "%.2f", t * 10000 / (r * d) }')
            cpus[$k.$s]="${cpus[$k.$s]:-} $us"
            printf '  %-26s %-8s %10.0f req/s  %6.2f µs CPU/request\n' "${label[$k]}" "$s" "$rps" "$us"
        done
    done
done
best() { tr ' ' '\n' <<<"$1" | grep . | sort -g | tail -n1; }
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo
printf '%-26s %-8s %12s %12s %10s %10s\n' figure server best median best/nginx med/nginx
for k in a b; do
    nb=$(best "${runs[$k.nginx]}")
    nm=$(median "${runs[$k.nginx]}")
    for s in "${servers[@]}"; do
        b=$(best "${runs[$k.$s]}")
        m=$(median "${runs[$k.$s]}")
        printf '%-26s %-8s %12.0f %12.0f %9.2fx %9.2fx\n' "${label[$k]}" "$s" "$b" "$m" \
            "$(awk -v a="$b" -v n="$nb" 'BEGIN { print a / n }')" "$(awk -v a="$m" -v n="$nm" 'BEGIN { print a / n }')"
    done
done
if [ "$PIN" = 1 ]; then
    echo
    printf '%-26s %-8s %18s %10s\n' figure server 'median µs/request' '/nginx'
    for k in a b; do
        nc=$(median "${cpus[$k.nginx]}")
        for s in "${servers[@]}"; do
            c=$(median "${cpus[$k.$s]}")
            printf '%-26s %-8s %18.2f %9.2fx\n' "${label[$k]}" "$s" "$c" \
                "$(awk -v a="$c" -v n="$nc" 'BEGIN { print a / n }')"
        done
    done
fi
echo "load after: $(uptime | sed 's/.*load average: //'), nproc $(nproc)"
