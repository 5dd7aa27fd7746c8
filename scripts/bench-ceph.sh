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
#       (scripts/bench/tag-push-latency.py), through one replica, then
#       spread over two replicas on the same bucket (their root swaps race).
#       Target: p99 with two replicas <= 2x p99 with one.
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
CEPH_RGW_CLEANUP=1 "$repo/scripts/ceph-rgw.sh" "$work/ceph" "$rgw_port" bench >"$work/ceph.out" 2>&1 &
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

# (c) tag push p99, one replica, then two.
if [[ $PARTS == *c* ]]; then
port2=$(free_port)
"$airlock" serve --store s3://bench/site "${s3[@]}" --listen "127.0.0.1:$port2" --allow-push >"$work/serve2.log" 2>&1 &
pids+=($!)
wait_up "airlock serve" "${pids[-1]}" "http://127.0.0.1:$port2/v2/" "$work/serve2.log"
port3=$(free_port)
"$airlock" serve --store s3://bench/site "${s3[@]}" --listen "127.0.0.1:$port3" --allow-push >"$work/serve3.log" 2>&1 &
pids+=($!)
wait_up "airlock serve" "${pids[-1]}" "http://127.0.0.1:$port3/v2/" "$work/serve3.log"
note "(c) tag pushes: 8 writers x $PUSHES, one replica then two"
read -r c1_n c1_err c1_p50 c1_p99 c1_max < <(python3 "$repo/scripts/bench/tag-push-latency.py" one 8 "$PUSHES" "127.0.0.1:$port2")
read -r c2_n c2_err c2_p50 c2_p99 c2_max < <(python3 "$repo/scripts/bench/tag-push-latency.py" two 8 "$PUSHES" "127.0.0.1:$port2" "127.0.0.1:$port3")
fi

echo
echo "| figure | airlock | reference | ratio | target |"
echo "| --- | --- | --- | --- | --- |"
[[ $PARTS != *a* ]] || echo "| 64 MiB blob GET (median of $RUNS) | $(mibs "$a_airlock") MiB/s | s3cmd get: $(mibs "$a_s3cmd") MiB/s | $(ratio "$a_s3cmd" "$a_airlock")x | >= 0.9x: $(pass "$a_s3cmd/$a_airlock >= 0.9") |"
[[ $PARTS != *b* ]] || echo "| import of $SIZE_MIB MiB (median of $RUNS) | ${b_airlock} s | s3cmd put: ${b_s3cmd} s | $(ratio "$b_s3cmd" "$b_airlock")x | >= 0.8x: $(pass "$b_s3cmd/$b_airlock >= 0.8") |"
[[ $PARTS != *c* ]] || echo "| tag push p99, 8 writers | two replicas: ${c2_p99} ms (p50 ${c2_p50}, max ${c2_max}; $c2_n ok, $c2_err errors) | one replica: ${c1_p99} ms (p50 ${c1_p50}, max ${c1_max}; $c1_n ok, $c1_err errors) | $(ratio "$c2_p99" "$c1_p99")x | <= 2x: $(pass "$c2_p99/$c1_p99 <= 2 and $c1_err + $c2_err == 0") |"
