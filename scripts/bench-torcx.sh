#!/usr/bin/env bash
# Benchmark airlock's torcx remote against nginx serving the same files, on
# loopback only (127.0.0.1).
#
#   scripts/bench-torcx.sh
#
# What it does
#   1. Setup (not timed): builds airlock (`cargo build --release`), makes a
#      64 MiB `.torcx.tgz` (a tar of 64 MiB of random, incompressible bytes
#      plus `.torcx/manifest.json`, gzip -1), an RSA-3072 remote key and an
#      ed25519 release key (`airlock keys generate`), bundles the addon
#      (`[[addon]]`), imports it and starts `airlock serve --torcx-key`.
#      Fetches the signed contents and the archive from airlock once and lays
#      the same bytes out under nginx's root at the same paths (literal `:` in
#      the file name), then starts nginx (sendfile on, access log off, one
#      worker per CPU, keep-alive).
#   2. Checks that both answer byte-identical contents and archives (sha512
#      of the archive equal to the contents' `hash`); stops otherwise.
#   3. Measures each server in turn with
#        wrk -t2 -c64 -d${DURATION}s --latency --timeout 30s URL
#      for (a) GET of `torcx_remote_contents.json.asc` and (b) GET of the
#      64 MiB `hello:1.0.torcx.tgz`: requests/s, transfer/s and p99 latency.
#   4. Prints the table: figure | airlock | nginx | ratio (airlock / nginx).
#
# Both servers and wrk share this machine's CPUs (nproc is printed).
# Exit status: 0 when the benchmark ran, whatever the figures; non-zero on
# any error (missing tool, failed build, content mismatch, non-2xx).
#
# Environment: DURATION (seconds per wrk run, default 10), AIRLOCK_PORT
# (default 5101), NGINX_PORT (default 5102).
# Needs: apt-get install wrk nginx curl python3
set -euo pipefail

DURATION=${DURATION:-10}
AIRLOCK_PORT=${AIRLOCK_PORT:-5101}
NGINX_PORT=${NGINX_PORT:-5102}
HOST=127.0.0.1
REMOTE=com.example.bench
BOARD=amd64-usr
OS=3033.2.0
. "$(dirname "$0")/bench/lib.sh"
need wrk wrk
need nginx nginx
need curl curl
need python3 python3
need sha512sum coreutils

cd "$repo"
note "cargo build --release"
build_airlock
bin=$airlock
bench_cleanup_extra() {
    [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null
}

note "making a 64 MiB addon in $work"
mkdir -p "$work/root/.torcx" "$work/root/bin"
head -c $((64 * 1024 * 1024 - 64 * 1024)) /dev/urandom >"$work/root/bin/payload"
echo '{"kind":"image-manifest-v0","value":{"bin":["/bin/payload"]}}' >"$work/root/.torcx/manifest.json"
tar -C "$work/root" -cf - . | gzip -1 >"$work/hello:1.0.torcx.tgz"
cat >"$work/mirror.toml" <<EOF
[[addon]]
remote = "$REMOTE"
name = "hello"
version = "1.0"
format = "tgz"
source = "hello:1.0.torcx.tgz"
boards = ["$BOARD"]
os_versions = ["$OS"]
default_for = ["$OS"]
EOF
"$bin" keys generate --uid "Bench <bench@example.org>" --out "$work/release" >/dev/null
"$bin" keys generate --algo rsa3072 --uid "Bench remote <remote@example.org>" --out "$work/remote" >/dev/null
"$bin" bundle create --config "$work/mirror.toml" --sign-key "$work/release.sec.asc" -o "$work/b.tar" >/dev/null
"$bin" import --data "$work/data" --keyring "$work/release.pub.asc" "$work/b.tar" >/dev/null

"$bin" serve --data "$work/data" --listen "$HOST:$AIRLOCK_PORT" \
    --torcx-key "$REMOTE=$work/remote.sec.asc" &
pids+=($!)
apid=$!
path=/torcx/$REMOTE/$BOARD/$OS
for _ in $(seq 100); do
    curl -sf -o /dev/null "http://$HOST:$AIRLOCK_PORT/healthz" && break
    sleep 0.1
done
mkdir -p "$work/www$path"
curl -sSf -o "$work/www$path/torcx_remote_contents.json.asc" "http://$HOST:$AIRLOCK_PORT$path/torcx_remote_contents.json.asc"
curl -sSf -o "$work/www$path/hello:1.0.torcx.tgz" "http://$HOST:$AIRLOCK_PORT$path/hello:1.0.torcx.tgz"
chmod -R a+rX "$work/www"

cat >"$work/nginx.conf" <<EOF
worker_processes auto;
pid $work/nginx.pid;
error_log $work/nginx.err warn;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 100000;
    default_type application/octet-stream;
    client_body_temp_path $work/nginx-tmp;
    proxy_temp_path $work/nginx-tmp;
    fastcgi_temp_path $work/nginx-tmp;
    uwsgi_temp_path $work/nginx-tmp;
    scgi_temp_path $work/nginx-tmp;
    server {
        listen $HOST:$NGINX_PORT;
        root $work/www;
    }
}
EOF
nginx -c "$work/nginx.conf" -p "$work" || die "nginx did not start (see $work/nginx.err)"
for _ in $(seq 100); do
    curl -sf -o /dev/null "http://$HOST:$NGINX_PORT$path/torcx_remote_contents.json.asc" && break
    sleep 0.1
