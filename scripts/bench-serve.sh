#!/usr/bin/env bash
# Benchmark `airlock serve` against Debian's docker-registry (CNCF distribution
# 2.8) serving the same content, on loopback only (127.0.0.1).
#
#   scripts/bench-serve.sh
#
# What it does
#   1. Setup (not timed): builds airlock (`cargo build --release`), generates an
#      OCI image layout (scripts/bench/gen-serve-layout.py: images "small" with
#      one 4 KiB layer, "big" with one 64 MiB layer, "multi" with five layers of
#      2-6 MiB; random incompressible bytes in valid tar+gzip layers of exactly
#      those sizes; every digest computed), starts docker-registry with its own generated config.yml
#      (filesystem storage in the work dir, 127.0.0.1:PORT, log level warn,
#      access log off, no auth, no redirects, in-memory blob descriptor cache)
#      and loads it with `skopeo copy --preserve-digests oci:LAYOUT:NAME
#      docker://.../bench/NAME:v1`.
#      airlock is loaded the same way (serve --allow-push) if `airlock serve
#      --help` lists --allow-push; otherwise (or with AIRLOCK_LOAD=bundle)
#      through a signed bundle (keys generate, bundle create, import), then
#      `airlock serve --listen 127.0.0.1:PORT`.
#   2. Checks that both registries return identical manifest bytes (and the
#      expected digest, media type and HEAD headers) and blobs whose sha256 is
#      their digest, for every URL measured; stops with an error otherwise.
#   3. Measures, each registry in turn:
#      (a) GET of the 4 KiB blob, (b) GET of the manifest by tag (Accept: the
#      OCI manifest media type), (c) GET of the 64 MiB blob, each against
#      airlock, docker-registry and nginx in ROUNDS (3) alternating rounds
#      (the figures are the medians of the rounds, column by column), with
#        wrk -t2 -c64 -d${DURATION}s --latency --timeout 30s URL
#      (--timeout only because wrk's 2 s default also caps its latency
#      histogram at 2 s, which 64 connections fetching 64 MiB each reach);
#      (d) HEAD of the manifest with
#        hey -z ${DURATION}s -c 64 -m HEAD -H "Accept: ..." URL
#      because Debian's wrk 4.1.0 cannot do HEAD: its parser waits for the
#      Content-Length bytes of body that a HEAD response never sends, so a
#      lua script setting wrk.method = "HEAD" completes 0 requests. hey is
#      heavier per request than wrk, so compare (d) across registries, not
#      with (b). Each run records requests/s, transfer/s, the p99 latency and
#      the server's and the load generator's CPU use (/proc/PID/stat and
#      /usr/bin/time);
#      (e) wall time for PULLS (50) concurrent
#        skopeo copy --src-tls-verify=false docker://HOST/bench/multi:v1 oci:DIR
#      (f) VmRSS (/proc/PID/status) right after loading (baseline), and with
#      CONNS (500) idle keep-alive connections open, each after one GET /v2/
#      (scripts/bench/idle-conns.py): once on the fresh server, before any
#      load, and once more at the end, after all the load (memory an
#      allocator keeps from the 64 MiB GETs shows there);
#      (g) concurrent writes (scripts/bench/concurrent-writes.py): WRITERS
#      clients at once with curl --parallel: manifest PUTs to new tags of one
#      repository, to new repositories, and blob-upload finishes; throughput
#      (writes/s) and errors. Target at 128 writers: >= 1x, zero errors.
#      (h) TLS (rustls; skipped with TLS=0, alone with TLS=only;
#      scripts/bench/serve-tls.sh): a second airlock process serving the
#      same data dir over HTTPS (`serve --tls-cert --tls-key`, a P-256
#      certificate from a test CA made with openssl) and a second
#      docker-registry over the same storage with its `http.tls` settings.
#      The same wrk command as (a) and (c) (keep-alive; TLS 1.3, the cipher
#      suite each server picks from OpenSSL's offer is printed: airlock
#      prefers AES-128-GCM) GETs the 4 KiB blob, then the 64 MiB blob, from
#      airlock over plain HTTP, airlock over TLS and docker-registry over
#      TLS, back to back. Targets: airlock TLS >= 0.7x airlock plain req/s
#      on the 4 KiB blob, >= 0.8x plain MiB/s on the 64 MiB blob, >= 10x
#      docker-registry over TLS on the 4 KiB blob.
#      What limits the 64 MiB figures on a 2-core machine: server and wrk
#      share both cores, and every byte costs CPU on both sides. Over plain
#      HTTP the server sends a verified blob with sendfile(2) (its first
#      read hashes it: SHA-256 with the SHA extensions), the kernel copies
#      the page cache into the socket and wrk copies it out: wrk's share of
#      the CPU limits the figure. Over TLS the server also
#      copies each 16 KiB record's plaintext into rustls's buffer and
#      encrypts it (AES-GCM, VAES/AVX2), and wrk (OpenSSL) decrypts it, so
#      the client's decryption competes with the server for the same two
#      cores. The TLS/plain ratio is thus a ratio of CPU per byte of the
#      whole loopback system (server + client), not of the server alone;
#      on a machine whose clients are elsewhere the server's own share is
#      what counts (the srv CPU column).
#      (i) rootfs downloads: a file of ROOTFS_BYTES (150 MB) random bytes
#      stands for a flattened rootfs.tar (the stacks API sends a rootfs
#      through the same blob response and store read as a registry blob GET),
#      pushed into airlock as a blob of bench/rootfs and served by nginx
#      from airlock's own file. First one GET of it from airlock: the first,
#      unverified read, which hashes the blob as it is sent (wall time and
#      server CPU ms per MiB), then ROUNDS more single GETs (verified: no
#      hashing; sendfile). Then, in ROUNDS alternating rounds, CELLS (64)
#      downloads at once with one `curl --parallel --parallel-max CELLS`
#      against airlock and nginx: aggregate MiB/s, peak RSS, CPU per MiB.
#      Server CPU per MiB served (ms, user+sys of the server process and its
#      children over the bytes moved) is reported for (c), (h) and (i).
#   4. Prints the details, then the table: figure | airlock | docker-registry |
#      ratio (airlock / docker-registry) | target, PASS/FAIL, for the targets:
#        4 KiB blob GET and manifest GET: req/s >= 10x, p99 <= 0.2x reference
#        64 MiB blob GET: bytes/s >= 1.5x reference and >= 1.0x nginx, peak RSS (VmRSS sampled
#        every 50 ms during the 64 connections' GETs) < 64 MiB
#        500 idle connections: airlock RSS < 100 MiB
#      and, as the limit row, nginx (Debian's nginx-light, sendfile, 2
#      workers) serving the same blob and manifest files at the same URLs:
#        4 KiB blob GET and manifest GET: >= 0.9x nginx's req/s
#        (i) CELLS rootfs downloads at once: MiB/s >= 1.0x nginx, airlock's
#        peak RSS < 64 MiB
#        (h) 64 MiB GET over TLS: MiB/s >= 1.0x docker-registry over TLS
#
# Both servers and wrk share this machine's CPUs (nproc is printed); on a
# small machine the load generator takes a large share of them.
#
# Exit status: 0 when the benchmark ran, whether or not a target was met;
# non-zero on any error (missing tool, failed build, content mismatch, non-2xx
# responses, failed pull, ...).
#
# Environment:
#   DURATION     seconds per wrk run (default 10)
#   PULLS        concurrent skopeo pulls in (e) (default 50)
#   CONNS        idle connections in (f) (default 500)
#   WRITERS      concurrent writers in (g) (default "8 64 128")
#   BENCH_DIR    where the temporary work dir goes (default /var/tmp; needs
#                about 2 GiB free); removed at exit
#   AIRLOCK_BIN  use this binary instead of building target/release/airlock
#   TLS          1 (default): run (h); 0: skip it; only: set up, check the
#                content, run (h) alone and print its figures
#   ROUNDS       alternating rounds of (a), (b), (c), (h), (i) (default 3)
#   CELLS        downloads at once in (i) (default 64)
#   ROOTFS_BYTES size of (i)'s rootfs file (default 150000000)
#   AIRLOCK_LOAD how to load airlock: auto (default: push when `airlock serve
#                --help` lists --allow-push, else bundle; a failed push is
#                reported, in the output too, and the bundle is used instead),
#                push (a failed push is an error), or bundle; (i) needs push
set -euo pipefail

