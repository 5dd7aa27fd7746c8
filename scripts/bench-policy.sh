#!/usr/bin/env bash
# Benchmark the upstream signature policy (issue 41): `bundle create` and
# `import` of the bookworm stack image with and without a cosign policy, in
# the same run.
#
#   scripts/bench-policy.sh [LAYOUT[:REF]]
#
# Setup (not timed): uses LAYOUT (an OCI image layout, ref REF, default
# `latest`) or builds the bookworm stack image with scripts/make-stack-image.sh
# into build/stack (reused when present); copies it and signs the image into
# the copy as `cosign sign --key` lays it out (scripts/bench/sign-layout.py:
# the `sha256-<hex>.sig` signature image, ECDSA P-256 by openssl).
# Measures, RUNS times each (default 3), alternating:
#   create       airlock bundle create from the layout, no policy
#   create+pol   the same with `policy = { keys = [...] }` on the [[image]]
#                (reads the signature image, verifies it, carries it)
#   import       airlock import of the plain bundle into an empty store
#   import+pol   airlock import --config with a [[import.policy]] rule for the
#                repository, of the policy bundle, into an empty store
# Prints the medians (wall seconds) and the ratios with/without; target:
# <= 1.10x for both. A benchmark, not a test: exits 0 when the run
# completed, whatever the figures.
#
# Environment: RUNS (default 3), BENCH_DIR (default /var/tmp), AIRLOCK_BIN.
# Needs: apt-get install openssl python3 time bc (and debootstrap for the
# stack image).
set -euo pipefail
BENCH_DIR=${BENCH_DIR:-/var/tmp}
. "$(dirname "$0")/bench/lib.sh"

case "${1:-}" in
    -h | --help)
        sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
esac
[ $# -le 1 ] || die "usage: $prog [LAYOUT[:REF]]"
RUNS=${RUNS:-3}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer, got '$RUNS'"
need openssl openssl
need python3 python3
need /usr/bin/time time
need bc bc

airlock_binary
stack_layout "$@"

note "setup: signing a copy of $LAYOUT:$REF"
cp -r "$LAYOUT" "$work/layout"
openssl ecparam -name prime256v1 -genkey -noout -out "$work/cosign.key" 2>/dev/null
openssl ec -in "$work/cosign.key" -pubout -out "$work/cosign.pub" 2>/dev/null
signed=$(python3 "$repo/scripts/bench/sign-layout.py" "$work/layout" "$work/cosign.key" "$REF")
[ "$signed" = 1 ] || die "sign-layout.py signed $signed images, not 1"
"$airlock" keys generate --uid "Bench <bench@example.org>" --out "$work/key" >/dev/null

image="[[image]]
source = \"oci:$work/layout:$REF\"
repository = \"stacks/bench\"
tags = [\"latest\"]"
printf '%s\n' "$image" >"$work/plain.toml"
printf '%s\npolicy = { keys = ["%s"] }\n' "$image" "$work/cosign.pub" >"$work/policy.toml"
printf '[[import.policy]]\nrepositories = ["stacks/**"]\nkeys = ["%s"]\n' "$work/cosign.pub" >"$work/site.toml"

# seconds CMD...: runs CMD (output to $work/cmd.log), prints its wall seconds.
seconds() {
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >"$work/cmd.log" 2>&1 || {
        cat "$work/cmd.log" >&2
        die "failed: $*"
    }
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

for i in $(seq 1 "$RUNS"); do
    note "round $i of $RUNS"
    rm -f "$work/plain.bundle" "$work/policy.bundle"
    rm -rf "$work/d-plain" "$work/d-policy"
    sync
    c0=$(seconds "$airlock" bundle create --config "$work/plain.toml" --sign-key "$work/key.sec.asc" -o "$work/plain.bundle")
    c1=$(seconds "$airlock" bundle create --config "$work/policy.toml" --sign-key "$work/key.sec.asc" -o "$work/policy.bundle")
    i0=$(seconds "$airlock" import --data "$work/d-plain" --keyring "$work/key.pub.asc" "$work/plain.bundle")
    i1=$(seconds "$airlock" import --data "$work/d-policy" --keyring "$work/key.pub.asc" --config "$work/site.toml" "$work/policy.bundle")
    echo "$c0 $c1 $i0 $i1" >"$work/round.$i"
done
read -r c0 c1 i0 i1 < <(median_rows "$work"/round.*)
size=$(stat -c %s "$work/policy.bundle")
ratio() { echo "scale=3; $2 / $1" | bc -l; }
verdict() { [ "$(echo "$1 <= 1.10" | bc -l)" = 1 ] && echo PASS || echo FAIL; }
rc=$(ratio "$c0" "$c1")
ri=$(ratio "$i0" "$i1")
cat <<TABLE
airlock signature policy benchmark: $LAYOUT:$REF, bundle $((size / 1048576)) MiB, medians of $RUNS rounds
| step | no policy (s) | with policy (s) | ratio | target |
| --- | --- | --- | --- | --- |
| bundle create | $(printf %.2f "$c0") | $(printf %.2f "$c1") | $(printf %.3f "$rc") | <= 1.10 $(verdict "$rc") |
| import | $(printf %.2f "$i0") | $(printf %.2f "$i1") | $(printf %.3f "$ri") | <= 1.10 $(verdict "$ri") |
TABLE
