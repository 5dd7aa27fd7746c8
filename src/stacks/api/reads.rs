//! The cells' side: the table, one stack, resolution for a cell, the rootfs download (with
//! the per-stack `max_in_flight` slots and deprecation warnings) and the rollout status.

use super::*;

/// `Warning: 299 - "..."` for a stack that is not ACTIVE.
pub(super) fn warn(res: &mut Response, name: &StackName, stack: &Stack) {
    if let Some(text) = stack.state.warning(name, &stack.state_reason) {
        let quoted = text.replace('\\', "\\\\").replace('"', "\\\"");
        let value: String = format!("299 - \"{quoted}\"")
            .chars()
            .map(|c| {
                if c.is_ascii() && !c.is_ascii_control() {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        if let Ok(v) = HeaderValue::from_str(&value) {
            res.headers_mut().append(header::WARNING, v);
        }
    }
}

/// The stacks the caller may read (every image of the stack in its
/// repositories), and the default.
pub(super) async fn list(ctx: &dyn Context, caller: &Caller<'_>) -> Result<Response> {
    let table = ctx.stacks().table(ctx.state()).await?;
    let stacks: Vec<_> = table
        .stacks
        .iter()
        .filter(|(n, _)| caller.reads(&table, n))
        .map(|(n, s)| s.view(n, table.default.as_ref() == Some(n)))
        .collect();
    Ok(axum::Json(json!({ "default": table.default, "stacks": stacks })).into_response())
}

pub(super) async fn show(ctx: &dyn Context, name: &StackName) -> Result<Response> {
    let table = ctx.stacks().table(ctx.state()).await?;
    let stack = table.get(name)?;
    let mut res =
        axum::Json(stack.view(name, table.default.as_ref() == Some(name))).into_response();
    warn(&mut res, name, stack);
    Ok(res)
}

/// The immutable URL of `artifact` of `r` (named by its manifest digest).
pub(super) fn artifact_url(name: &StackName, r: &Rootfs, artifact: Artifact) -> String {
    format!(
        "/stacks/v1/{name}/{}?digest={}",
        artifact.file(),
        r.manifest
    )
}

/// The patch of `r` as the assignment lists it (`url`, `from`: the
/// rootfs digest it applies to, `from_size`, `digest` and `size` of the
/// patch), when one was made.
pub(super) fn rootfs_patch(name: &StackName, r: &Rootfs) -> serde_json::Value {
    match &r.patch {
        None => serde_json::Value::Null,
        Some(p) => json!({
            "url": artifact_url(name, r, Artifact::Patch),
            "from": p.from,
            "from_size": p.from_size,
            "digest": p.blob,
            "size": p.size,
        }),
    }
}

pub(super) fn platform_missing(
    name: &StackName,
    p: &Promotion,
    platform: Option<&str>,
) -> StackError {
    let have: Vec<&str> = p.rootfs.iter().map(|r| r.platform.as_str()).collect();
    StackError::NotFound(format!(
        "stack {name}: promotion {} has no rootfs for platform {} (has {})",
        p.id,
        platform.map_or_else(crate::stacks::image::native_platform, str::to_string),
        have.join(", ")
    ))
}

pub(super) async fn resolve(
    ctx: &dyn Context,
    name: &StackName,
    cell: &str,
    platform: Option<&str>,
) -> Result<Response> {
    cells::check_cell_id(cell)?;
    let table = ctx.stacks().table(ctx.state()).await?;
    let stack = table.get(name)?;
    let res = stack
        .resolve(name, cell)
        .ok_or_else(|| StackError::NotFound(format!("stack {name} has no promotion yet")))?;
    let p = res.promotion;
    let r = p
        .rootfs_for(platform)
        .ok_or_else(|| platform_missing(name, p, platform))?;
    let body = json!({
        "stack": name,
        "cell": cell,
        "digest": r.manifest,
        "image": p.image,
        "platform": r.platform,
        "rootfs_url": artifact_url(name, r, Artifact::Tar),
        "rootfs_index_url": r.chunks.as_ref().map(|_| artifact_url(name, r, Artifact::Index)),
        "chunk_store_url": r.chunks.as_ref().map(|_| "/stacks/v1/chunks/"),
        "rootfs_patch": rootfs_patch(name, r),
        "rootfs_sha256": r.sha256.hex(),
        "rootfs_digest": r.sha256,
        "rootfs_size": r.size,
        "state": stack.state.as_str(),
        "state_reason": stack.state_reason,
        "promotion": p.id,
        "latest": res.latest,
        "rollout_percent": stack.rollout.map_or(100, |r| r.percent),
    });
    let mut out = axum::Json(body).into_response();
    out.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    warn(&mut out, name, stack);
    Ok(out)
}

/// The rootfs a download names: `digest` (a promoted image or platform
/// manifest of this stack), else the cell's, else the fully rolled-out
/// promotion's ([`Stack::settled`]: during a canary, what every cell
/// outside it runs).
pub(super) fn find_rootfs<'a>(
    name: &StackName,
    stack: &'a Stack,
    query: &QueryParams,
) -> Result<&'a Rootfs> {
    let platform = query.get("platform");
    if let Some(d) = query.get("digest") {
        let d: Digest = d
            .parse()
            .map_err(|e| StackError::Invalid(format!("digest {d:?}: {e}")))?;
        for p in stack.promotions.iter().rev() {
            if let Some(r) = p.rootfs.iter().find(|r| r.manifest == d) {
                return Ok(r);
            }
            if p.image.digest == d {
                return p
                    .rootfs_for(platform)
                    .ok_or_else(|| platform_missing(name, p, platform).into());
            }
        }
        return Err(StackError::NotFound(format!("stack {name} never promoted {d}")).into());
    }
    let p = match query.get("cell") {
        Some(cell) => {
            cells::check_cell_id(cell)?;
            stack.resolve(name, cell).map(|r| r.promotion)
        }
        None => stack.settled(),
    }
    .ok_or_else(|| StackError::NotFound(format!("stack {name} has no promotion yet")))?;
    Ok(p.rootfs_for(platform)
        .ok_or_else(|| platform_missing(name, p, platform))?)
}

/// `GET/HEAD .../rootfs.tar`, `.../rootfs.caibx` and `.../rootfs.patch`:
/// one path for all three (resolution, download slots, ranges, ETag, cache
/// rules). A URL that names a digest is immutable (`max-age=31536000`);
/// one resolved by cell or by the active promotion may change: `no-cache`
/// with its ETag. Slots: a tar GET takes one (a cell's lease becomes it,
/// see [`StacksServer::lease`]); an index or patch GET with `cell=` leases
/// one for the cell's delta.
pub(super) async fn rootfs(
    ctx: &dyn Context,
    name: &StackName,
    artifact: Artifact,
    query: &QueryParams,
    headers: &HeaderMap,
    head: bool,
) -> Result<Response> {
    let arrived = std::time::Instant::now();
    let mut table = ctx.stacks().table(ctx.state()).await?;
    if query.get("digest").is_some()
        && table
            .get(name)
            .map_or(true, |s| find_rootfs(name, s, query).is_err())
    {
        // A digest another replica handed out since this one read the root.
        table = ctx.stacks().table_since(ctx.state(), arrived).await?;
    }
    let stack = table.get(name)?;
    let r = find_rootfs(name, stack, query)?;
    let digest = match artifact {
        Artifact::Tar => &r.sha256,
        Artifact::Index => {
            &r.chunks
                .as_ref()
                .ok_or_else(|| {
                    StackError::NotFound(format!(
                        "rootfs {} has no chunk index (promoted before deltas; promote it again)",
                        r.sha256
                    ))
                })?
                .index
        }
        Artifact::Patch => {
            &r.patch
                .as_ref()
                .ok_or_else(|| {
                    StackError::NotFound(format!(
                        "rootfs {} has no patch (a first promotion, or one that would not pay)",
                        r.sha256
                    ))
                })?
                .blob
        }
    };
    let addressing = caching::Addressing::of(query);
    if let Some(mut res) = caching::not_modified(headers, digest, addressing) {
        warn(&mut res, name, stack);
        return Ok(res);
    }
    let store = ctx.state().blobstore();
    let key = blob_key(digest);
    let size = store.stat(&key).await?.ok_or_else(|| {
        let what = artifact.what();
        tracing::error!(blob = %digest, stack = %name, what, "promoted blob missing from the blobstore");
        StackError::NotFound(format!("{what} blob {digest} is missing from the store"))
    })?;
    // A GET takes a download slot, given back when the body is dropped
    // (sent, or the client went away); HEAD takes none.
    let cell = query.get("cell");
    let (busy, slot) = match (stack.max_in_flight, artifact) {
        (Some(limit), Artifact::Tar) if !head => {
            let slot = ctx.stacks().take_slot(name, cell, limit);
            (slot.is_none().then_some(limit), slot)
        }
        (Some(limit), Artifact::Index | Artifact::Patch) if !head => {
            let leased = cell.is_none_or(|c| ctx.stacks().lease(name, c, limit));
            ((!leased).then_some(limit), None)
        }
        _ => (None, None),
    };
    if let Some(limit) = busy {
        return Err(too_many(&ctx.stacks().config, name, limit));
    }
    let mut res = blob_response(&**store, digest, size, headers, head, move |stream| {
        Box::pin(stream.map(move |chunk| {
            let _held = &slot;
            chunk
        }))
    })
    .await?;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(artifact.content_type()),
    );
    caching::apply(&mut res, digest, addressing);
    warn(&mut res, name, stack);
    Ok(res)
}

