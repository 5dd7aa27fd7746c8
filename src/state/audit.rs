//! Who makes a change: the actor recorded in every [`super::StateDoc`]
//! (`who`, `address`), for the audit trail (`airlock history`).
//!
//! Owns: [`Actor`] and the task-local scope the HTTP server sets around
//! each authenticated request ([`scope`]), so every room's commits record
//! the request's user and client address without each room passing them
//! down. A commit outside any scope (the CLI) records the `who` its caller
//! gives and no address.

use std::future::Future;

/// Who changed the state and from where.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Actor {
    /// The user name (HTTP: the authenticated user, `anonymous` when no
    /// users are configured; CLI: `user@host`).
    pub who: String,
    /// The client's address (`ip:port`) for a change made over HTTP.
    pub address: Option<String>,
    /// True when the actor holds the admin role (every client when no
    /// users are configured). Rooms with their own policies read it
    /// (custom stacks); it is not recorded.
    pub admin: bool,
}

tokio::task_local! {
    static CURRENT: Actor;
}

/// Runs `fut` with `actor` as the actor of every commit it makes in this
/// task (spawned tasks do not inherit it).
pub fn scope<F: Future>(actor: Actor, fut: F) -> impl Future<Output = F::Output> {
    // Not an `async fn`: that would hold `fut` twice (its argument and the
    // scope's), doubling the size of every request future that runs in it.
    CURRENT.scope(actor, fut)
}

/// The actor of the current [`scope`], if any.
pub fn current() -> Option<Actor> {
    CURRENT.try_with(Clone::clone).ok()
}