done

note "checking that both serve the same bytes"
for f in torcx_remote_contents.json.asc hello:1.0.torcx.tgz; do
    a=$(curl -sSf "http://$HOST:$AIRLOCK_PORT$path/$f" | sha512sum | cut -d' ' -f1)
    n=$(curl -sSf "http://$HOST:$NGINX_PORT$path/$f" | sha512sum | cut -d' ' -f1)
    [ "$a" = "$n" ] || die "$f differs between airlock and nginx"
done
want=$(sha512sum "$work/hello:1.0.torcx.tgz" | cut -d' ' -f1)
grep -q "\"sha512-$want\"" "$work/www$path/torcx_remote_contents.json.asc" ||
    die "contents hash is not the archive's sha512"

# run FIG URL -> "rps mib_s p99_ms"
run() {
    local out=$work/wrk.$1
    note "($1) wrk -t2 -c64 -d${DURATION}s --latency --timeout 30s $2"
    wrk -t2 -c64 -d"${DURATION}s" --latency --timeout 30s "$2" >"$out" 2>&1 || die "wrk failed: $(cat "$out")"
    grep -q "Non-2xx" "$out" && die "non-2xx responses: $(cat "$out")"
    python3 - "$out" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
m = re.search(r"Transfer/sec:\s+([\d.]+)(\w+)", t)
tr = float(m.group(1)) * {"B": 1 / 2**20, "KB": 1 / 1024, "MB": 1, "GB": 1024}[m.group(2)]
m = re.search(r"99%\s+([\d.]+)(us|ms|s)", t)
p99 = float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[m.group(2)]
print(f"{rps:.1f} {tr:.1f} {p99:.2f}")
PY
}

echo "nproc: $(nproc)"
declare -A res
for fig in contents archive; do
    f=torcx_remote_contents.json.asc
    [ $fig = archive ] && f=hello:1.0.torcx.tgz
    res[$fig.airlock]=$(run "$fig.airlock" "http://$HOST:$AIRLOCK_PORT$path/$f")
    res[$fig.nginx]=$(run "$fig.nginx" "http://$HOST:$NGINX_PORT$path/$f")
done
kill -0 "$apid" || die "airlock died during the run"

printf '\n%-34s %14s %14s %8s\n' figure airlock nginx ratio
row() { # LABEL FIG FIELD(1 rps, 2 MiB/s, 3 p99)
    local a n
    a=$(echo "${res[$2.airlock]}" | cut -d' ' -f"$3")
    n=$(echo "${res[$2.nginx]}" | cut -d' ' -f"$3")
    printf '%-34s %14s %14s %8s\n' "$1" "$a" "$n" "$(python3 -c "print(f'{$a / $n:.2f}' if $n else '-')")"
}
row "contents GET req/s" contents 1
row "contents GET p99 ms" contents 3
row "64 MiB .torcx.tgz GET MiB/s" archive 2
row "64 MiB .torcx.tgz GET p99 ms" archive 3
