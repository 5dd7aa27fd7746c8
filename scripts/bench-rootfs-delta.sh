#!/usr/bin/env bash
# Benchmark rootfs deltas: what a cell downloads when a stack moves from v1
# to v2 with one package rebuilt, airlock's delta against the full tar,
# casync's own delta and the ideal, in one run.
#
#   scripts/bench-rootfs-delta.sh [LAYOUT[:REF]]
#
# What it does
#   1. Setup (not timed): builds airlock (a no-op when fresh); v1 is the
#      root file system of LAYOUT:REF (default: the bookworm stack image of
#      scripts/make-stack-image.sh in build/stack, built when missing; with
#      SYNTH=1 a generated tree instead); v2 is v1 with every regular file of
#      package PKG (default coreutils, from var/lib/dpkg/info/PKG.list)
#      "rebuilt" (two bytes of every 4 KiB changed, so no chunk of it
#      survives, as after a real rebuild; sizes and compressibility kept)
#      and its dpkg status and md5sums updated. Both become single-layer
#      images (umoci), bundled, imported, v1 promoted; airlock serve starts.
#   2. Measures, on loopback:
#        full     a cell without a rootfs syncs v2: the whole tar
#        patch    a cell holding v1 syncs v2: airlock's delta, the zstd
#                 patch v2's promotion made from v1 (bytes from the cell's
#                 own report, wall time, server CPU)
#        chunks   the same with the patch moved out of the store for the
#                 run: the casync-chunk delta (what a cell with the site's
#                 CA certificates added, or more than one promotion behind,
#                 gets)
#        casync   what `casync extract --seed=v1.tar` downloads from a casync
#                 store of v2 made by `casync make --compression=zstd` (its
#                 index plus the .cacnk files of the chunks v1 lacks), and the
#                 real casync client extracting from airlock (checked by sha256)
#        ideal    the changed files (and dpkg files) as one zstd -9 tar
#        zstd     v2.tar as `zstd -9 --patch-from=v1.tar` by the zstd CLI (a
#                 reference for airlock's patch)
#      and the chunking throughput (`airlock chunk make`, per CPU second; the
#      promotion's pipeline with zstd in parallel, from its log line).
#      Then the same patch, chunk and full syncs over a shaped link (LINK): the
#      cells run in a network namespace joined to the server by a veth
#      pair whose server side is limited by `tc ... tbf rate LINK`, as a
#      cell behind a site's uplink would be.
#   3. Prints the table and the ratios against the targets of issue 27:
#      delta <= 1.25x ideal, delta <= casync, delta time <= 0.5x full time,
#      server CPU per delta cell <= a full download's, chunking >= 500 MB/s
#      per core.
#
# Exit status: 0 when the benchmark ran, whether or not a target was met.
#
# Environment:
#   BENCH_DIR    where the temporary work dir goes (default /var/tmp); removed at exit
#   PKG          the package v2 rebuilds (default coreutils)
#   REPS         patch, chunk and full syncs on loopback, alternating; times and
#                CPU are their means (default 5)
#   SYNTH=1      a generated 150 MB tree instead of the bookworm image
#   EDIT_EVERY   rebuild by changing one byte in every EDIT_EVERY bytes of
#                each file (e.g. 64: as dense as the address changes of a
#                real recompile) instead of two bytes per 4 KiB
#   BENCH_SAVE   a directory to copy v1.tar, v2.tar, their .caibx and the changed files' list to
#   AIRLOCK_BIN  use this binary instead of building target/release/airlock
#   LINK         the shaped link's rate, as tc writes it (default 200mbit);
#                empty: no shaped-link runs (they need iproute2's ip and tc)
set -euo pipefail
BENCH_DIR=${BENCH_DIR:-/var/tmp}
. "$(dirname "$0")/bench/lib.sh"

case "${1:-}" in
    -h | --help)
        sed -n '2,59p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
