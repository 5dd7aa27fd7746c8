#!/usr/bin/env bash
# A single-node Ceph cluster with the RADOS Gateway, from Debian's packages
# (ceph-mon ceph-mgr ceph-osd radosgw), for tests and benchmarks: one
# monitor, one manager, one bluestore OSD on a sparse file, pools of size
# 1, RGW's S3 API on loopback. Everything lives under DIR; nothing is
# installed or changed outside it. Runs as root.
#
#   scripts/ceph-rgw.sh DIR RGW_PORT [BUCKET]
#
# Prints `ready http://127.0.0.1:RGW_PORT` once the S3 user (access key
# airlocktest, secret airlocktestsecret) and BUCKET exist, then stays in
# the foreground until SIGTERM/SIGINT, when it stops the daemons (and,
# with CEPH_RGW_CLEANUP=1, removes DIR). Daemon logs: DIR/log/. Takes
# about 30 s to start and about 500 MB of memory; the OSD's 6 GiB file
# is sparse.
#
# RGW's beast frontend runs with its defaults, as a site installs it:
# without `tcp_nodelay`, so each response of 8 KiB or less reaches a
# client that delays its ACKs ~40 ms late (Nagle's algorithm meets the
# delayed ACK; airlock's S3 client acknowledges at once, TCP_QUICKACK).
# With CEPH_RGW_NODELAY_PORT set, a second gateway on that port serves the
# same cluster with `tcp_nodelay=1` (Ceph's documented latency option), to
# compare the two.
set -euo pipefail

prog=ceph-rgw.sh
die() {
    echo "$prog: error: $*" >&2
    exit 1
}
[ $# -ge 2 ] || die "usage: $prog DIR RGW_PORT [BUCKET]"
dir=$(realpath -m "$1")
rgw_port=$2
bucket=${3:-}
for tool in ceph-mon ceph-mgr ceph-osd radosgw radosgw-admin monmaptool ceph-authtool ceph python3; do
    command -v "$tool" >/dev/null 2>&1 ||
        die "'$tool' not found: apt-get install ceph-mon ceph-mgr ceph-osd radosgw (scripts/install-test-deps.sh)"
done
python3 -c 'import boto3' 2>/dev/null || die "python3 boto3 not found: pip install boto3 (scripts/install-test-deps.sh)"

mkdir -p "$dir"/{mon,mgr,osd,run,log,rgw}
# Ports for the monitor: free ones near the gateway's (the caller chose a free RGW port).
mon_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
conf=$dir/ceph.conf
cat >"$conf" <<EOF
[global]
fsid = $fsid
mon_host = v2:127.0.0.1:$mon_port
ms_bind_msgr1 = false
ms_bind_ipv6 = false
public_addr = 127.0.0.1
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
run_dir = $dir/run
admin_socket = $dir/run/\$name.asok
log_file = $dir/log/\$name.log
pid_file = $dir/run/\$name.pid
mon_data = $dir/mon/\$id
mgr_data = $dir/mgr/\$id
osd_data = $dir/osd/\$id
keyring = $dir/keyring
osd_pool_default_size = 1
osd_pool_default_min_size = 1
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_max_pg_per_osd = 1000
osd_crush_chooseleaf_type = 0
osd_objectstore = bluestore
bluestore_block_path = $dir/osd/block
bluestore_block_create = true
bluestore_block_size = 6442450944
bluestore_block_db_create = false
bluestore_block_wal_create = false
osd_memory_target = 1073741824
bluestore_cache_autotune = true
mgr_initial_modules =
[client.rgw.a]
rgw_frontends = beast endpoint=127.0.0.1:$rgw_port
rgw_data = $dir/rgw
rgw_dns_name = 127.0.0.1
EOF

pids=()
stop() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ "${CEPH_RGW_CLEANUP:-}" = 1 ]; then rm -rf "$dir"; fi
}
trap 'stop; exit 0' TERM INT HUP
trap stop EXIT

