#!/usr/bin/env bash
# airlock's main job end to end, on the embedded default (filesystem blobstore):
#
#   1. installs what it needs (apt-get: skopeo umoci debootstrap gnupg jq),
#   2. builds airlock (cargo build --release),
#   3. makes a signing key (build/release.sec.asc, build/release.pub.asc),
#   4. builds the real Debian bookworm stack image (scripts/make-stack-image.sh build/stack),
#   5. creates the signed bundle from mirror-config/bookworm.toml (build/bookworm.tar),
#   6. verifies it and imports it into ./airlock-data,
#   7. serves it on 127.0.0.1:${PORT:-5000}, pulls it back with skopeo and checks
#      the manifest digest is unchanged,
#   8. promotes it as the system stack `bookworm` (flattened rootfs), asks the
#      stacks API what a cell should run, downloads the rootfs.tar and checks
#      it against the published sha256, then prints the skopeo command.
#
# On a terminal it keeps serving until Ctrl-C; otherwise it stops the server at
# the end. Re-running reuses the key, the image and the bundle in build/.
#
#   scripts/quickstart.sh
set -euo pipefail

cd "$(dirname "$0")/.."
PORT=${PORT:-5000}
DATA=${AIRLOCK_DATA:-./airlock-data}
AIRLOCK=target/release/airlock
step() { printf '\n==> %s\n' "$*"; }
die() { echo "quickstart: error: $*" >&2; exit 1; }

step "installing tools (skopeo umoci debootstrap gnupg jq curl busybox-static)"
missing=()
for t in skopeo umoci debootstrap gpg jq curl; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || die "missing ${missing[*]}; run as root or apt-get install skopeo umoci debootstrap gnupg jq curl"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        skopeo umoci debootstrap gnupg jq curl busybox-static ca-certificates >/dev/null
fi

step "building airlock (cargo build --release)"
cargo build --release --quiet

mkdir -p build
if [ ! -f build/release.sec.asc ]; then
    step "generating a signing key"
    "$AIRLOCK" keys generate --uid "Release Engineering <release@example.org>" --out build/release
fi

if [ ! -f build/stack/index.json ]; then
    step "building the bookworm stack image (debootstrap + umoci; a few minutes)"
    rm -rf build/stack
    scripts/make-stack-image.sh build/stack latest
fi

step "creating the signed bundle build/bookworm.tar"
rm -f build/bookworm.tar
"$AIRLOCK" bundle create --config mirror-config/bookworm.toml --sign-key build/release.sec.asc -o build/bookworm.tar

step "verifying the bundle (signature and every digest)"
"$AIRLOCK" bundle verify --keyring build/release.pub.asc build/bookworm.tar

step "importing into $DATA"
"$AIRLOCK" import --data "$DATA" --keyring build/release.pub.asc build/bookworm.tar
"$AIRLOCK" history --data "$DATA"

step "serving on 127.0.0.1:$PORT"
"$AIRLOCK" serve --data "$DATA" --listen "127.0.0.1:$PORT" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    status=$( (exec 3<>"/dev/tcp/127.0.0.1/$PORT" && printf 'GET /v2/ HTTP/1.0\r\n\r\n' >&3 && head -1 <&3) 2>/dev/null || true)
    case "$status" in *200*) break ;; esac
    sleep 0.1
done

step "pulling it back with skopeo"
want=$(jq -r '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"]=="latest") | .digest' build/stack/index.json)
rm -rf build/pulled
skopeo copy --src-tls-verify=false "docker://127.0.0.1:$PORT/stacks/bookworm:latest" oci:build/pulled:latest
got=$(jq -r '.manifests[0].digest' build/pulled/index.json)
[ "$got" = "$want" ] || die "digest changed: source $want, pulled $got"
echo "manifest digest unchanged: $got"

step "promoting the system stack bookworm; a cell asks what to run and downloads it"
if ! "$AIRLOCK" stack show --data "$DATA" bookworm --json | jq -e '.active.image' >/dev/null; then
    "$AIRLOCK" stack promote --data "$DATA" bookworm --image stacks/bookworm:latest --reason quickstart
fi
answer=$(curl -sSf "http://127.0.0.1:$PORT/stacks/v1/bookworm?cell=quickstart-cell")
echo "$answer" | jq .
curl -sSf -o build/rootfs.tar "http://127.0.0.1:$PORT$(echo "$answer" | jq -r .rootfs_url)"
sum=$(sha256sum build/rootfs.tar | cut -d' ' -f1)
[ "$sum" = "$(echo "$answer" | jq -r .rootfs_sha256)" ] || die "rootfs.tar sha256 $sum differs from the published one"
echo "rootfs.tar sha256 matches the published one: $sum"

pull="skopeo copy --src-tls-verify=false docker://127.0.0.1:$PORT/stacks/bookworm:latest oci:build/bookworm-copy:latest"
if [ -t 1 ]; then
    printf '\nairlock is serving the bookworm stack until Ctrl-C. Pull it with:\n\n    %s\n\n' "$pull"
    wait "$server"
else
    printf '\nDone. Serve the store with\n\n    %s serve --data %s --listen 127.0.0.1:%s\n\nand pull the stack with\n\n    %s\n\n' \
        "$AIRLOCK" "$DATA" "$PORT" "$pull"
fi
