#!/usr/bin/env bash
# airlock on Ceph RGW (issue 37), beside RGW's own speed, in one run on
# loopback: a single-node Ceph from scripts/ceph-rgw.sh (Debian's 16.2).
#
#   scripts/bench-ceph.sh            # as root (Ceph's daemons run as root)
#
# What it measures
#   (a) 64 MiB blob GET: `curl` of the blob through `airlock serve`
#       (--store s3://bench/site) vs `s3cmd get` of the very object from
#       RGW; RUNS each, median MiB/s. Target: airlock >= 0.9x.
#   (b) import of a 512 MiB bundle (scripts/bench/gen-import-layout.py,
#       incompressible blobs) into a fresh prefix vs `s3cmd put` of the
#       same bundle file; RUNS each, median seconds. Target: >= 0.8x.
#   (c) tag push latency: 8 writers, PUSHES manifest PUTs each to new tags
#       (scripts/bench/tag-push-latency.py; 2 warm-up pushes per writer
#       first), through one replica, then spread over two replicas on the
#       same bucket (their root swaps race); RUNS rounds, median p99.
#       Target: p99 with two replicas <= 2x p99 with one. Run twice: on
#       RGW's default beast frontend and on a second gateway of the same
#       cluster with tcp_nodelay=1 (the default holds every small response
#       until the client acknowledges its head: ~40 ms for a client that
#       delays its ACKs; airlock's S3 client acknowledges at once).
# Prints each figure and ratio, then PASS/FAIL per target.
#
# Needs: ceph-mon ceph-mgr ceph-osd radosgw s3cmd curl python3 python3-boto3
# (scripts/install-test-deps.sh, `apt-get install s3cmd`). Environment:
# PARTS (default abc: which of (a), (b), (c) to run), RUNS (default 3),
# PUSHES (default 40), SIZE_MIB (default 512), BENCH_DIR
# (default /tmp), AIRLOCK_BIN (use this binary instead of building).
set -euo pipefail
. "$(dirname "$0")/bench/lib.sh"

PARTS=${PARTS:-abc}
RUNS=${RUNS:-3}
PUSHES=${PUSHES:-40}
SIZE_MIB=${SIZE_MIB:-512}
need s3cmd s3cmd
need curl curl
need python3 python3
[ "$(id -u)" = 0 ] || die "run as root: Ceph's daemons need it"
airlock_binary

# Ceph, in the foreground of a background job; stopped (and its directory
# removed) by lib.sh's cleanup through `pids`.
rgw_port=$(free_port)
note "starting Ceph RGW on 127.0.0.1:$rgw_port (about 30 s)"
nodelay_port=$(free_port)
CEPH_RGW_CLEANUP=1 CEPH_RGW_NODELAY_PORT=$nodelay_port "$repo/scripts/ceph-rgw.sh" "$work/ceph" "$rgw_port" bench >"$work/ceph.out" 2>&1 &
pids+=($!)
for _ in $(seq 180); do
    grep -q '^ready ' "$work/ceph.out" && break
    kill -0 "${pids[-1]}" 2>/dev/null || {
        cat "$work/ceph.out" >&2
        die "ceph-rgw.sh exited"
    }
    sleep 1
done
grep -q '^ready ' "$work/ceph.out" || die "Ceph RGW not ready within 180 s"
endpoint=http://127.0.0.1:$rgw_port
export AWS_ACCESS_KEY_ID=airlocktest AWS_SECRET_ACCESS_KEY=airlocktestsecret AWS_REGION=us-east-1
s3cmd=(s3cmd --access_key="$AWS_ACCESS_KEY_ID" --secret_key="$AWS_SECRET_ACCESS_KEY"
    --host="127.0.0.1:$rgw_port" --host-bucket="127.0.0.1:$rgw_port" --no-ssl
    --region=us-east-1 --no-progress --quiet -c /dev/null)