case "${1:-}" in
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
esac
BENCH_DIR=${BENCH_DIR:-/var/tmp}
[ -d "$BENCH_DIR" ] || { echo "${0##*/}: error: BENCH_DIR $BENCH_DIR is not a directory" >&2; exit 1; }
. "$(dirname "$0")/bench/lib.sh" # die note need free_port wait_up build_airlock cpu_ticks rss_sampler median_rows; $work, $pids, cleanup
helpers=$repo/scripts/bench
HOST=127.0.0.1
TAG=v1
MANIFEST_MT=application/vnd.oci.image.manifest.v1+json

[ $# -eq 0 ] || die "usage: $prog   (settings come from the environment; see --help)"
DURATION=${DURATION:-10}
PULLS=${PULLS:-50}
CONNS=${CONNS:-500}
WRITERS=${WRITERS:-8 64 128}
AIRLOCK_LOAD=${AIRLOCK_LOAD:-auto}
TLS=${TLS:-1}
ROUNDS=${ROUNDS:-3}
CELLS=${CELLS:-64}
ROOTFS_BYTES=${ROOTFS_BYTES:-150000000}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer, got '$ROUNDS'"
[[ $CELLS =~ ^[1-9][0-9]*$ ]] || die "CELLS must be a positive integer, got '$CELLS'"
[[ $ROOTFS_BYTES =~ ^[1-9][0-9]*$ ]] || die "ROOTFS_BYTES must be a positive integer, got '$ROOTFS_BYTES'"
[[ $DURATION =~ ^[1-9][0-9]*$ ]] || die "DURATION must be a positive integer (seconds), got '$DURATION'"
[[ $PULLS =~ ^[1-9][0-9]*$ ]] || die "PULLS must be a positive integer, got '$PULLS'"
[[ $CONNS =~ ^[1-9][0-9]*$ ]] || die "CONNS must be a positive integer, got '$CONNS'"
case $AIRLOCK_LOAD in auto | push | bundle) ;; *) die "AIRLOCK_LOAD must be auto, push or bundle, got '$AIRLOCK_LOAD'" ;; esac
case $TLS in 0 | 1 | only) ;; *) die "TLS must be 1, 0 or only, got '$TLS'" ;; esac

# --- tools -----------------------------------------------------------------
need wrk wrk
need hey hey
need docker-registry docker-registry
need nginx nginx-light
need skopeo skopeo
need curl curl
need jq jq
need python3 python3
need sha256sum coreutils
need cmp diffutils
need awk mawk
need getconf libc-bin
need df coreutils
[ -x /usr/bin/time ] || die "/usr/bin/time not found: apt-get install time"
[ "$TLS" = 0 ] || need openssl openssl
for f in gen-serve-layout.py idle-conns.py concurrent-writes.py serve-tls.sh; do
    [ -r "$helpers/$f" ] || die "$helpers/$f missing"
done
ulimit -n 4096 2>/dev/null || true # CONNS sockets + wrk's; inherited by both servers

airlock_binary

# --- work dir ($work, made and removed with $pids by lib.sh) ---------------------
avail_kib=$(df -Pk "$work" | awk 'NR == 2 { print $4 }')
[ "$avail_kib" -ge $((2 * 1024 * 1024)) ] ||
    die "$BENCH_DIR has $((avail_kib / 1024)) MiB free; need about 2048 MiB"

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
now_ns() { date +%s%N; }
clk_tck=$(getconf CLK_TCK)
# cpu_per_mib C0 C1 T0 T1 MIB_S: server CPU milliseconds per MiB served,
# from CPU ticks and wall nanoseconds around a run that moved MIB_S MiB/s.
cpu_per_mib() {
    awk -v a="$1" -v b="$2" -v hz="$clk_tck" -v t0="$3" -v t1="$4" -v tr="$5" 'BEGIN {
        mib = tr * (t1 - t0) / 1e9
        printf "%.3f", (mib > 0) ? (b - a) / hz * 1000 / mib : 0
    }'
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
. "$helpers/serve-tls.sh" # part (h): tls_start tls_measure tls_details tls_table

