# Shared helpers of the scripts/bench-*.sh benchmarks; source it after
# `set -euo pipefail`:   . "$(dirname "$0")/bench/lib.sh"
#
# Sets: prog (the script's name), repo (the repository root), pids (an
# array of background processes), work (a fresh temporary directory under
# $BENCH_DIR, default /tmp).
# On exit the processes in `pids` are killed and waited for, and `work` is
# removed; a script with more to clean defines `bench_cleanup_extra`.

prog=${0##*/}
repo=$(cd "$(dirname "$0")/.." && pwd)
pids=()
work=$(mktemp -d "${BENCH_DIR:-/tmp}/${prog%.sh}.XXXXXX")
chmod 755 "$work"

# die MESSAGE: one line on stderr, exit 1.
die() {
    echo "$prog: error: $*" >&2
    exit 1
}

# note MESSAGE: progress on stderr.
note() {
    echo "$prog: $*" >&2
}

# need TOOL PACKAGE: fails naming the Debian package when TOOL is missing.
need() {
    command -v "$1" >/dev/null 2>&1 || die "'$1' not found: apt-get install $2"
}

# free_port: an unused TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_up NAME PID URL LOG: waits up to 10 s for URL to answer 2xx while
# PID lives; on failure prints LOG and dies.
wait_up() {
    local i
    for i in $(seq 1 100); do
        kill -0 "$2" 2>/dev/null || {
            cat "$4" >&2
            die "$1 exited during startup"
        }
        curl -sf -o /dev/null "$3" && return 0
        sleep 0.1
    done
    cat "$4" >&2
    die "$1 did not answer at $3 within 10 s"
}

# build_airlock: the release binary (cargo build --release), path in $airlock.
build_airlock() {
    (cd "$repo" && cargo build --release --quiet) || die "cargo build failed"
    airlock=$repo/target/release/airlock
}

# airlock_binary: $AIRLOCK_BIN when set (must be executable), else the
# release build; path in $airlock.
airlock_binary() {
    if [ -n "${AIRLOCK_BIN:-}" ]; then
        airlock=$AIRLOCK_BIN
        [ -x "$airlock" ] || die "AIRLOCK_BIN=$airlock is not executable"
    else
        need cargo "cargo (or rustup)"
        note "building airlock (cargo build --release)"
        build_airlock
        [ -x "$airlock" ] || die "$airlock missing after build"
    fi
}

# start_registry ADDR ROOT: Debian's docker-registry (the reference) on
# ADDR with its filesystem storage in ROOT (descriptor cache in memory, no
# redirects, deletes and upload purging off, no health checks of the
# driver), logging to $work/registry.log; waits until it answers and adds
# its pid to `pids` (also in $registry_pid).
start_registry() {
    need docker-registry docker-registry
    mkdir -p "$2"
    cat >"$work/registry.yml" <<YML
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $2
  cache:
    blobdescriptor: inmemory
  redirect:
    disable: true
  delete:
    enabled: false
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: $1
health:
  storagedriver:
    enabled: false
YML
    docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
    registry_pid=$!
    pids+=("$registry_pid")
    wait_up docker-registry "$registry_pid" "http://$1/v2/" "$work/registry.log"
}

# stack_layout [LAYOUT[:REF]]: sets LAYOUT (absolute) and REF (default
# `latest`): the argument, else the bookworm stack image of
# scripts/make-stack-image.sh in build/stack (built when absent).
stack_layout() {
    if [ $# -eq 1 ]; then
        LAYOUT=${1%%:*}
        REF=latest
        [ "$LAYOUT" = "$1" ] || REF=${1#*:}
    else
        LAYOUT=$repo/build/stack
        REF=latest
        if [ ! -f "$LAYOUT/index.json" ]; then
            note "building the bookworm stack image into $LAYOUT (debootstrap, a few minutes)"
            "$repo/scripts/make-stack-image.sh" "$LAYOUT" >&2 || die "make-stack-image.sh failed"
        fi
    fi
    [ -f "$LAYOUT/index.json" ] || die "$LAYOUT is not an OCI image layout"
    LAYOUT=$(cd "$LAYOUT" && pwd)
}

# nginx_conf DIR WORKERS LISTEN < SERVER_BODY: writes DIR/nginx.conf for
# `nginx -c DIR/nginx.conf -g 'daemon off;'`: WORKERS worker processes,
# sendfile, tcp_nopush, tcp_nodelay, access log off, keep-alive without a
# request cap, pid, error log and temporary files in DIR, and one server
# listening on LISTEN whose body (location blocks) is read from stdin.
nginx_conf() {
    mkdir -p "$1"
    {
        cat <<EOF
user $(id -un);
worker_processes $2;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    client_body_temp_path $1;
    proxy_temp_path $1;
    fastcgi_temp_path $1;
    uwsgi_temp_path $1;
    scgi_temp_path $1;
    server {
        listen $3;
EOF
        cat
        printf '    }\n}\n'
    } >"$1/nginx.conf"
}

# tree_sum PID FILE AWK: the sum over PID and its child processes (nginx's
# workers) of the number the awk program AWK prints from each one's
# /proc/P/FILE (FILE: stat or status); a process gone meanwhile counts 0.
tree_sum() {
    local p t=0 kids
    kids=$(cat /proc/"$1"/task/*/children 2>/dev/null || true)
    for p in "$1" $kids; do
        t=$((t + $(awk "$3" "/proc/$p/$2" 2>/dev/null || echo 0)))
    done
    echo "$t"
}

# cpu_ticks PID: user + system clock ticks of PID and of its child
# processes (nginx's workers), from /proc.
cpu_ticks() { tree_sum "$1" stat '{ print $14 + $15 }'; }

# cpu_ns PID: CPU time in nanoseconds of PID's live threads (the sum of
# /proc/PID/task/*/schedstat's first fields): finer than cpu_ticks's 10 ms,
# for one request; threads that exited are not counted.
cpu_ns() {
    cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ t += $1 } END { printf "%.0f\n", t }'
}

# rss_tree PID: VmRSS in KiB of PID plus its child processes (nginx's workers).
rss_tree() { tree_sum "$1" status '/^VmRSS:/ { print $2 }'; }

# rss_sampler PID OUT: in the background (its pid in $sampler), writes
# the peak VmRSS in KiB so far of PID and its children (rss_tree) to OUT, sampling every 50 ms, until killed.
rss_sampler() {
    (
        peak=0
        while kill -0 "$1" 2>/dev/null; do
            r=$(rss_tree "$1")
            [ "${r:-0}" -gt "$peak" ] && peak=$r && echo "$peak" >"$2"
            sleep 0.05
        done
    ) &
    sampler=$!
}

# median_rows FILE...: one line of the column-wise medians of the one-line
# files FILE... (numbers; the middle value of an odd count, the mean of the
# two middle values of an even one). For "medians of N rounds".
median_rows() {
    cat "$@" | awk '
    { for (i = 1; i <= NF; i++) v[i, NR] = $i + 0; if (NF > nf) nf = NF; n = NR }
    END {
        for (i = 1; i <= nf; i++) {
            for (j = 1; j <= n; j++) a[j] = v[i, j]
            for (j = 2; j <= n; j++) { x = a[j]; k = j - 1; while (k >= 1 && a[k] > x) { a[k + 1] = a[k]; k-- } a[k + 1] = x }
            m = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
            printf "%s%s", m, (i < nf ? " " : "\n")
        }
    }'
}

bench_cleanup() {
    local p
    if declare -F bench_cleanup_extra >/dev/null; then bench_cleanup_extra || true; fi
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