s3=(--s3-endpoint "$endpoint")

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
pass() { python3 -c "import sys; sys.exit(0 if $1 else 1)" && echo PASS || echo FAIL; }
# secs CMD...: wall seconds of CMD (output discarded).
secs() {
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1-$t0:.3f}')"
}

note "generating layouts and bundles"
"$airlock" keys generate --uid "Bench <bench@example.org>" --out "$work/key" >/dev/null
python3 "$repo/scripts/bench/gen-serve-layout.py" "$work/serve" >"$work/serve.txt"
[[ $PARTS != *b* ]] || python3 "$repo/scripts/bench/gen-import-layout.py" "$work/import" "$SIZE_MIB" >"$work/import.txt"
printf '[[image]]\nsource = "oci:%s:big"\nrepository = "bench/big"\ntags = ["v1"]\n' "$work/serve" >"$work/serve.toml"
if [[ $PARTS == *b* ]]; then
    : >"$work/import.toml"
    while read -r ref _; do
        printf '[[image]]\nsource = "oci:%s:%s"\nrepository = "bench/%s"\ntags = ["v1"]\n\n' \
            "$work/import" "$ref" "$ref" >>"$work/import.toml"
    done <"$work/import.txt"
    "$airlock" bundle create --config "$work/import.toml" --sign-key "$work/key.sec.asc" -o "$work/import.tar" >/dev/null
fi
"$airlock" bundle create --config "$work/serve.toml" --sign-key "$work/key.sec.asc" -o "$work/serve.tar" >/dev/null
"$airlock" import --store s3://bench/site "${s3[@]}" --keyring "$work/key.pub.asc" "$work/serve.tar" >/dev/null

# (a) 64 MiB GET.
if [[ $PARTS == *a* ]]; then
big=$(awk '$1 == "big" {print $5}' "$work/serve.txt" | cut -d: -f1-2)
big_size=$((64 << 20))
port=$(free_port)
"$airlock" serve --store s3://bench/site "${s3[@]}" --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
pids+=($!)
wait_up "airlock serve" "${pids[-1]}" "http://127.0.0.1:$port/v2/" "$work/serve.log"
object=s3://bench/site/blobs/sha256/${big:7:2}/${big#sha256:}
note "(a) 64 MiB GET: $RUNS runs each"
for i in $(seq "$RUNS"); do
    secs curl -sf -o /dev/null "http://127.0.0.1:$port/v2/bench/big/blobs/$big" >>"$work/a-airlock"
    secs "${s3cmd[@]}" get --force "$object" "$work/got" >>"$work/a-s3cmd"
    rm -f "$work/got"
done
a_airlock=$(median <"$work/a-airlock")
a_s3cmd=$(median <"$work/a-s3cmd")
mibs() { python3 -c "print(f'{$big_size/1048576/$1:.1f}')"; }
fi

# (b) 512 MiB import.
if [[ $PARTS == *b* ]]; then
note "(b) import of $SIZE_MIB MiB: $RUNS runs each"
for i in $(seq "$RUNS"); do
    secs "$airlock" import --store "s3://bench/import$i" "${s3[@]}" --keyring "$work/key.pub.asc" "$work/import.tar" >>"$work/b-airlock"
    secs "${s3cmd[@]}" put "$work/import.tar" "s3://bench/put$i/import.tar" >>"$work/b-s3cmd"
done
b_airlock=$(median <"$work/b-airlock")
b_s3cmd=$(median <"$work/b-s3cmd")
fi