# --- content -----------------------------------------------------------------
note "work dir $work; generating the OCI layout"
layout=$work/layout
python3 "$helpers/gen-serve-layout.py" "$layout" >"$work/images.txt"
declare -A mdigest msize blobs_of
while read -r name md ms cd layers; do
    mdigest[$name]=$md
    msize[$name]=$ms
    blobs_of[$name]="$cd ${layers//,/ }" # config digest, then DIGEST:SIZE per layer
done <"$work/images.txt"
names=(small big multi)
for n in "${names[@]}"; do
    [ -n "${mdigest[$n]:-}" ] || die "generator did not produce image '$n'"
done
small_blob=$(awk '$1 == "small" { split($5, a, ":"); print a[1] ":" a[2] }' "$work/images.txt")
big_blob=$(awk '$1 == "big" { split($5, a, ":"); print a[1] ":" a[2] }' "$work/images.txt")

# --- docker-registry (reference) ---------------------------------------------
ref_port=$(free_port)
note "starting docker-registry on $HOST:$ref_port"
start_registry "$HOST:$ref_port" "$work/registry-storage"
ref_pid=$registry_pid

try_push() { # PORT NAME: skopeo copy of one image; its output in $work/push.log
    skopeo copy --quiet --preserve-digests --dest-tls-verify=false "oci:$layout:$2" \
        "docker://$HOST:$1/bench/$2:$TAG" >"$work/push.log" 2>&1
}
push_failed() { # SERVER_LOG MESSAGE
    cat "$work/push.log" >&2
    echo "--- server log (last 20 lines):" >&2
    tail -n 20 "$1" >&2
    die "$2"
}
for n in "${names[@]}"; do
    note "loading bench/$n:$TAG into docker-registry"
    try_push "$ref_port" "$n" || push_failed "$work/registry.log" "skopeo copy of $n to docker-registry failed"
done

# --- airlock -------------------------------------------------------------------
air_port=$(free_port)
# Every client here comes from $HOST, so the per-address connection cap
# (default 256) would refuse (f)'s CONNS idle connections: raise it past them.
start_airlock() { # [extra serve args...]
    "$airlock" serve --data "$work/airlock-data" --listen "$HOST:$air_port" --log warn \
        --max-connections-per-address $((CONNS + 256)) "$@" \
        >"$work/airlock.log" 2>&1 &
    air_pid=$!
    pids+=("$air_pid")
    wait_up airlock "$air_pid" "http://$HOST:$air_port/v2/" "$work/airlock.log"
}
serve_help=$("$airlock" serve --help)
load=$AIRLOCK_LOAD
if [ "$load" = auto ]; then
    load=bundle
    if grep -q -- '--allow-push' <<<"$serve_help"; then load=push; fi
fi
push_note=""
if [ "$load" = push ]; then
    load_mode="skopeo copy (push) into serve --allow-push"
    note "starting airlock on $HOST:$air_port with --allow-push"
    start_airlock --allow-push
    for n in "${names[@]}"; do
        note "loading bench/$n:$TAG into airlock (push)"
        try_push "$air_port" "$n" && continue
        [ "$AIRLOCK_LOAD" = auto ] ||
            push_failed "$work/airlock.log" "skopeo copy of $n to airlock failed (AIRLOCK_LOAD=bundle loads through a bundle)"
        # auto: report the failure loudly, then load through a bundle instead
        push_note=" -- PUSH FAILED ($(grep -o 'received unexpected HTTP status: [^"]*' "$work/push.log" | head -n1 || true);"
        push_note+=" airlock log: $(grep -v '^$' "$work/airlock.log" | tail -n1 | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-160))"
        note "WARNING: pushing $n to airlock failed; falling back to a signed bundle. skopeo said:"
        cat "$work/push.log" >&2
        tail -n 5 "$work/airlock.log" >&2
        kill "$air_pid"
        wait "$air_pid" || true
        pids=("${pids[@]:0:${#pids[@]}-1}")
        rm -rf "$work/airlock-data"
        load=bundle
        break
    done
fi
if [ "$load" = bundle ]; then
    load_mode="signed bundle (keys generate, bundle create, import)$push_note"
    note "loading airlock through a signed bundle"
    "$airlock" keys generate --uid "Bench <bench@example.org>" --out "$work/key" >/dev/null
    : >"$work/mirror.toml"
    for n in "${names[@]}"; do
        printf '[[image]]\nsource = "oci:%s:%s"\nrepository = "bench/%s"\ntags = ["%s"]\n\n' \
            "$layout" "$n" "$n" "$TAG" >>"$work/mirror.toml"
    done
    "$airlock" bundle create --config "$work/mirror.toml" --sign-key "$work/key.sec.asc" \
        -o "$work/bundle.tar" >/dev/null
    "$airlock" import --data "$work/airlock-data" --keyring "$work/key.pub.asc" \
        "$work/bundle.tar" >"$work/import.log" 2>&1 || {
        cat "$work/import.log" >&2
        die "airlock import failed"
    }
    rm -f "$work/bundle.tar"
    note "starting airlock on $HOST:$air_port"
    start_airlock
fi

servers=(airlock ref)
declare -A port_of=([airlock]=$air_port [ref]=$ref_port)
declare -A scheme_of=() # https for the TLS servers of (h); http otherwise
declare -A pid_of=([airlock]=$air_pid [ref]=$ref_pid)
declare -A label_of=([airlock]=airlock [ref]=docker-registry)

# --- (i) the rootfs file: pushed into airlock as a blob of bench/rootfs -----------
# A generated file of ROOTFS_BYTES random bytes, standing for a flattened
# rootfs.tar: the stacks API sends a rootfs exactly as the registry sends a
# blob (registry::pull::blob_response over the same store read), so a blob
# GET measures the same path.
[ "$load" = push ] || die "(i) needs airlock loaded by push (AIRLOCK_LOAD=push or auto)"
head -c "$ROOTFS_BYTES" /dev/urandom >"$work/rootfs.tar"
rootfs_blob="sha256:$(sha256sum <"$work/rootfs.tar" | cut -d' ' -f1)"
note "(i) pushing the $ROOTFS_BYTES-byte rootfs file into airlock as bench/rootfs $rootfs_blob"
upload=$(curl -sSf -D - -o /dev/null -X POST "http://$HOST:$air_port/v2/bench/rootfs/blobs/uploads/" |
    awk -F': ' 'tolower($1) == "location" { sub(/\r$/, "", $2); print $2 }')
