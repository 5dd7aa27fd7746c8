#!/usr/bin/env bash
# README's test command: installs the tools the tests use when one is missing
# (scripts/install-test-deps.sh), then runs the whole suite in release mode.
# Extra arguments go to cargo test (e.g. `scripts/test.sh --test it -- e2e_skopeo::`).
# --no-fail-fast: one failing test file does not hide the results of the others.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh --if-missing
exec cargo test --release --no-fail-fast "$@"
