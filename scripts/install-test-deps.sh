#!/usr/bin/env bash
# Installs every tool the tests use: Debian packages with apt-get and the
# oras client (tests/it/push_clients.rs), the Prometheus text-format parser
# (tests/metrics.rs), moto's S3 server (tests/it/s3_backends.rs), the SPDX
# and CycloneDX validators (tests/it/sbom_inventory.rs) and selenium
# (tests/it/ui_console.rs drives Debian's chromium with it) and sigstore-python
# (tests/it/upstream_keyless.rs verifies keyless bundles with it) with pip,
# and the s3s-fs S3 server (tests/it/s3_backends.rs) with cargo install. The
# one list of test dependencies: .ci/run and scripts/test.sh both call this.
#
#   scripts/install-test-deps.sh               # install (needs root)
#   scripts/install-test-deps.sh --if-missing  # only when a tool is missing
set -euo pipefail

APT_PACKAGES=(skopeo umoci gnupg busybox-static debootstrap jq curl time ca-certificates python3-pip openssl nginx-light docker-registry zstd ruby casync python3-apt chromium chromium-driver ceph-mon ceph-mgr ceph-osd radosgw haproxy)
PIP_PACKAGES=(oras==0.2.43 prometheus-client==0.21.1 "moto[server]==5.2.5" spdx-tools==0.8.5 cyclonedx-python-lib==11.12.0 selenium==4.50.0 sigstore==4.5.1)
# moto 5.2.5, not 5.2.1: 5.2.1 answers CompleteMultipartUpload with a
# <CompleteMultipartUploadResponse> root that aws-sdk-s3 rejects (moto
# issue 10055, fixed by its PR 10056).
# ceph-mon ceph-mgr ceph-osd radosgw: Ceph 16.2 (Debian 12), a single-node
# cluster with RGW for the S3 tests (scripts/ceph-rgw.sh, tests/common/ceph.rs);
# boto3 (moto's dependency) creates its buckets.
# selenium 4.50.0: newer ones need a certifi this machine's PyPI mirror lacks;
# it drives /usr/bin/chromium through /usr/bin/chromedriver (no driver download).
# s3s-fs: 0.14.1 is the newest that builds with this machine's Rust;
# --locked uses its own Cargo.lock (reproducible, no dependency resolution).
CARGO_CRATES=(s3s-fs@0.14.1)
prog=$(basename "$0")
die() {
    echo "$prog: error: $*" >&2
    exit 1
}

all_present() {
    for tool in skopeo umoci gpg jq curl debootstrap python3 openssl nginx docker-registry zstd ruby moto_server s3s-fs casync chromium chromedriver ceph-mon ceph-mgr ceph-osd radosgw radosgw-admin haproxy; do
        command -v "$tool" >/dev/null 2>&1 || return 1
    done
    [ -x /bin/busybox ] && [ -x /usr/bin/time ] && python3 -c 'import oras, prometheus_client, spdx_tools, cyclonedx, selenium, boto3, sigstore' 2>/dev/null &&
        /usr/bin/python3 -c 'import apt_pkg' 2>/dev/null &&
        [ "$(python3 -c 'import moto; print(moto.__version__)' 2>/dev/null)" = 5.2.5 ]
}

case "${1:-}" in
    --if-missing) all_present && exit 0 ;;
    "") ;;
    *)
        echo "usage: $prog [--if-missing]" >&2
        exit 2
        ;;
esac

[ "$(id -u)" -eq 0 ] ||
    die "not root: install as root with apt-get install ${APT_PACKAGES[*]}, pip install ${PIP_PACKAGES[*]} and cargo install --locked --features binary ${CARGO_CRATES[*]}"

echo "$prog: apt-get install ${APT_PACKAGES[*]}"
apt-get update -qq </dev/null || die "apt-get update failed"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends \
    "${APT_PACKAGES[@]}" </dev/null || die "apt-get install of ${APT_PACKAGES[*]} failed"

echo "$prog: pip install ${PIP_PACKAGES[*]}"
command -v python3 >/dev/null 2>&1 || die "python3 not found after installing python3-pip"
# A Debian system python refuses plain `pip install` (PEP 668); install into it anyway.
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "${PIP_PACKAGES[@]}" </dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --break-system-packages "${PIP_PACKAGES[@]}" </dev/null ||
    die "pip install of ${PIP_PACKAGES[*]} failed"

if ! command -v s3s-fs >/dev/null 2>&1; then
    echo "$prog: cargo install --locked --features binary ${CARGO_CRATES[*]}"
    command -v cargo >/dev/null 2>&1 || die "cargo not found: s3s-fs is installed with cargo"
    cargo install --quiet --locked --features binary "${CARGO_CRATES[@]}" </dev/null ||
        die "cargo install of ${CARGO_CRATES[*]} failed"
fi