case $upload in http*) ;; *) upload=http://$HOST:$air_port$upload ;; esac
case $upload in *\?*) upload+="&digest=$rootfs_blob" ;; *) upload+="?digest=$rootfs_blob" ;; esac
curl -sSf -o /dev/null -X PUT -H 'Content-Type: application/octet-stream' \
    -T "$work/rootfs.tar" "$upload" || die "(i) pushing the rootfs file into airlock failed"
rm -f "$work/rootfs.tar"

# --- nginx: the same files, the limit for (a), (b), (c) and (i) --------------------
# Debian's nginx-light, 2 workers, sendfile on, access log off, serving airlock's
# own blob files at the same URLs (the manifest with its media type).
nginx_port=$(free_port)
blob_file() { # DIGEST -> path of the blob in airlock's data dir
    local hex=${1#sha256:}
    echo "$work/airlock-data/blobs/sha256/${hex:0:2}/$hex"
}
nginx_conf "$work/nginx" 2 "$HOST:$nginx_port" <<EOF
        location = /v2/ { return 200 "{}"; }
        location = /v2/bench/small/blobs/$small_blob {
            default_type application/octet-stream;
            alias $(blob_file "$small_blob");
        }
        location = /v2/bench/small/manifests/$TAG {
            default_type $MANIFEST_MT;
            alias $(blob_file "${mdigest[small]}");
        }
        location = /v2/bench/big/blobs/$big_blob {
            default_type application/octet-stream;
            alias $(blob_file "$big_blob");
        }
        location = /v2/bench/rootfs/blobs/$rootfs_blob {
            default_type application/x-tar;
            alias $(blob_file "$rootfs_blob");
        }
EOF
note "starting nginx on $HOST:$nginx_port"
nginx -c "$work/nginx/nginx.conf" -g 'daemon off;' >"$work/nginx/stdout.log" 2>&1 &
nginx_pid=$!
pids+=("$nginx_pid")
wait_up nginx "$nginx_pid" "http://$HOST:$nginx_port/v2/" "$work/nginx/error.log"
port_of[nginx]=$nginx_port
pid_of[nginx]=$nginx_pid
label_of[nginx]=nginx

# --- same content on both ------------------------------------------------------
note "checking that both registries serve identical content"
header() { # FILE NAME: value of a response header (case-insensitive), CR stripped
    awk -v h="$2" 'BEGIN { h = tolower(h) } {
        sub(/\r$/, ""); i = index($0, ":")
        if (i > 0 && tolower(substr($0, 1, i - 1)) == h) { v = substr($0, i + 1); sub(/^ +/, "", v); print v }
    }' "$1"
}
check_manifest() { # SERVER NAME -> writes $work/check/SERVER.NAME.manifest
    local s=$1 n=$2 url out hdr got
    url="http://$HOST:${port_of[$s]}/v2/bench/$n/manifests/$TAG"
    out=$work/check/$s.$n.manifest
    hdr=$work/check/$s.$n.headers
    curl -sSf -H "Accept: $MANIFEST_MT" -D "$hdr" -o "$out" "$url" || die "${label_of[$s]}: GET $url failed"
    got="sha256:$(sha256sum <"$out" | cut -d' ' -f1)"
    [ "$got" = "${mdigest[$n]}" ] || die "${label_of[$s]}: GET $url body has digest $got, expected ${mdigest[$n]}"
    [ "$(header "$hdr" content-type)" = "$MANIFEST_MT" ] ||
        die "${label_of[$s]}: GET $url Content-Type '$(header "$hdr" content-type)', expected $MANIFEST_MT"
    [ "$(header "$hdr" docker-content-digest)" = "${mdigest[$n]}" ] ||
        die "${label_of[$s]}: GET $url Docker-Content-Digest '$(header "$hdr" docker-content-digest)', expected ${mdigest[$n]}"
    curl -sSf -I -H "Accept: $MANIFEST_MT" -o "$hdr.head" "$url" || die "${label_of[$s]}: HEAD $url failed"
    [ "$(header "$hdr.head" docker-content-digest)" = "${mdigest[$n]}" ] ||
        die "${label_of[$s]}: HEAD $url Docker-Content-Digest '$(header "$hdr.head" docker-content-digest)', expected ${mdigest[$n]}"
    [ "$(header "$hdr.head" content-length)" = "${msize[$n]}" ] ||
        die "${label_of[$s]}: HEAD $url Content-Length '$(header "$hdr.head" content-length)', expected ${msize[$n]}"
}
check_blob() { # SERVER NAME DIGEST
    local s=$1 n=$2 d=$3 url got
    url="http://$HOST:${port_of[$s]}/v2/bench/$n/blobs/$d"
    got="sha256:$(curl -sSf "$url" | sha256sum | cut -d' ' -f1)" || die "${label_of[$s]}: GET $url failed"
    [ "$got" = "$d" ] || die "${label_of[$s]}: GET $url body has digest $got"
}
mkdir -p "$work/check"
n_checked=0
for n in "${names[@]}"; do
    for s in "${servers[@]}"; do
        check_manifest "$s" "$n"
        for b in ${blobs_of[$n]}; do
            d=$b
            [[ $b == *:*:* ]] && d=${b%:*} # layers are DIGEST:SIZE, the config just DIGEST
            check_blob "$s" "$n" "$d"
            n_checked=$((n_checked + 1))
        done
    done
    cmp -s "$work/check/airlock.$n.manifest" "$work/check/ref.$n.manifest" ||
        die "bench/$n:$TAG: the two registries return different manifest bytes"
done
note "content identical: 3 manifests (GET + HEAD) and $((n_checked / 2)) blobs on each registry"

declare -A rss_base
for s in "${servers[@]}"; do
    rss_base[$s]=$(rss_kib "${pid_of[$s]}")
done
idle_conns() { # TAG
    local s
    for s in "${servers[@]}"; do
        note "(f) ${label_of[$s]}: $CONNS idle keep-alive connections ($1)"
        python3 "$helpers/idle-conns.py" "$HOST" "${port_of[$s]}" "${pid_of[$s]}" "$CONNS" 2 >"$work/res.$1.$s" ||
            die "(f) ${label_of[$s]}: opening $CONNS keep-alive connections failed"
    done
    sleep 1
}
[ "$TLS" = only ] || idle_conns f0