esac
[ $# -le 1 ] || die "usage: $prog [LAYOUT[:REF]]"
PKG=${PKG:-coreutils}
REPS=${REPS:-5}
LINK=${LINK-200mbit}
need umoci umoci
need casync casync
need zstd zstd
need jq jq
need curl curl
need python3 python3
need /usr/bin/time time
[ -z "$LINK" ] || { need ip iproute2; need tc iproute2; }
[ "$(id -u)" -eq 0 ] || die "must run as root (umoci unpack keeps owners)"

if [ -n "${AIRLOCK_BIN:-}" ]; then
    AIRLOCK=$AIRLOCK_BIN
else
    note "cargo build --release"
    build_airlock
    AIRLOCK=$airlock
fi
W=$work

# --- v1 and v2 trees -------------------------------------------------------
if [ "${SYNTH:-}" = 1 ]; then
    note "v1: a generated tree (SYNTH=1)"
    PKG=pkg-07
    python3 - "$W/v1" <<'PY'
import os, random, sys
root = sys.argv[1]
rnd = random.Random(1)
words = [b"usr", b"lib", b"x86_64-linux-gnu", b"Package:", b"Version:", b"amd64", b"\n", b"bookworm"]
status = []
for p in range(60):
    d = os.path.join(root, "usr/lib/pkg-%02d" % p)
    os.makedirs(d, exist_ok=True)
    names = []
    for f in range(20):
        n = rnd.randrange(8 << 10, 240 << 10)
        data = rnd.randbytes(n) if f % 4 == 3 else b" ".join(rnd.choice(words) for _ in range(n // 6))[:n]
        name = "usr/lib/pkg-%02d/lib%d.so" % (p, f)
        open(os.path.join(root, name), "wb").write(data)
        names.append("/" + name)
    os.makedirs(os.path.join(root, "var/lib/dpkg/info"), exist_ok=True)
    open(os.path.join(root, "var/lib/dpkg/info/pkg-%02d.list" % p), "w").write("\n".join(names) + "\n")
    status.append("Package: pkg-%02d\nStatus: install ok installed\nVersion: 1\n" % p)
open(os.path.join(root, "var/lib/dpkg/status"), "w").write("\n".join(status))
PY
    SOURCE="a generated tree (60 packages of 20 files)"
else
    stack_layout "$@"
    note "v1: umoci unpack $LAYOUT:$REF"
    umoci unpack --image "$LAYOUT:$REF" "$W/unpacked" >/dev/null
    mv "$W/unpacked/rootfs" "$W/v1"
    SOURCE="$LAYOUT:$REF"
fi
list=$W/v1/var/lib/dpkg/info/$PKG.list
[ -f "$list" ] || list=$(ls "$W"/v1/var/lib/dpkg/info/"$PKG":*.list 2>/dev/null | head -1)
[ -f "$list" ] || die "no dpkg file list for $PKG in v1"
cp -a "$W/v1" "$W/v2"
note "v2: rebuilding the files of $PKG"
python3 - "$W/v2" "${list#"$W/v1/"}" "$PKG" >"$W/changed.list" <<'PY'
import hashlib, os, sys
root, listing, pkg = sys.argv[1], sys.argv[2], sys.argv[3]
listing = os.path.join(root, listing)
changed = []
for line in open(listing):
    rel = line.strip().lstrip("/")
    p = os.path.join(root, rel)
    if not rel or os.path.islink(p) or not os.path.isfile(p):
        continue
    b = bytearray(open(p, "rb").read())
    every = int(os.environ.get("EDIT_EVERY") or 0)
    if every:
        for j in range(every // 2, len(b), every):
            b[j] = (b[j] + 1) % 256
    else:
        for i in range(0, len(b), 4096):
            for j in (i + 100, i + 2000):
                if j < len(b):
                    b[j] = (b[j] + 1) % 256
    st = os.stat(p)
    open(p, "wb").write(b)
    os.utime(p, (st.st_atime, st.st_mtime + 86400))
    changed.append(rel)
status = os.path.join(root, "var/lib/dpkg/status")
text = open(status).read().split("\n\n")
for i, s in enumerate(text):
    if s.startswith("Package: %s\n" % pkg):
        text[i] = "\n".join(l + "+rebuild1" if l.startswith("Version: ") else l for l in s.split("\n"))
open(status, "w").write("\n\n".join(text))
changed.append("var/lib/dpkg/status")
md5 = os.path.join(os.path.dirname(listing), os.path.basename(listing)[:-5] + ".md5sums")
if os.path.exists(md5):
    with open(md5, "w") as f:
        for rel in changed[:-1]:
            f.write("%s  %s\n" % (hashlib.md5(open(os.path.join(root, rel), "rb").read()).hexdigest(), rel))
    changed.append(os.path.relpath(md5, root))
print("\n".join(changed))
PY
changed_files=$(wc -l <"$W/changed.list")
changed_bytes=$(cd "$W/v2" && tr '\n' '\0' <"$W/changed.list" | du -cb --files0-from=- | tail -1 | cut -f1)

# --- images, bundle, import, promote v1, serve -----------------------------
note "setup: images, bundle, import, promote v1"
umoci init --layout "$W/layout"
for v in v1 v2; do
    umoci new --image "$W/layout:$v"
    umoci unpack --image "$W/layout:$v" "$W/b-$v" >/dev/null
    cp -a "$W/$v/." "$W/b-$v/rootfs/"
    umoci repack --image "$W/layout:$v" "$W/b-$v"
    rm -rf "$W/b-$v"
done
"$AIRLOCK" keys generate --uid "Bench <bench@example.org>" --out "$W/key" >/dev/null
cat >"$W/mirror.toml" <<EOF
[[image]]
source = "oci:$W/layout:v1"
repository = "stacks/bench"
tags = ["v1"]

[[image]]
source = "oci:$W/layout:v2"
repository = "stacks/bench"
tags = ["v2"]
EOF
"$AIRLOCK" bundle create --config "$W/mirror.toml" --sign-key "$W/key.sec.asc" -o "$W/bundle.tar" >/dev/null
"$AIRLOCK" import --data "$W/data" --keyring "$W/key.pub.asc" "$W/bundle.tar" >/dev/null
"$AIRLOCK" --log info --log-format json stack promote --data "$W/data" bench --image stacks/bench:v1 >/dev/null 2>"$W/promote1.log"
port=$(free_port)
listen=(--listen "127.0.0.1:$port")
if [ -n "$LINK" ]; then
    # The shaped link: namespace $ns holds the cells' end (10.213.0.2), the
    # server listens on its end (10.213.0.1), limited to $LINK toward them.
    ns=airlock-bench-$$
    bench_cleanup_extra() { ip link del "veth-ab$$" 2>/dev/null; ip netns del "$ns" 2>/dev/null; }
    ip netns add "$ns"
    ip link add "veth-ab$$" type veth peer name "veth-ac$$"
    ip link set "veth-ac$$" netns "$ns"
    ip addr add 10.213.0.1/30 dev "veth-ab$$"
    ip link set "veth-ab$$" up
    ip netns exec "$ns" ip addr add 10.213.0.2/30 dev "veth-ac$$"
    ip netns exec "$ns" ip link set "veth-ac$$" up
    tc qdisc add dev "veth-ab$$" root tbf rate "$LINK" burst 256kb latency 50ms
    listen+=(--listen "10.213.0.1:$port" --plain-http)
fi
"$AIRLOCK" serve --data "$W/data" "${listen[@]}" --log warn >/dev/null 2>"$W/serve.log" &
spid=$!
pids+=("$spid")
wait_up airlock "$spid" "http://127.0.0.1:$port/v2/" "$W/serve.log"
url=http://127.0.0.1:$port
tck=$(getconf CLK_TCK)
server_cpu() { awk -v t="$tck" '{ printf "%.3f\n", ($14 + $15) / t }' "/proc/$spid/stat"; }

# sync DIR CELL [shaped]: one `cell sync --once` (over the shaped link when
# a third argument is given); prints "wall_seconds server_cpu_seconds cell_cpu_seconds"
sync_cell() {
    local c0 t0 t1 c1 via=() u=$url
    [ -z "${3:-}" ] || { via=(ip netns exec "$ns"); u=http://10.213.0.1:$port; }
    c0=$(server_cpu)
    t0=$(date +%s.%N)
    "${via[@]}" /usr/bin/time -f '%U %S' -o "$W/cell.time" "$AIRLOCK" cell sync --once --url "$u" --stack bench \
        --install-dir "$1" --cell-id "$2" --log info --log-format json 2>>"$W/cells.log" >/dev/null ||
        die "cell sync $2 failed: $(tail -3 "$W/cells.log")"
    t1=$(date +%s.%N)
    c1=$(server_cpu)
    awk -v a="$t0" -v b="$t1" -v c="$c0" -v d="$c1" -v u="$(cat "$W/cell.time")" \
        'BEGIN { split(u, x, " "); printf "%.2f %.2f %.2f\n", b - a, d - c, x[1] + x[2] }'
}

note "cell A installs v1 (full)"
sync_cell "$W/cellA" cell-a >/dev/null
curl -sf -o "$W/v1.tar" "$url/stacks/v1/bench/rootfs.tar"
"$AIRLOCK" --log info --log-format json stack promote --data "$W/data" bench --image stacks/bench:v2 >/dev/null 2>"$W/promote2.log"
v2_sha=$(curl -sf "$url/stacks/v1/bench?cell=cell-a" | jq -r .rootfs_digest)
size=$(curl -sf "$url/stacks/v1/bench?cell=cell-a" | jq -r .rootfs_size)
curl -sf -o "$W/v2.tar" "$url/stacks/v1/bench/rootfs.tar"
patch_digest=$(curl -sf "$url/stacks/v1/bench?cell=cell-a" | jq -r .rootfs_patch.digest)
[ "$patch_digest" != null ] || die "v2's promotion made no patch: $(cat "$W/promote2.log")"
patch_hex=${patch_digest#sha256:}
patch_file=$W/data/blobs/sha256/${patch_hex:0:2}/$patch_hex
[ -f "$patch_file" ] || die "no patch blob at $patch_file"
# chunks_only CMD...: runs CMD with the patch moved out of the store (the
# server answers 404 for it: the cell falls back to chunks).
chunks_only() {
    mv "$patch_file" "$W/patch.aside"
    "$@"
    local rc=$?
    mv "$W/patch.aside" "$patch_file"
    return $rc
}
served_patch=$(stat -c %s "$patch_file")
zstd -q -d --long=31 --patch-from="$W/v1.tar" "$patch_file" -o "$W/zstd-v2.tar"
[ "$(sha256sum "$W/zstd-v2.tar" | cut -d' ' -f1)" = "${v2_sha#sha256:}" ] || die "zstd -d --patch-from of the served patch differs"

for c in C E; do [ -z "$LINK" ] || cp -a "$W/cellA" "$W/cell$c"; done
for i in $(seq 1 "$REPS"); do cp -a "$W/cellA" "$W/cellP$i"; cp -a "$W/cellA" "$W/cellK$i"; done
note "$REPS cells holding v1 move to v2 by the patch, $REPS by chunks, alternating with $REPS new cells installing v2 (full)"
: >"$W/runs"
check_cell() { # DIR METHOD WHAT: the cell installed v2 with METHOD, and its log says WHAT
    [ "$(sha256sum "$1/bench/rootfs.tar" | cut -d' ' -f1)" = "${v2_sha#sha256:}" ] || die "$1: rootfs differs"
    [ "$(jq -r .current.transfer.method "$1/bench/installed.json")" = "$2" ] || die "$1 did not use a $2 download"
    grep -q "$3" "$W/cells.log" || die "no \"$3\" in the cells' log"
}
for i in $(seq 1 "$REPS"); do
    echo "patch $(sync_cell "$W/cellP$i" "cell-p$i")" >>"$W/runs"
    check_cell "$W/cellP$i" delta "rootfs patched"
    echo "chunks $(chunks_only sync_cell "$W/cellK$i" "cell-k$i")" >>"$W/runs"
    check_cell "$W/cellK$i" delta "rootfs assembled from a delta"
    echo "full $(sync_cell "$W/cellB$i" "cell-b$i")" >>"$W/runs"
    check_cell "$W/cellB$i" full "stack synced"
done
# mean KIND: "wall_seconds server_cpu_seconds cell_cpu_seconds" over the runs of KIND
mean() { awk -v k="$1" '$1 == k { n++; w += $2; s += $3; c += $4 } END { printf "%.2f %.3f %.2f\n", w / n, s / n, c / n }' "$W/runs"; }
read -r delta_s delta_cpu delta_cell_cpu < <(mean patch)
read -r chunks_s chunks_cpu chunks_cell_cpu < <(mean chunks)
read -r full_s full_cpu full_cell_cpu < <(mean full)
delta_bytes=$(jq -r .current.transfer.bytes "$W/cellP1/bench/installed.json")
chunks_bytes=$(jq -r .current.transfer.bytes "$W/cellK1/bench/installed.json")
full_bytes=$(jq -r .current.transfer.bytes "$W/cellB1/bench/installed.json")

shaped="(LINK empty: not run)"
shaped_chunks="(LINK empty: not run)"
if [ -n "$LINK" ]; then
    note "over a $LINK link: cell C moves to v2 (patch), cell E (chunks); cell D installs v2 (full)"
    read -r sdelta_s _ _ < <(sync_cell "$W/cellC" cell-c shaped)
    read -r schunks_s _ _ < <(chunks_only sync_cell "$W/cellE" cell-e shaped)
    read -r sfull_s _ _ < <(sync_cell "$W/cellD" cell-d shaped)
    check_cell "$W/cellC" delta "rootfs patched"
    check_cell "$W/cellE" delta "rootfs assembled from a delta"
    check_cell "$W/cellD" full "stack synced"
    shaped="${sdelta_s}s / ${sfull_s}s = $(awk -v a="$sdelta_s" -v b="$sfull_s" 'BEGIN { printf "%.2f", a / b }')x"
    shaped_chunks="${schunks_s}s / ${sfull_s}s = $(awk -v a="$schunks_s" -v b="$sfull_s" 'BEGIN { printf "%.2f", a / b }')x"
fi

note "casync: its own store and client"
casync make --digest=sha256 --compression=zstd --store="$W/castr" "$W/v1.caibx" "$W/v1.tar" >/dev/null
casync make --digest=sha256 --compression=zstd --store="$W/castr" "$W/v2.caibx" "$W/v2.tar" >/dev/null
casync_bytes=$(python3 - "$W" <<'PY'
import os, struct, sys
w = sys.argv[1]
def ids(p):
    b = open(p, "rb").read()
    n = (len(b) - 48 - 16 - 40) // 40
    return [b[64 + 40 * i + 8:64 + 40 * i + 40].hex() for i in range(n)]
have = set(ids(os.path.join(w, "v1.caibx")))
need = set(ids(os.path.join(w, "v2.caibx"))) - have
total = os.path.getsize(os.path.join(w, "v2.caibx"))
for i in need:
    total += os.path.getsize(os.path.join(w, "castr", i[:4], i + ".cacnk"))
print(total)
PY
)
t0=$(date +%s.%N)
casync extract --store="$url/stacks/v1/chunks/" --seed="$W/v1.tar" "$url/stacks/v1/bench/rootfs.caibx" "$W/casync-out.tar" 2>/dev/null
casync_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
[ "$(sha256sum "$W/casync-out.tar" | cut -d' ' -f1)" = "${v2_sha#sha256:}" ] || die "casync's extract differs"

note "ideal: the changed files, zstd -9"
ideal_bytes=$(cd "$W/v2" && tar --null -T <(tr '\n' '\0' <"$W/changed.list") -cf - | zstd -9 -q -c | wc -c)

note "zstd --patch-from: v2 compressed against v1 by the zstd CLI (a reference)"
patch_bytes=$(zstd -q -9 --patch-from="$W/v1.tar" -c "$W/v2.tar" | wc -c)

note "chunking throughput"
chunk_line=$("$AIRLOCK" chunk make "$W/v2.tar" "$W/check.caibx")
cmp -s "$W/check.caibx" "$W/v2.caibx" || die "airlock chunk make and casync make disagree on v2.tar"
cut_mbps=$(sed -E 's/.*cut at ([0-9]+) MB\/s.*/\1/' <<<"$chunk_line")
hash_mbps=$(sed -E 's/.*hashed \(SHA-256\) at ([0-9]+) MB\/s.*/\1/' <<<"$chunk_line")
promote_mbps=$(jq -r 'select(.fields.message == "rootfs chunked") | .fields.mb_per_s' "$W/promote2.log" | head -1)
phases=$(jq -r 'select(.fields.message == "rootfs assembled from a delta") | "seeds \(.fields.seed_s)s, fetch \(.fields.fetch_s)s, assembly \(.fields.assemble_s)s"' "$W/cells.log" | head -1)
patch_phases=$(jq -r 'select(.fields.message == "rootfs patched") | "fetch \(.fields.fetch_s)s, apply and sha256 \(.fields.apply_s)s"' "$W/cells.log" | head -1)
patch_made=$(jq -r 'select(.fields.message == "rootfs patch made") | "\(.fields.seconds)s"' "$W/promote2.log" | head -1)
casync_cpu=$( { /usr/bin/time -f '%U %S' casync make --digest=sha256 --compression=zstd --store="$W/castr2" "$W/x.caibx" "$W/v2.tar" >/dev/null; } 2>&1 | tail -1)
casync_mbps=$(echo "$casync_cpu" | awk -v s="$size" '{ printf "%.0f", s / 1e6 / ($1 + $2) }')

if [ -n "${BENCH_SAVE:-}" ]; then
    mkdir -p "$BENCH_SAVE"
    cp "$W/v1.tar" "$W/v2.tar" "$W/v1.caibx" "$W/v2.caibx" "$W/changed.list" "$BENCH_SAVE/"
fi
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
mb() { awk -v a="$1" 'BEGIN { printf "%.2f", a / 1e6 }'; }
load=$(cut -d' ' -f1-3 /proc/loadavg)
cat <<EOF

rootfs delta benchmark: v1 = $SOURCE, v2 = v1 with $PKG rebuilt${EDIT_EVERY:+ (one byte in every $EDIT_EVERY changed)}
  ($changed_files files, $(mb "$changed_bytes") MB changed; rootfs $(mb "$size") MB; load average $load, $(nproc) cores)

| what a cell downloads             | bytes        | MB      | vs ideal |
| --------------------------------- | ------------ | ------- | -------- |
| full rootfs.tar                   | $(printf '%12s' "$full_bytes") | $(printf '%7s' "$(mb "$full_bytes")") | $(ratio "$full_bytes" "$ideal_bytes")x |
| casync extract --seed (own store) | $(printf '%12s' "$casync_bytes") | $(printf '%7s' "$(mb "$casync_bytes")") | $(ratio "$casync_bytes" "$ideal_bytes")x |
| airlock cell sync, patch (delta)  | $(printf '%12s' "$delta_bytes") | $(printf '%7s' "$(mb "$delta_bytes")") | $(ratio "$delta_bytes" "$ideal_bytes")x |
| airlock cell sync, chunks (delta) | $(printf '%12s' "$chunks_bytes") | $(printf '%7s' "$(mb "$chunks_bytes")") | $(ratio "$chunks_bytes" "$ideal_bytes")x |
| zstd -9 --patch-from=v1 (CLI)     | $(printf '%12s' "$patch_bytes") | $(printf '%7s' "$(mb "$patch_bytes")") | $(ratio "$patch_bytes" "$ideal_bytes")x |
| ideal (changed files, zstd -9)    | $(printf '%12s' "$ideal_bytes") | $(printf '%7s' "$(mb "$ideal_bytes")") | 1.00x |

| measure                                   | value              | target   |
| ----------------------------------------- | ------------------ | -------- |
| delta (patch) / ideal                     | $(ratio "$delta_bytes" "$ideal_bytes")x              | <= 1.25x |
| delta (patch) / casync                    | $(ratio "$delta_bytes" "$casync_bytes")x              | <= 1x    |
| delta (chunks) / casync                   | $(ratio "$chunks_bytes" "$casync_bytes")x              | <= 1x    |
| patch sync time / full sync time (mean of $REPS) | ${delta_s}s / ${full_s}s = $(ratio "$delta_s" "$full_s")x | <= 0.5x  |
| chunk sync time / full sync time (mean of $REPS) | ${chunks_s}s / ${full_s}s = $(ratio "$chunks_s" "$full_s")x |          |
| patch, over a ${LINK:-shaped} link          | $shaped | <= 0.5x  |
| chunks, over a ${LINK:-shaped} link         | $shaped_chunks |          |
|   patch phases                            | $patch_phases |          |
|   chunk delta phases                      | $phases |          |
| server CPU, patch cell / full cell        | ${delta_cpu}s / ${full_cpu}s = $(ratio "$delta_cpu" "$full_cpu")x | <= 1x    |
| server CPU, chunk cell / full cell        | ${chunks_cpu}s / ${full_cpu}s = $(ratio "$chunks_cpu" "$full_cpu")x |          |
| cell CPU (user+sys), patch / chunks / full | ${delta_cell_cpu}s / ${chunks_cell_cpu}s / ${full_cell_cpu}s |          |
| making the patch at promotion (level 9)   | $patch_made (served: $served_patch bytes) |          |
| chunker per CPU s (cut / cut + SHA-256)   | $cut_mbps / $hash_mbps MB/s    | >= 500   |
| promotion pipeline (cut, hash, zstd -9)   | $promote_mbps MB/s wall        |          |
| casync make (cut, hash, zstd), per core   | $casync_mbps MB/s CPU          |          |
| casync extract --seed from airlock        | ${casync_s}s, sha256 ok |          |

$("$AIRLOCK" stack status bench --data "$W/data")
$(jq -c 'select(.fields.message == "rootfs patched" or .fields.message == "rootfs assembled from a delta" or .fields.message == "stack synced") | .fields' "$W/cells.log" | tail -3)
EOF
