#!/usr/bin/env bash
# Benchmark `airlock bundle create` from a registry against `skopeo copy --all`
# of the same images, in one run, on loopback only (127.0.0.1).
#
#   scripts/bench-create.sh
#
# Setup (not timed): builds airlock, generates an OCI layout with
# scripts/bench/gen-serve-layout.py (images small: 4 KiB layer, big: 64 MiB
# layer, multi: five layers of 2-6 MiB; incompressible), starts Debian's
# docker-registry on a free port and loads it with skopeo copy
# --preserve-digests.
# Measures (wall time, each run with empty destinations):
#   skopeo   skopeo copy --all --src-tls-verify=false docker://.../bench/NAME:v1 oci:DIR:NAME
#            for the three images in turn (what a release engineer runs today
#            before `bundle create` from oci:)
#   cold     airlock bundle create from docker:// with an empty --cache: pull,
#            verify and write the signed bundle; peak RSS by /usr/bin/time -v
#   warm     the same again with the cache filled (a nightly re-run)
# Prints the times and the ratio skopeo / cold (target >= 1x). A benchmark,
# not a test: exits 0 when the run completed, whatever the figures.
# Needs: apt-get install skopeo docker-registry time python3
set -euo pipefail

. "$(dirname "$0")/bench/lib.sh"
for tool in skopeo docker-registry python3 /usr/bin/time curl; do
    need "$tool" "skopeo docker-registry time python3 curl"
done

build_airlock
python3 "$repo/scripts/bench/gen-serve-layout.py" "$work/layout" >"$work/images.txt" || die "layout generation failed"
port=$(free_port)
addr=127.0.0.1:$port
start_registry "$addr" "$work/registry-data"
images=(small big multi)
for n in "${images[@]}"; do
    skopeo copy --quiet --preserve-digests --dest-tls-verify=false \
        "oci:$work/layout:$n" "docker://$addr/bench/$n:v1" || die "loading $n failed"
done

"$airlock" keys generate --uid "Bench <bench@example.org>" --out "$work/key" >/dev/null
{
    printf '[[registry]]\nhost = "%s"\ntls_verify = false\n\n' "$addr"
    for n in "${images[@]}"; do
        printf '[[image]]\nsource = "docker://%s/bench/%s:v1"\nrepository = "bench/%s"\ntags = ["v1"]\nreferrers = false\n\n' "$addr" "$n" "$n"
    done
} >"$work/mirror.toml"

now() { date +%s.%N; }
sync
t0=$(now)
for n in "${images[@]}"; do
    skopeo copy --quiet --all --src-tls-verify=false "docker://$addr/bench/$n:v1" "oci:$work/skopeo-out:$n"
done
t1=$(now)
/usr/bin/time -v -o "$work/time-cold.txt" "$airlock" bundle create --config "$work/mirror.toml" \
    --sign-key "$work/key.sec.asc" -o "$work/cold.tar" --cache "$work/cache" --json >"$work/cold.json"
t2=$(now)
"$airlock" bundle create --config "$work/mirror.toml" --sign-key "$work/key.sec.asc" \
    -o "$work/warm.tar" --cache "$work/cache" --json >"$work/warm.json"
t3=$(now)

bytes=$(du -sb "$work/skopeo-out/blobs" | cut -f1)
rss=$(awk -F: '/Maximum resident/ {gsub(/ /, "", $2); print $2}' "$work/time-cold.txt")
python3 - "$t0" "$t1" "$t2" "$t3" "$bytes" "$rss" "$work/cold.json" "$work/warm.json" <<'PY'
import json, sys
t0, t1, t2, t3 = map(float, sys.argv[1:5])
size, rss = int(sys.argv[5]), int(sys.argv[6])
cold, warm = (json.load(open(p)) for p in sys.argv[7:9])
skopeo, c, w = t1 - t0, t2 - t1, t3 - t2
mb = size / 1e6
print(f"content: {mb:.1f} MB in 3 images (loopback docker-registry)")
print(f"skopeo copy --all (3 images)   {skopeo:7.2f} s  {mb / skopeo:7.1f} MB/s")
print(f"bundle create, cold cache      {c:7.2f} s  {mb / c:7.1f} MB/s  peak RSS {rss / 1024:.1f} MiB"
      f"  ({cold['registry']['requests']} requests, {cold['registry']['bytes_downloaded'] / 1e6:.1f} MB down)")
print(f"bundle create, warm cache      {w:7.2f} s  ({warm['registry']['requests']} requests,"
      f" {warm['registry']['bytes_downloaded']} bytes down, {warm['registry']['cache_hits']} cache hits)")
print(f"ratio skopeo / cold: {skopeo / c:.2f}x (target >= 1x)")
PY