# --- wrk figures -----------------------------------------------------------------
# Results: $work/res.FIG.SERVER = "rps p99_ms transfer_mib_s server_cpu% wrk_cpu% socket_errors"
parse_wrk() { # WRK_OUTPUT -> "rps p99_ms transfer_mib_s non2xx socket_errors"
    awk '
    function ms(v) {
        if (v ~ /us$/) return (v + 0) / 1000
        if (v ~ /ms$/) return v + 0
        if (v ~ /m$/) return (v + 0) * 60000
        if (v ~ /h$/) return (v + 0) * 3600000
        if (v ~ /s$/) return (v + 0) * 1000
        return -1
    }
    function mib(v) {
        if (v ~ /TB$/) return (v + 0) * 1048576
        if (v ~ /GB$/) return (v + 0) * 1024
        if (v ~ /MB$/) return v + 0
        if (v ~ /KB$/) return (v + 0) / 1024
        if (v ~ /B$/) return (v + 0) / 1048576
        return -1
    }
    BEGIN { rps = -1; p99 = -1; tr = -1; non2xx = 0; errs = 0; inlat = 0 }
    /Latency Distribution/ { inlat = 1; next }
    inlat && $1 == "99%" { p99 = ms($2); inlat = 0 }
    /^Requests\/sec:/ { rps = $2 }
    /^Transfer\/sec:/ { tr = mib($2) }
    /Non-2xx or 3xx responses:/ { non2xx = $NF }
    /Socket errors:/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+,?$/) errs += $i + 0 }
    END { printf "%s %s %s %s %s\n", rps, p99, tr, non2xx, errs }
    ' "$1"
}

# --- report helpers -------------------------------------------------------------
field() { awk -v c="$3" '{ print $c }' "$work/res.$1.$2"; } # FIG SERVER COLUMN

# row LABEL AIRLOCK REF TARGET_KIND TARGET_VALUE FORMAT
#   TARGET_KIND: ge (ratio >= v), le (ratio <= v), abs_lt (airlock < v), none
row() {
    awk -v l="$1" -v a="$2" -v r="$3" -v k="$4" -v v="$5" -v f="$6" 'BEGIN {
        ratio = (r > 0) ? a / r : 0
        if (k == "ge") t = sprintf(">= %gx  %s", v, (ratio >= v ? "PASS" : "FAIL"))
        else if (k == "le") t = sprintf("<= %gx  %s", v, (ratio <= v ? "PASS" : "FAIL"))
        else if (k == "abs_lt") t = sprintf("< %g MiB  %s", v, (a < v ? "PASS" : "FAIL"))
        else t = "-"
        printf "| %-36s | " f " | " f " | %8.2fx | %-15s |\n", l, a, r, ratio, t
    }'
}
get() { field "$1" "$2" "$3"; }
mib() { awk -v k="$1" 'BEGIN { print k / 1024 }'; }

run_wrk() { # FIG SERVER PATH [wrk args...]
    local fig=$1 s=$2 path=$3
    shift 3
    local url="${scheme_of[$s]:-http}://$HOST:${port_of[$s]}$path" out=$work/wrk.$fig.$s
    local c0 c1 t0 t1 rps p99 tr non2xx errs wrk_cpu srv_cpu sampler
    note "($fig) ${label_of[$s]}: wrk -t2 -c64 -d${DURATION}s --latency --timeout 30s $* $url"
    c0=$(cpu_ticks "${pid_of[$s]}")
    t0=$(now_ns)
    rss_sampler "${pid_of[$s]}" "$out.rss"
    /usr/bin/time -f '%P' -o "$out.time" wrk -t2 -c64 -d"${DURATION}s" --latency --timeout 30s "$@" "$url" >"$out" 2>&1 || {
        cat "$out" >&2
        die "wrk failed against ${label_of[$s]}"
    }
    t1=$(now_ns)
    c1=$(cpu_ticks "${pid_of[$s]}")
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    kill -0 "${pid_of[$s]}" 2>/dev/null || die "${label_of[$s]} died during ($fig)"
    read -r rps p99 tr non2xx errs < <(parse_wrk "$out")
    if [ "$rps" = -1 ] || [ "$p99" = -1 ] || [ "$tr" = -1 ]; then
        cat "$out" >&2
        die "could not parse the wrk output of ($fig) against ${label_of[$s]}"
    fi
    if [ "$non2xx" != 0 ]; then
        cat "$out" >&2
        die "($fig) ${label_of[$s]}: $non2xx non-2xx responses: the figures would be meaningless"
    fi
    wrk_cpu=$(tail -n1 "$out.time" | tr -d '%')
    srv_cpu=$(awk -v a="$c0" -v b="$c1" -v hz="$clk_tck" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "%.0f", (b - a) / hz / ((t1 - t0) / 1e9) * 100 }')
    echo "$rps $p99 $tr $srv_cpu $wrk_cpu $errs $(cat "$out.rss" 2>/dev/null || echo 0)" \
        "$(cpu_per_mib "$c0" "$c1" "$t0" "$t1" "$tr")" >"$work/res.$fig.$s"
    sleep 1
}

