//! What one generation reaches, for garbage collection and fsck.
//!
//! Owns: [`StateStore::walk`], a streaming enumeration of every metadata
//! document (the state document, the room documents, every page of the
//! repository table and of each repository tree) and every manifest and
//! blob digest the generation references. Holds one root-to-leaf path of
//! pages at a time, plus the caller's set of documents already seen, never
//! the whole tree. Never reads manifests: a manifest's blobs are linked in
//! its repository (`b/` keys), and its child manifests are recorded there.

use std::collections::HashSet;

use futures_util::future::BoxFuture;

use super::page::{self, Page};
use super::{Result, StateDoc, StateStore, Table, load_doc, table_of};
use crate::digest::Digest;
use crate::names::RepositoryName;

/// One thing a generation reaches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TreeItem {
    /// A metadata document stored as a blob: a [`StateDoc`], a page
    /// (`airlock.page.v1`) or a room document (`StateDoc::documents`).
    Document(Digest),
    /// A manifest recorded in `repository` (its bytes are a blob).
    Manifest {
        /// Where it is recorded (the first repository walked that has it
        /// in a page not seen before).
        repository: RepositoryName,
        /// The manifest digest.
        digest: Digest,
        /// The media type it is recorded with (what it is read as:
        /// [`crate::oci::Manifest::read`]).
        media_type: String,
    },
    /// A blob (config, layer, other) linked into `repository`.
    Blob {
        /// Where it is linked (as for `Manifest`).
        repository: RepositoryName,
        /// The blob digest.
        digest: Digest,
        /// Its size in bytes as recorded.
        size: u64,
    },
}

/// Which tree a page belongs to.
#[derive(Clone)]
enum Tree {
    /// The repository table: leaf values are repository roots.
    Table,
    /// A repository's tree.
    Repository(RepositoryName),
}

impl StateStore {
    /// Calls `f` for everything the generation `state` (a [`StateDoc`]
    /// digest) reaches: [`TreeItem::Document`] for itself, its room
    /// documents and every page or document of its repository table and
    /// repositories, [`TreeItem::Manifest`] and [`TreeItem::Blob`] for every
    /// manifest and linked blob of every repository.
    ///
    /// `seen` holds document digests already walked: a document in it is
    /// skipped with everything below it, and every document walked is
    /// added. Pages are shared between generations, so walking the
    /// retained generations with one `seen` set visits each page once and
    /// reports each of its manifests and blobs once. Memory: one path of
    /// pages (about 4 KiB each) plus `seen`. Pages read by a walk do not
    /// enter the page cache.
    ///
    /// Errors: a document is missing or corrupt (the walk stops there), or
    /// the first error `f` returns.
    pub async fn walk_tree(
        &self,
        state: &Digest,
        seen: &mut HashSet<Digest>,
        f: &mut (dyn FnMut(TreeItem) -> Result<()> + Send),
    ) -> Result<()> {
        if !seen.insert(state.clone()) {
            return Ok(());
        }
        f(TreeItem::Document(state.clone()))?;
        let doc: StateDoc = load_doc(&*self.store, state).await?;
        for d in doc.documents.values() {
            if seen.insert(d.clone()) {
                f(TreeItem::Document(d.clone()))?;
            }
        }
        match table_of(&doc)? {
            Table::Empty => Ok(()),
            Table::Paged(root) => self.walk_pages(root, Tree::Table, seen, f).await,
        }
    }

    /// [`StateStore::walk_tree`] of one repository's tree, from its root
    /// page `root`: its pages, manifests and linked blobs.
    ///
    /// Errors: a page is missing or corrupt (the walk stops there), or the
    /// first error `f` returns.
    pub(super) async fn walk_repository_tree(
        &self,
        name: &RepositoryName,
        root: &Digest,
        f: &mut (dyn FnMut(TreeItem) -> Result<()> + Send),
    ) -> Result<()> {
        let mut seen = HashSet::new();
        self.walk_pages(root.clone(), Tree::Repository(name.clone()), &mut seen, f)
            .await
    }

    fn walk_pages<'a>(
        &'a self,
        digest: Digest,
        tree: Tree,
        seen: &'a mut HashSet<Digest>,
        f: &'a mut (dyn FnMut(TreeItem) -> Result<()> + Send),
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if !seen.insert(digest.clone()) {
                return Ok(());
            }
            f(TreeItem::Document(digest.clone()))?;
            let page: std::sync::Arc<Page> = self.pages.read(&digest, false).await?;
            for (i, (key, value)) in page.entries.iter().enumerate() {
                if page.level > 0 {
                    self.walk_pages(page.child(i)?, tree.clone(), seen, f)
                        .await?;
                    continue;
                }
                match &tree {
                    Tree::Table => {
                        let name: RepositoryName =
                            key.parse().map_err(|_| super::StateError::Corrupt {
                                digest: digest.to_string(),
                                cause: format!("bad repository name {key:?}"),
                            })?;
                        let root = page::digest_value(value)?;
                        self.walk_pages(root, Tree::Repository(name), seen, f)
                            .await?;
                    }
                    Tree::Repository(name) => {
                        if let Some(d) = key.strip_prefix("m/") {
                            let info: super::ManifestInfo = page::parse_value(value)?;
                            f(TreeItem::Manifest {
                                repository: name.clone(),
                                digest: digest_of(&digest, d)?,
                                media_type: info.media_type,
                            })?;
                        } else if let Some(d) = key.strip_prefix("b/") {
                            f(TreeItem::Blob {
                                repository: name.clone(),
                                digest: digest_of(&digest, d)?,
                                size: page::parse_value(value)?,
                            })?;
                        }
                    }
                }
            }
            Ok(())
        })
    }
}

fn digest_of(page: &Digest, s: &str) -> Result<Digest> {
    s.parse().map_err(|_| super::StateError::Corrupt {
        digest: page.to_string(),
        cause: format!("bad digest {s:?} in a repository page"),
    })
}