# One keyring for every daemon (cephx: Ceph's default authentication).
key() { ceph-authtool "$dir/keyring" "$@" >/dev/null; }
ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
key --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *'
key --gen-key -n mgr.x --cap mon 'allow profile mgr' --cap osd 'allow *' --cap mds 'allow *'
key --gen-key -n client.rgw.a --cap mon 'allow rw' --cap osd 'allow rwx' --cap mgr 'allow rw'
osd_key=$(ceph-authtool --gen-print-key)
monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$dir/monmap" >/dev/null
ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring"
ceph-mon -c "$conf" -i a -f 2>>"$dir/log/stderr" &
pids+=($!)
ceph -c "$conf" --connect-timeout 30 -s >/dev/null || die "the monitor did not answer (log: $dir/log/mon.a.log)"
ceph-mgr -c "$conf" -i x -f 2>>"$dir/log/stderr" &
pids+=($!)
osd_uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
echo "{\"cephx_secret\": \"$osd_key\"}" >"$dir/osd-secret.json"
osd_id=$(ceph -c "$conf" osd new "$osd_uuid" -i "$dir/osd-secret.json")
key -n "osd.$osd_id" --add-key "$osd_key" --cap mon 'allow profile osd' --cap mgr 'allow profile osd' --cap osd 'allow *'
mkdir -p "$dir/osd/$osd_id"
ceph-osd -c "$conf" -i "$osd_id" --mkfs --osd-uuid "$osd_uuid" >"$dir/log/osd-mkfs.log" 2>&1 ||
    die "ceph-osd --mkfs failed (log: $dir/log/osd-mkfs.log)"
ceph-osd -c "$conf" -i "$osd_id" -f 2>>"$dir/log/stderr" &
pids+=($!)
for _ in $(seq 120); do
    ceph -c "$conf" osd stat 2>/dev/null | grep -q '1 up' && break
    sleep 0.5
done
ceph -c "$conf" osd stat | grep -q '1 up' || die "the OSD did not come up (log: $dir/log/osd.$osd_id.log)"
radosgw -c "$conf" -n client.rgw.a -f 2>>"$dir/log/stderr" &
pids+=($!)
for _ in $(seq 240); do
    curl -s -o /dev/null "http://127.0.0.1:$rgw_port/" && break
    sleep 0.5
done
curl -s -o /dev/null "http://127.0.0.1:$rgw_port/" || die "radosgw did not answer on $rgw_port (log: $dir/log/client.rgw.a.log)"
if [ -n "${CEPH_RGW_NODELAY_PORT:-}" ]; then
    radosgw -c "$conf" -n client.rgw.a -f --admin-socket "$dir/run/rgw-nodelay.asok" \
        --rgw_frontends "beast endpoint=127.0.0.1:$CEPH_RGW_NODELAY_PORT tcp_nodelay=1" 2>>"$dir/log/stderr" &
    pids+=($!)
    for _ in $(seq 240); do
        curl -s -o /dev/null "http://127.0.0.1:$CEPH_RGW_NODELAY_PORT/" && break
        sleep 0.5
    done
    curl -s -o /dev/null "http://127.0.0.1:$CEPH_RGW_NODELAY_PORT/" ||
        die "the tcp_nodelay radosgw did not answer on $CEPH_RGW_NODELAY_PORT (log: $dir/log/stderr)"
fi
radosgw-admin -c "$conf" user create --uid airlock --display-name airlock \
    --access-key airlocktest --secret-key airlocktestsecret >/dev/null
if [ -n "$bucket" ]; then
    python3 - "$rgw_port" "$bucket" <<'EOF' || die "creating bucket $bucket failed"
import sys, boto3
s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[1]}", region_name="us-east-1",
                  aws_access_key_id="airlocktest", aws_secret_access_key="airlocktestsecret")
s3.create_bucket(Bucket=sys.argv[2])
EOF
fi
echo "ready http://127.0.0.1:$rgw_port"
wait -n "${pids[@]}" || true
die "a Ceph daemon exited (logs: $dir/log/)"