# rounds FIG PATH SERVER... [-- WRK_ARGS...]: ROUNDS alternating rounds of
# run_wrk FIG.rN against each SERVER in turn; then $work/res.FIG.SERVER holds
# the column-wise medians of its rounds.
rounds() {
    local fig=$1 path=$2 r s
    shift 2
    local on=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        on+=("$1")
        shift
    done
    [ $# -eq 0 ] || shift
    for r in $(seq 1 "$ROUNDS"); do
        for s in "${on[@]}"; do
            run_wrk "$fig.r$r" "$s" "$path" "$@"
        done
    done
    for s in "${on[@]}"; do
        median_rows "$work"/res."$fig".r*."$s" >"$work/res.$fig.$s"
    done
}

# run_parallel FIG SERVER PATH: CELLS downloads of PATH at once (one curl,
# --parallel); $work/res.FIG.SERVER = "downloads/s wall_ms MiB/s srv_cpu%
# curl_cpu% 0 peak_rss_kib cpu_ms_per_mib", like run_wrk's.
run_parallel() {
    local fig=$1 s=$2 path=$3
    local url="http://$HOST:${port_of[$s]}$path" out=$work/par.$fig.$s
    local i c0 c1 t0 t1 args=() ok want tr sampler
    for i in $(seq 1 "$CELLS"); do args+=(-o /dev/null "$url"); done
    note "($fig) ${label_of[$s]}: $CELLS downloads at once: curl --parallel --parallel-max $CELLS $url"
    c0=$(cpu_ticks "${pid_of[$s]}")
    t0=$(now_ns)
    rss_sampler "${pid_of[$s]}" "$out.rss"
    /usr/bin/time -f '%P' -o "$out.time" curl -sS --parallel --parallel-immediate --parallel-max "$CELLS" \
        -w '%{http_code} %{size_download}\n' "${args[@]}" >"$out" 2>"$out.err" || true
    t1=$(now_ns)
    c1=$(cpu_ticks "${pid_of[$s]}")
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    want="200 $ROOTFS_BYTES"
    ok=$(grep -cx "$want" "$out" || true)
    [ "$ok" = "$CELLS" ] || {
        cat "$out" "$out.err" >&2
        die "($fig) ${label_of[$s]}: $ok of $CELLS downloads complete"
    }
    tr=$(awk -v n="$CELLS" -v b="$ROOTFS_BYTES" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.1f", n * b / 1048576 / ((t1 - t0) / 1e9) }')
    awk -v n="$CELLS" -v t0="$t0" -v t1="$t1" -v tr="$tr" -v a="$c0" -v b="$c1" -v hz="$clk_tck" \
        -v gen="$(tail -n1 "$out.time" | tr -d '%')" -v rss="$(cat "$out.rss" 2>/dev/null || echo 0)" \
        -v cpm="$(cpu_per_mib "$c0" "$c1" "$t0" "$t1" "$tr")" 'BEGIN {
        w = (t1 - t0) / 1e9
        printf "%.2f %.0f %s %.0f %s 0 %s %s\n", n / w, w * 1000, tr, (b - a) / hz / w * 100, gen, rss, cpm
    }' >"$work/res.$fig.$s"
    sleep 1
}

# one_get SERVER PATH: one GET with curl; prints "wall_s cpu_ms_per_mib"
# (the server's CPU time per MiB of body).
one_get() {
    local url c0 c1 t0 t1 n
    url="http://$HOST:${port_of[$1]}$2"
    c0=$(cpu_ns "${pid_of[$1]}")
    t0=$(now_ns)
    n=$(curl -sSf -o /dev/null -w '%{size_download}' "$url") || die "GET $url failed"
    t1=$(now_ns)
    c1=$(cpu_ns "${pid_of[$1]}")
    awk -v n="$n" -v a="$c0" -v b="$c1" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "%.3f %.3f\n", (t1 - t0) / 1e9, (b - a) / 1e6 / (n / 1048576) }'
}

run_hey() { # FIG SERVER PATH [hey args...]
    local fig=$1 s=$2 path=$3
    shift 3
    local url="http://$HOST:${port_of[$s]}$path" out=$work/hey.$fig.$s
    local c0 c1 t0 t1 rps p99 codes gen_cpu srv_cpu
    note "($fig) ${label_of[$s]}: hey -z ${DURATION}s -c 64 $* $url"
    c0=$(cpu_ticks "${pid_of[$s]}")
    t0=$(now_ns)
    /usr/bin/time -f '%P' -o "$out.time" hey -z "${DURATION}s" -c 64 "$@" "$url" >"$out" 2>&1 || {
        cat "$out" >&2
        die "hey failed against ${label_of[$s]}"
    }
    t1=$(now_ns)
    c1=$(cpu_ticks "${pid_of[$s]}")
    kill -0 "${pid_of[$s]}" 2>/dev/null || die "${label_of[$s]} died during ($fig)"
    rps=$(awk '/Requests\/sec:/ { print $2 }' "$out")
    p99=$(awk '$1 == "99%" && $2 == "in" { printf "%.3f", $3 * 1000 }' "$out")
    codes=$(awk '/Status code distribution:/ { on = 1; next } on && /\[[0-9]+\]/ { print $1 } on && !/\[/ { on = 0 }' "$out" | tr -d '[]' | sort -u | tr '\n' ' ')
    if [ -z "$rps" ] || [ -z "$p99" ]; then
        cat "$out" >&2
        die "could not parse the hey output of ($fig) against ${label_of[$s]}"
    fi
    if [ "$codes" != "200 " ] || grep -q 'Error distribution' "$out"; then
        cat "$out" >&2
        die "($fig) ${label_of[$s]}: responses other than 200 (status codes: $codes): the figures would be meaningless"
    fi
    gen_cpu=$(tail -n1 "$out.time" | tr -d '%')
    srv_cpu=$(awk -v a="$c0" -v b="$c1" -v hz="$clk_tck" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "%.0f", (b - a) / hz / ((t1 - t0) / 1e9) * 100 }')
    echo "$rps $p99 0 $srv_cpu $gen_cpu 0" >"$work/res.$fig.$s"
    sleep 1
}

# TLS=only: part (h) alone, then its report.
if [ "$TLS" = only ]; then
    tls_start
    tls_measure "/v2/bench/small/blobs/$small_blob" "/v2/bench/big/blobs/$big_blob"
    echo
    echo "airlock serve benchmark, part (h) only (TLS=only): loopback $HOST, $(nproc) CPUs ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo))"
    echo "  wrk -t2 -c64 -d${DURATION}s shares the CPUs with the servers; load average at start $load_before, at end $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "details (srv/gen CPU = user+sys time of the server/load generator over wall time; 100 % = one core):"
    printf '  %-28s %-16s %12s %10s %12s %8s %8s %7s\n' figure server req/s "p99 ms" "MiB/s" "srv CPU" "gen CPU" "sockerr"
    tls_details
    tls_table
    exit 0
fi

accept=(-H "Accept: $MANIFEST_MT")
rounds a "/v2/bench/small/blobs/$small_blob" "${servers[@]}" nginx
rounds b "/v2/bench/small/manifests/$TAG" "${servers[@]}" nginx -- "${accept[@]}"
rounds c "/v2/bench/big/blobs/$big_blob" "${servers[@]}" nginx

