//! Reading a layer with every check flattening makes (digest, size, diff_id, the tar's
//! framing, names, entry types, a path once per layer), writing nothing.

use std::path::Path;

use super::*;

/// Reads the layer `layer` from `blob` as [`flatten`] would.
fn check(blob: impl Read, layer: &Layer) -> Result<()> {
    let mut seen = HashSet::new();
    read_layer(blob, layer, &mut |entry| {
        path_entry(entry, &mut seen)?;
        Ok(())
    })
}

/// Checks that the layer blob in the file `path` flattens.
///
/// Errors: the file cannot be read; anything [`flatten`] would refuse in
/// this layer (named as flattening names it: `layer DIGEST: ...`).
pub fn check_layer_file(path: &Path, layer: &Layer) -> Result<()> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("layer {}: {}", layer.digest, path.display()))?;
    check(file, layer)
}

/// Checks that the layer blob `layer` in `store` flattens (in a blocking
/// task: the layer is decompressed and read once).
///
/// Errors: as [`check_layer_file`]; the blob missing from the store.
pub async fn check_stored(store: Arc<dyn Blobstore>, layer: Layer) -> Result<()> {
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let blob = open_blob(&store, &handle, &layer.digest)?;
        check(blob, &layer)
    })
    .await
    .map_err(|e| anyhow!("checking layer failed: {e}"))?
}
