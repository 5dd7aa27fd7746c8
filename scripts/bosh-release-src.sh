#!/usr/bin/env bash
# Fills bosh-release/src/airlock/ with what packages/airlock compiles from:
# the crate (Cargo.toml, Cargo.lock, src/) and every dependency vendored by
# `cargo vendor` (so BOSH's offline compilation VMs build with
# `cargo build --release --offline --locked`), plus the .cargo/config.toml
# that points cargo at the vendored crates. Run it before
# `bosh create-release`; its output is never committed (.gitignore).
#
#   scripts/bosh-release-src.sh            # refresh bosh-release/src/airlock
#   scripts/bosh-release-src.sh --check    # also `cargo metadata --offline --locked` on the result
set -euo pipefail

prog=$(basename "$0")
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/bosh-release/src/airlock"
die() {
    echo "$prog: error: $*" >&2
    exit 1
}
command -v cargo >/dev/null 2>&1 || die "cargo not found"

tmp="$dest.tmp"
rm -rf "$tmp"
mkdir -p "$tmp/.cargo"
cp "$root/Cargo.toml" "$root/Cargo.lock" "$tmp/"
cp -R "$root/src" "$tmp/src"
# Vendored crates for exactly the versions Cargo.lock names.
(cd "$tmp" && cargo vendor --locked --versioned-dirs vendor >"$tmp/.cargo/config.toml") ||
    die "cargo vendor failed"
grep -q 'directory = "vendor"' "$tmp/.cargo/config.toml" ||
    die "cargo vendor did not print the source replacement"
if [ "${1:-}" = "--check" ]; then
    (cd "$tmp" && cargo metadata --offline --locked --format-version 1 >/dev/null) ||
        die "the vendored tree does not resolve offline"
fi
rm -rf "$dest"
mv "$tmp" "$dest"
echo "$prog: $dest: $(find "$dest/vendor" -mindepth 1 -maxdepth 1 -type d | wc -l) vendored crates"