# --- (i) rootfs downloads: the first (hashing) read, then CELLS at once ---------------
rootfs_path=/v2/bench/rootfs/blobs/$rootfs_blob
note "(i) airlock: first read of the rootfs blob (unverified: hashed as it is sent)"
read -r first_wall first_cpm < <(one_get airlock "$rootfs_path")
for r in $(seq 1 "$ROUNDS"); do one_get airlock "$rootfs_path" >"$work/res.i1.r$r"; done
read -r again_wall again_cpm < <(median_rows "$work"/res.i1.r*)
for r in $(seq 1 "$ROUNDS"); do
    for s in airlock nginx; do
        run_parallel "i.r$r" "$s" "$rootfs_path"
    done
done
for s in airlock nginx; do
    median_rows "$work"/res.i.r*."$s" >"$work/res.i.$s"
done
for s in "${servers[@]}"; do
    run_hey d "$s" "/v2/bench/small/manifests/$TAG" -m HEAD "${accept[@]}"
done

# --- (h) TLS: plain and TLS GETs back to back (scripts/bench/serve-tls.sh) ----------
if [ "$TLS" = 1 ]; then
    tls_start
    tls_measure "/v2/bench/small/blobs/$small_blob" "/v2/bench/big/blobs/$big_blob"
fi

