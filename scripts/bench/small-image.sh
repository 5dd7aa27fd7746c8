# The small image of the small-GET measurements (scripts/bench-small-gets.sh,
# scripts/bench/profile-small-gets.sh); source it, then
#
#   push_small_image BASE DIR
#
# pushes to BASE (the URL of an `airlock serve --allow-push`) a 4 KiB random
# layer, a config and an OCI manifest naming them, tagged bench/small:v1,
# each written to DIR first (DIR/layer, DIR/config, DIR/manifest). Sets
# `layer`, `config` and `manifest` to their digests. Needs curl, sha256sum
# and a `die MESSAGE` function. Then
#
#   small_image_locations DATA | nginx_conf ...
#
# prints the nginx location blocks serving the same answers at the same
# URLs from airlock's filesystem store DATA (`/v2/`, the layer, the
# manifest by tag).

# sha FILE: the sha256 digest of FILE.
sha() { echo "sha256:$(sha256sum "$1" | cut -d' ' -f1)"; }

push_small_image() {
    local base=$1 dir=$2 f mt=application/vnd.oci.image.manifest.v1+json
    head -c 4096 /dev/urandom >"$dir/layer"
    printf '{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}' >"$dir/config"
    layer=$(sha "$dir/layer")
    config=$(sha "$dir/config")
    for f in layer config; do
        curl -sSf -o /dev/null -X POST --data-binary @"$dir/$f" -H 'Content-Type: application/octet-stream' \
            "$base/v2/bench/small/blobs/uploads/?digest=$(sha "$dir/$f")" || die "pushing the $f failed"
    done
    printf '{"schemaVersion":2,"mediaType":"%s","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"%s","size":4096}]}' \
        "$mt" "$config" "$(stat -c %s "$dir/config")" "$layer" >"$dir/manifest"
    curl -sSf -o /dev/null -X PUT --data-binary @"$dir/manifest" -H "Content-Type: $mt" \
        "$base/v2/bench/small/manifests/v1" || die "pushing the manifest failed"
    manifest=$(sha "$dir/manifest")
}

small_image_locations() {
    local data=$1
    blob_file() { local hex=${1#sha256:}; echo "$data/blobs/sha256/${hex:0:2}/$hex"; }
    cat <<EOF
        location = /v2/ { return 200 "{}"; }
        location = /v2/bench/small/blobs/$layer {
            default_type application/octet-stream;
            alias $(blob_file "$layer");
        }
        location = /v2/bench/small/manifests/v1 {
            default_type application/vnd.oci.image.manifest.v1+json;
            alias $(blob_file "$manifest");
        }
EOF
}
