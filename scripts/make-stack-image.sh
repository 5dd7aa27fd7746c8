#!/usr/bin/env bash
# Build a real Cloud-Foundry-style stack image as an OCI image layout.
#
#   scripts/make-stack-image.sh OUTDIR [TAG]
#
# The image has exactly two layers:
#   1. a Debian bookworm --variant=minbase root file system made by debootstrap
#   2. a "slimming" layer that deletes /etc/motd (a file) and /usr/share/man
#      (a directory) -- so the layer carries whiteout (.wh.) entries -- and adds
#      /etc/airlock-stack-release.
#
# debootstrap uses the same Debian mirror apt uses on this machine (read from
# /etc/apt/sources.list and /etc/apt/sources.list.d/); set DEBIAN_MIRROR to
# override. Needs root (debootstrap), debootstrap, umoci, jq, tar, sha256sum.
# Takes a few minutes, mostly debootstrap.
set -euo pipefail

prog=$(basename "$0")
SUITE=bookworm
DELETE_FILE=etc/motd
DELETE_DIR=usr/share/man
RELEASE_FILE=etc/airlock-stack-release

usage() {
    cat >&2 <<EOF
usage: $prog OUTDIR [TAG]

Build a two-layer Debian $SUITE (minbase) stack image with debootstrap + umoci
and write it as an OCI image layout to OUTDIR, tagged TAG (default: latest).
OUTDIR must not exist or be empty. Must run as root.

environment:
  DEBIAN_MIRROR  Debian mirror for debootstrap (default: the one apt uses)
EOF
}

die() {
    echo "$prog: error: $*" >&2
    exit 1
}

case "${1:-}" in
    -h | --help)
        usage
        exit 0
        ;;
esac
if [ $# -lt 1 ] || [ $# -gt 2 ] || [ -z "$1" ]; then
    usage
    exit 2
fi
OUTDIR=$1
TAG=${2:-latest}

# OCI ref names: see the org.opencontainers.image.ref.name grammar; keep it simple.
[[ $TAG =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ ]] || die "invalid TAG '$TAG' (use letters, digits, '.', '_', '-')"

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap needs it)"
for tool in debootstrap umoci jq tar sha256sum findmnt; do
    command -v "$tool" >/dev/null 2>&1 || die "required tool '$tool' not found in PATH"
done

if [ -e "$OUTDIR" ]; then
    [ -d "$OUTDIR" ] || die "OUTDIR '$OUTDIR' exists and is not a directory"
    [ -z "$(ls -A "$OUTDIR")" ] || die "OUTDIR '$OUTDIR' exists and is not empty; remove it or pick another"
fi

# Find the Debian mirror apt uses (first non-security 'debian' URI), both in
# one-line (.list) and deb822 (.sources) format.
apt_debian_mirror() {
    local f
    {
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
            [ -f "$f" ] || continue
            awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/ && $i !~ /=/) { print $i; break } }' "$f"
        done
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -f "$f" ] || continue
            # Print the URIs of stanzas that are deb, enabled and not for a security/updates-only suite.
            awk '
                function flush() {
                    if (uris != "" && types ~ /(^| )deb( |$)/ && tolower(enabled) != "no" && suites !~ /-security/)
                        print uris
                    uris = ""; types = ""; suites = ""; enabled = ""
                }
                /^[ \t]*#/ { next }
                /^[ \t]*$/ { flush(); next }
                /^URIs:/    { sub(/^URIs:[ \t]*/, ""); uris = $0 }
                /^Types:/   { sub(/^Types:[ \t]*/, ""); types = $0 }
                /^Suites:/  { sub(/^Suites:[ \t]*/, ""); suites = $0 }
                /^Enabled:/ { sub(/^Enabled:[ \t]*/, ""); enabled = $0 }
                END { flush() }
            ' "$f" | tr -s ' \t' '\n'
        done
    } | grep -E '^https?://' | grep -v -- '-security' | grep -E '/debian/?$' | head -n 1 || true
}