# (c) tag push p99, one replica, then two; RUNS rounds alternating, on the
# default gateway and on the tcp_nodelay one.
# push_rounds LABEL ENDPOINT: sets LABEL_{one,two}_{p99,p50,n,err} (medians
# of p99 and p50 over RUNS rounds; ok pushes and errors summed).
push_rounds() {
    local label=$1 ep=$2 r1 r2 p q
    r1=$(free_port)
    "$airlock" serve --store "s3://bench/tags-$label" --s3-endpoint "$ep" --listen "127.0.0.1:$r1" --allow-push >"$work/serve-$label-1.log" 2>&1 &
    pids+=($!)
    wait_up "airlock serve" "${pids[-1]}" "http://127.0.0.1:$r1/v2/" "$work/serve-$label-1.log"
    r2=$(free_port)
    "$airlock" serve --store "s3://bench/tags-$label" --s3-endpoint "$ep" --listen "127.0.0.1:$r2" --allow-push >"$work/serve-$label-2.log" 2>&1 &
    pids+=($!)
    wait_up "airlock serve" "${pids[-1]}" "http://127.0.0.1:$r2/v2/" "$work/serve-$label-2.log"
    : >"$work/c-$label-one"
    : >"$work/c-$label-two"
    for i in $(seq "$RUNS"); do
        python3 "$repo/scripts/bench/tag-push-latency.py" "one$i" 8 "$PUSHES" "127.0.0.1:$r1" >>"$work/c-$label-one"
        python3 "$repo/scripts/bench/tag-push-latency.py" "two$i" 8 "$PUSHES" "127.0.0.1:$r1" "127.0.0.1:$r2" >>"$work/c-$label-two"
    done
    kill "${pids[-1]}" "${pids[-2]}" 2>/dev/null || true
    for q in one two; do
        p=$work/c-$label-$q
        printf -v "${label}_${q}_p99" %s "$(awk '{print $4}' "$p" | median)"
        printf -v "${label}_${q}_p50" %s "$(awk '{print $3}' "$p" | median)"
        printf -v "${label}_${q}_n" %s "$(awk '{s += $1} END {print s}' "$p")"
        printf -v "${label}_${q}_err" %s "$(awk '{s += $2} END {print s}' "$p")"
    done
}
if [[ $PARTS == *c* ]]; then
    note "(c) tag pushes: 8 writers x $PUSHES, one replica then two, $RUNS rounds; default gateway"
    push_rounds dflt "$endpoint"
    note "(c) the same on the tcp_nodelay=1 gateway"
    push_rounds nodelay "http://127.0.0.1:$nodelay_port"
fi

echo
echo "| figure | airlock | reference | ratio | target |"
echo "| --- | --- | --- | --- | --- |"
[[ $PARTS != *a* ]] || echo "| 64 MiB blob GET (median of $RUNS) | $(mibs "$a_airlock") MiB/s | s3cmd get: $(mibs "$a_s3cmd") MiB/s | $(ratio "$a_s3cmd" "$a_airlock")x | >= 0.9x: $(pass "$a_s3cmd/$a_airlock >= 0.9") |"
[[ $PARTS != *b* ]] || echo "| import of $SIZE_MIB MiB (median of $RUNS) | ${b_airlock} s | s3cmd put: ${b_s3cmd} s | $(ratio "$b_s3cmd" "$b_airlock")x | >= 0.8x: $(pass "$b_s3cmd/$b_airlock >= 0.8") |"
if [[ $PARTS == *c* ]]; then
    for label in nodelay dflt; do
        name=$([ $label = dflt ] && echo "default beast" || echo "beast tcp_nodelay=1")
        o99=${label}_one_p99 o50=${label}_one_p50 on=${label}_one_n oe=${label}_one_err
        t99=${label}_two_p99 t50=${label}_two_p50 tn=${label}_two_n te=${label}_two_err
        echo "| tag push p99, 8 writers, RGW $name (median of $RUNS) | two replicas: ${!t99} ms (p50 ${!t50}; ${!tn} ok, ${!te} errors) | one replica: ${!o99} ms (p50 ${!o50}; ${!on} ok, ${!oe} errors) | $(ratio "${!t99}" "${!o99}")x | <= 2x: $(pass "${!t99}/${!o99} <= 2 and ${!oe} + ${!te} == 0") |"
    done
fi