/// `GET/HEAD /stacks/v1/chunks/<4 hex>/<id>.cacnk`: the casync chunk store
/// over every promoted rootfs (content-addressed: immutable). With
/// `stack=` and `cell=`, the chunk keeps that cell's download lease alive.
pub(super) async fn chunk(
    ctx: &dyn Context,
    id: &crate::chunks::ChunkId,
    query: &QueryParams,
    headers: &HeaderMap,
    head: bool,
) -> Result<Response> {
    if let (Some(stack), Some(cell)) = (query.get("stack"), query.get("cell")) {
        ctx.stacks().touch_lease(stack, cell);
    }
    let lookup = ctx.stacks().chunk_lookup(ctx.state()).await?;
    let Some(digest) = lookup.get(id) else {
        return Err(chunk_missing(id).into());
    };
    let store = ctx.state().blobstore();
    let Some(size) = store.stat(&blob_key(digest)).await? else {
        return Err(chunk_missing(id).into());
    };
    let mut res = blob_response(&**store, digest, size, headers, head, |s| s).await?;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(res)
}

pub(super) fn chunk_missing(id: &crate::chunks::ChunkId) -> StackError {
    StackError::NotFound(format!(
        "chunk {id} is not in any promoted rootfs this user may read"
    ))
}

pub(super) fn too_many(cfg: &StacksConfig, name: &StackName, limit: u32) -> ApiError {
    let base = cfg.retry_after.as_secs().max(1);
    let secs = base + rand::random::<u64>() % (base + 1);
    let mut e = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "TOOMANYREQUESTS",
        format!(
            "stack {name}: {limit} rootfs downloads in flight (max_in_flight {limit}); retry after {secs} s"
        ),
    );
    e.retry_after = Some(secs);
    e
}

pub(super) async fn status(ctx: &dyn Context, name: &StackName) -> Result<Response> {
    let table = ctx.stacks().table(ctx.state()).await?;
    let stack = table.get(name)?;
    let reports = cells::reports(&**ctx.state().blobstore(), name).await?;
    let s = cells::status(
        name,
        stack,
        &reports,
        time::OffsetDateTime::now_utc(),
        ctx.stacks().config.stale_after,
    );
    Ok(axum::Json(s).into_response())
}