MIRROR=${DEBIAN_MIRROR:-$(apt_debian_mirror)}
[ -n "$MIRROR" ] || die "could not find a Debian mirror in /etc/apt/sources.list*; set DEBIAN_MIRROR"

case "$(uname -m)" in
    x86_64) ARCH=amd64 ;;
    aarch64 | arm64) ARCH=arm64 ;;
    *) die "unsupported machine architecture '$(uname -m)'" ;;
esac

WORK=$(mktemp -d "${TMPDIR:-/tmp}/make-stack-image.XXXXXX")
own_outdir=0
outdir_existed=0
success=0

cleanup() {
    local rc=$? m
    # debootstrap mounts proc/sys inside the target; never rm -rf through a live mount.
    if [ -d "$WORK" ]; then
        findmnt -rn -o TARGET | awk -v w="$WORK" 'index($0, w "/") == 1' | sort -r | while read -r m; do
            umount -l "$m" 2>/dev/null || true
        done
        rm -rf --one-file-system "$WORK"
    fi
    # OUTDIR was absent or empty when we started: on failure, leave it that way.
    if [ "$success" -ne 1 ] && [ "$own_outdir" -eq 1 ]; then
        rm -rf --one-file-system "$OUTDIR"
        [ "$outdir_existed" -eq 0 ] || mkdir -p "$OUTDIR"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { echo "==> $*" >&2; }

start=$(date +%s)

# umoci init refuses an existing (even empty) directory.
if [ -d "$OUTDIR" ]; then
    outdir_existed=1
    rmdir "$OUTDIR" || die "cannot prepare OUTDIR '$OUTDIR'"
fi
mkdir -p "$(dirname "$OUTDIR")" || die "cannot create parent directory of '$OUTDIR'"
own_outdir=1

step "creating OCI layout at $OUTDIR (tag $TAG)"
umoci init --layout "$OUTDIR" || die "umoci init failed for '$OUTDIR'"
umoci new --image "$OUTDIR:$TAG" || die "umoci new failed"

BUNDLE=$WORK/bundle
umoci unpack --image "$OUTDIR:$TAG" "$BUNDLE" || die "umoci unpack of the empty image failed"
ROOTFS=$BUNDLE/rootfs

step "debootstrap --variant=minbase $SUITE ($ARCH) from $MIRROR (takes a few minutes)"
if ! debootstrap --variant=minbase --arch="$ARCH" "$SUITE" "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1; then
    tail -n 20 "$WORK/debootstrap.log" >&2 || true
    if [ -f "$ROOTFS/debootstrap/debootstrap.log" ]; then
        tail -n 20 "$ROOTFS/debootstrap/debootstrap.log" >&2 || true
    fi
    die "debootstrap of $SUITE from $MIRROR failed (log above)"
fi
# Trim what a container image does not need (caches, apt lists); these are
# not part of any layer.
rm -rf "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/*.log "$ROOTFS"/debootstrap
[ -f "$ROOTFS/$DELETE_FILE" ] || die "debootstrapped rootfs lacks /$DELETE_FILE, which layer 2 is meant to delete"
[ -d "$ROOTFS/$DELETE_DIR" ] || die "debootstrapped rootfs lacks /$DELETE_DIR, which layer 2 is meant to delete"

step "layer 1: packing the whole rootfs"
umoci repack --refresh-bundle \
    --history.author airlock \
    --history.created_by "debootstrap --variant=minbase $SUITE $MIRROR" \
    --history.comment "Debian $SUITE minbase root file system" \
    --image "$OUTDIR:$TAG" "$BUNDLE" || die "umoci repack of layer 1 failed"

step "layer 2: deleting /$DELETE_FILE and /$DELETE_DIR, adding /$RELEASE_FILE"
rm -f "$ROOTFS/$DELETE_FILE"
rm -rf "${ROOTFS:?}/${DELETE_DIR:?}"
debian_version=$(cat "$ROOTFS/etc/debian_version")
cat >"$ROOTFS/$RELEASE_FILE" <<EOF
NAME=airlock-stack
STACK=airlock-$SUITE
DEBIAN_SUITE=$SUITE
DEBIAN_VERSION=$debian_version
ARCHITECTURE=$ARCH
EOF
chmod 0644 "$ROOTFS/$RELEASE_FILE"
umoci repack \
    --history.author airlock \
    --history.created_by "airlock make-stack-image.sh: rm /$DELETE_FILE /$DELETE_DIR; add /$RELEASE_FILE" \
    --history.comment "slim stack and add release file" \
    --image "$OUTDIR:$TAG" "$BUNDLE" || die "umoci repack of layer 2 failed"

step "setting image config"
umoci config --image "$OUTDIR:$TAG" \
    --author airlock \
    --os linux \
    --architecture "$ARCH" \
    --config.cmd /bin/bash \
    --config.workingdir / \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env LANG=C.UTF-8 \
    --config.label "org.opencontainers.image.title=airlock-stack-$SUITE" \
    --config.label "org.opencontainers.image.description=Debian $SUITE minbase stack image" \
    --config.label "org.opencontainers.image.version=$debian_version" \
    --history.author airlock \
    --history.created_by "umoci config" || die "umoci config failed"
umoci gc --layout "$OUTDIR" || die "umoci gc failed"

step "verifying"
manifest_digest=$(jq -er --arg tag "$TAG" \
    '[.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $tag)] | if length == 1 then .[0].digest else error("tag not found exactly once") end' \
    "$OUTDIR/index.json") || die "index.json does not reference tag '$TAG' exactly once"
blob() { printf '%s/blobs/%s\n' "$OUTDIR" "${1/://}"; }
manifest=$(blob "$manifest_digest")
[ "sha256:$(sha256sum "$manifest" | cut -d' ' -f1)" = "$manifest_digest" ] || die "manifest blob does not match its digest $manifest_digest"
nlayers=$(jq -er '.layers | length' "$manifest") || die "cannot read layers from manifest $manifest_digest"
[ "$nlayers" -eq 2 ] || die "expected exactly 2 layers, manifest has $nlayers"
layer1=$(jq -er '.layers[0].digest' "$manifest")
layer2=$(jq -er '.layers[1].digest' "$manifest")
for l in "$layer1" "$layer2"; do
    [ "sha256:$(sha256sum "$(blob "$l")" | cut -d' ' -f1)" = "$l" ] || die "layer blob $l does not match its digest"
done
# List to files first: 'tar | grep -q' can fail under pipefail (SIGPIPE).
tar -tzf "$(blob "$layer1")" >"$WORK/layer1.list" || die "cannot list layer 1 ($layer1) with tar -tzf"
tar -tzf "$(blob "$layer2")" >"$WORK/layer2.list" || die "cannot list layer 2 ($layer2) with tar -tzf"
grep -qE '^(\./)?(usr/)?bin/bash$' "$WORK/layer1.list" || die "layer 1 does not contain bin/bash; rootfs looks incomplete"
whiteouts=$(grep -E '(^|/)\.wh\.' "$WORK/layer2.list" || true)
[ -n "$whiteouts" ] || die "layer 2 ($layer2) contains no .wh. whiteout entries"
grep -qE "^(\./)?$RELEASE_FILE\$" "$WORK/layer2.list" || die "layer 2 does not contain /$RELEASE_FILE"
if command -v skopeo >/dev/null 2>&1; then
    skopeo inspect --raw "oci:$OUTDIR:$TAG" >/dev/null || die "skopeo cannot read oci:$OUTDIR:$TAG"
fi

success=1
end=$(date +%s)
echo "layer 2 whiteouts:" >&2
printf '%s\n' "$whiteouts" | sed 's/^/  /' >&2
echo "built oci:$OUTDIR:$TAG in $((end - start))s (layers: $layer1 $layer2)" >&2
echo "manifest digest: $manifest_digest"