# --- (e) concurrent skopeo pulls -------------------------------------------------
run_pulls() { # SERVER -> $work/res.e.SERVER = "wall_s server_cpu%"
    local s=$1 i p failed=0 c0 c1 t0 t1 got
    local dir=$work/pulls
    rm -rf "$dir"
    mkdir -p "$dir"
    note "(e) ${label_of[$s]}: $PULLS concurrent skopeo pulls of bench/multi:$TAG"
    local mine=()
    c0=$(cpu_ticks "${pid_of[$s]}")
    t0=$(now_ns)
    for i in $(seq 1 "$PULLS"); do
        skopeo copy --quiet --src-tls-verify=false "docker://$HOST:${port_of[$s]}/bench/multi:$TAG" \
            "oci:$dir/$i:$TAG" >"$dir/$i.log" 2>&1 &
        mine+=("$!")
        pids+=("$!")
    done
    for p in "${mine[@]}"; do
        wait "$p" || failed=$((failed + 1))
    done
    t1=$(now_ns)
    c1=$(cpu_ticks "${pid_of[$s]}")
    pids=("${pids[@]:0:${#pids[@]}-${#mine[@]}}")
    if [ "$failed" -ne 0 ]; then
        cat "$dir"/*.log >&2
        die "(e) ${label_of[$s]}: $failed of $PULLS pulls failed"
    fi
    for i in $(seq 1 "$PULLS"); do
        got=$(jq -r '.manifests[0].digest' "$dir/$i/index.json")
        [ "$got" = "${mdigest[multi]}" ] || die "(e) ${label_of[$s]}: pull $i got manifest $got, expected ${mdigest[multi]}"
    done
    awk -v a="$c0" -v b="$c1" -v hz="$clk_tck" -v t0="$t0" -v t1="$t1" \
        'BEGIN { w = (t1 - t0) / 1e9; printf "%.2f %.0f\n", w, (b - a) / hz / w * 100 }' >"$work/res.e.$s"
    rm -rf "$dir"
    sleep 1
}
for s in "${servers[@]}"; do
    run_pulls "$s"
done

# --- (g) concurrent writes: manifest PUTs and blob-upload finishes --------------------
# scripts/bench/concurrent-writes.py: N clients at once (curl --parallel), N new
# tags of one repository, N repositories, or N blob-upload PUTs; each mode and N
# in WRITERS for each server in turn. Throughput = N / wall seconds.
run_writes() { # SERVER MODE N
    local s=$1 mode=$2 n=$3 out
    note "(g) ${label_of[$s]}: $n concurrent writes ($mode)"
    out=$(python3 "$helpers/concurrent-writes.py" "$HOST:${port_of[$s]}" "$mode" "$n" "$mode$n$s") ||
        die "(g) ${label_of[$s]}: $mode $n failed"
    echo "$out" >"$work/res.g.$mode.$n.$s"
}
for mode in tags repos blobs; do
    for n in $WRITERS; do
        for s in "${servers[@]}"; do
            run_writes "$s" "$mode" "$n"
        done
    done
done

# --- (f) idle keep-alive connections again, after all the load -----------------------
idle_conns f

# --- report ------------------------------------------------------------------------

echo
echo "airlock serve benchmark: airlock vs docker-registry $(docker-registry --version 2>/dev/null | awk '{ print $3 }'), loopback $HOST"
echo "  machine: $(nproc) CPUs ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)); wrk -t2 -c64 -d${DURATION}s shares them with the server"
echo "  load average at start $load_before, at end $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  airlock loaded by: $load_mode"
echo "  content: small = 4096 B layer, big = 64 MiB layer, multi = 5 layers (2-6 MiB, 20 MiB total); random bytes, tar+gzip layers"
echo
echo "details (srv/gen CPU = user+sys time of the server/load generator over wall time; 100 % = one core):"
printf '  %-28s %-16s %12s %10s %12s %8s %8s %7s\n' figure server req/s "p99 ms" "MiB/s" "srv CPU" "gen CPU" "sockerr"
echo "  (a), (b), (c), (h), (i): medians of $ROUNDS alternating rounds (each column on its own)"
for fig in a b c d i; do
    on=("${servers[@]}")
    case $fig in
        a) lab="(a) 4 KiB blob GET" on+=(nginx) ;;
        b) lab="(b) manifest GET by tag" on+=(nginx) ;;
        c) lab="(c) 64 MiB blob GET" on+=(nginx) ;;
        d) lab="(d) manifest HEAD (hey)" ;;
        i) lab="(i) $CELLS rootfs at once" on=(airlock nginx) ;;
    esac
    for s in "${on[@]}"; do
        read -r rps p99 tr sc wc errs _ <"$work/res.$fig.$s"
        printf '  %-28s %-16s %12.0f %10.2f %12.1f %7s%% %7s%% %7s\n' "$lab" "${label_of[$s]}" "$rps" "$p99" "$tr" "$sc" "$wc" "$errs"
    done
done
if [ "$TLS" = 1 ]; then tls_details; fi
for s in airlock ref nginx; do
    printf '  %-28s %-16s %8.3f ms of server CPU per MiB served\n' "(c) CPU per MiB" "${label_of[$s]}" "$(get c "$s" 8)"
done
for s in airlock nginx; do
    printf '  %-28s %-16s %8.3f ms of server CPU per MiB served, peak RSS %.1f MiB\n' "(i) CPU per MiB" "${label_of[$s]}" \
        "$(get i "$s" 8)" "$(mib "$(get i "$s" 7)")"
done
printf '  %-28s %-16s %s s, %s ms of server CPU per MiB (first read, hashed); verified reads: %s s, %s ms per MiB\n' \
    "(i) one GET of the rootfs" airlock "$first_wall" "$first_cpm" "$again_wall" "$again_cpm"
for s in "${servers[@]}"; do
    printf '  %-28s %-16s %s s wall for %s pulls, server CPU %s%%\n' "(e) $PULLS skopeo pulls" "${label_of[$s]}" \
        "$(field e "$s" 1)" "$PULLS" "$(field e "$s" 2)"
done
for f in f0 f; do
    for s in "${servers[@]}"; do
        read -r before loaded open n <"$work/res.$f.$s"
        printf '  %-28s %-16s RSS %6.1f MiB before, %6.1f MiB with %s idle conns (%s/%s still open after 2 s)\n' \
            "(f) $([ $f = f0 ] && echo "fresh server" || echo "after all load")" "${label_of[$s]}" \
            "$(awk -v k="$before" 'BEGIN { print k / 1024 }')" "$(awk -v k="$loaded" 'BEGIN { print k / 1024 }')" "$n" "$open" "$n"
    done
done
for s in "${servers[@]}"; do
    for fig in a b c d; do
        errs=$(field "$fig" "$s" 6)
        [ "$errs" = 0 ] || echo "  note: ($fig) ${label_of[$s]}: wrk counted $errs socket errors/timeouts (timeouts: requests over 30 s)"
    done
done


echo
printf '| %-36s | %15s | %15s | %9s | %-15s |\n' figure airlock docker-registry ratio target
printf '|%s|%s|%s|%s|%s|\n' "$(printf '%38s' '' | tr ' ' -)" "$(printf '%17s' '' | tr ' ' -)" \
    "$(printf '%17s' '' | tr ' ' -)" "$(printf '%11s' '' | tr ' ' -)" "$(printf '%17s' '' | tr ' ' -)"
row "(a) 4 KiB blob GET req/s" "$(get a airlock 1)" "$(get a ref 1)" ge 10 "%15.0f"
row "(a) 4 KiB blob GET p99 ms" "$(get a airlock 2)" "$(get a ref 2)" le 0.2 "%15.2f"
row "(b) manifest GET req/s" "$(get b airlock 1)" "$(get b ref 1)" ge 10 "%15.0f"
row "(b) manifest GET p99 ms" "$(get b airlock 2)" "$(get b ref 2)" le 0.2 "%15.2f"
row "(a) 4 KiB blob GET req/s / nginx" "$(get a airlock 1)" "$(get a nginx 1)" ge 0.9 "%15.0f"
row "(b) manifest GET req/s / nginx" "$(get b airlock 1)" "$(get b nginx 1)" ge 0.9 "%15.0f"
row "(c) 64 MiB blob GET MiB/s" "$(get c airlock 3)" "$(get c ref 3)" ge 1.5 "%15.1f"
row "(c) 64 MiB blob GET MiB/s / nginx" "$(get c airlock 3)" "$(get c nginx 3)" ge 1.0 "%15.1f"
row "(c) CPU ms per MiB (lower=better)" "$(get c airlock 8)" "$(get c ref 8)" none 0 "%15.3f"
row "(c) CPU ms per MiB / nginx" "$(get c airlock 8)" "$(get c nginx 8)" none 0 "%15.3f"
row "(i) $CELLS rootfs at once MiB/s / nginx" "$(get i airlock 3)" "$(get i nginx 3)" ge 1.0 "%15.1f"
row "(i) peak RSS, $CELLS rootfs, MiB / nginx" "$(mib "$(get i airlock 7)")" "$(mib "$(get i nginx 7)")" abs_lt 64 "%15.1f"
row "(i) CPU ms per MiB / nginx" "$(get i airlock 8)" "$(get i nginx 8)" none 0 "%15.3f"
row "(i) first read CPU ms/MiB / verified" "$first_cpm" "$again_cpm" none 0 "%15.3f"
row "(c) 64 MiB blob GET req/s" "$(get c airlock 1)" "$(get c ref 1)" none 0 "%15.2f"
row "(c) 64 MiB blob GET p99 ms" "$(get c airlock 2)" "$(get c ref 2)" none 0 "%15.2f"
row "(c) peak RSS during 64 MiB GETs MiB" "$(mib "$(get c airlock 7)")" "$(mib "$(get c ref 7)")" abs_lt 64 "%15.1f"
row "(d) manifest HEAD req/s (hey)" "$(get d airlock 1)" "$(get d ref 1)" none 0 "%15.0f"
row "(d) manifest HEAD p99 ms (hey)" "$(get d airlock 2)" "$(get d ref 2)" none 0 "%15.2f"
row "(e) $PULLS pulls wall s (lower=better)" "$(get e airlock 1)" "$(get e ref 1)" none 0 "%15.2f"
for mode in tags repos blobs; do
    for n in $WRITERS; do
        a=$work/res.g.$mode.$n.airlock r=$work/res.g.$mode.$n.ref
        tput() { awk '{ printf "%.1f", ($1 + $2) / $3 }' "$1"; }
        kind=none
        [ "$n" = 128 ] && kind=ge
        row "(g) $n writers $mode/s (errors $(awk '{ print $2 }' "$a")/$(awk '{ print $2 }' "$r"))" \
            "$(tput "$a")" "$(tput "$r")" "$kind" 1 "%15.1f"
    done
done
row "(f) RSS baseline MiB" "$(mib "${rss_base[airlock]}")" "$(mib "${rss_base[ref]}")" none 0 "%15.1f"
row "(f) RSS $CONNS idle conns, fresh MiB" "$(mib "$(get f0 airlock 2)")" "$(mib "$(get f0 ref 2)")" abs_lt 100 "%15.1f"
row "(f) RSS $CONNS idle conns, after load" "$(mib "$(get f airlock 2)")" "$(mib "$(get f ref 2)")" abs_lt 100 "%15.1f"
if [ "$TLS" = 1 ]; then tls_table; fi
