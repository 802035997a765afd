//! This node's name on a shared PostgreSQL database, and the proof that no other live process
//! goes by it: a session-level advisory lock keyed by the name, held on a connection of its own
//! for as long as the process runs (`docs/scale-out.md`, "Node identity").
//!
//! A run's lease carries the name of the node driving it. A node restarted under the same name
//! takes back the runs it leased before at once (`run::lease::join`) — which is only right if the
//! process that leased them is gone: a live one would be fenced out of its runs mid-step, and its
//! steps run again. PostgreSQL lets go of a session's advisory locks when the session ends, and
//! the session of a killed process ends as soon as the server reads its closed connection; so
//! holding the lock proves that no other live process has this name. A second process with the
//! same name cannot take it, and refuses to start ([`IdentityError::InUse`]) before it serves or
//! claims anything.
//!
//! The lock decides only what a starting node may take back. No write relies on it: every commit
//! of a run checks the run's lease epoch. So a node whose lock connection is lost (PostgreSQL
//! restarted, the connection cut) goes on driving its runs, counts the name as not held
//! ([`Identity::is_held`]) and takes the lock again on a new connection. If another session holds
//! it by then, that is either this process's own earlier session, which the server has not found
//! dead yet — it is ended and the lock taken — or another process started under this name while
//! the lock was free. That process has taken this node's runs back already; two live processes
//! under one name would also hand back each other's runs when either drains. So this one stops
//! ([`IdentityError::TakenOver`], [`Identity::taken_over`]) rather than share the name.

use std::sync::Mutex;

use sha2::Digest;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long a session holding the name keeps the server from noticing that its client is gone
/// without closing the connection (its machine lost): the lock's session asks the server to
/// probe an idle connection after 5 s, every 5 s, 3 times, and to give up on data unacknowledged
/// for as long. A process that is merely killed closes its connection, and its lock goes at once.
pub const DEAD_CLIENT_SECS: u64 = 20;

/// Why this process cannot go by its node id.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "node id `{node}` is in use: another live flexrun process on this database goes by it. Give this \
         process a node id of its own with FLEXRUN_NODE_ID (or `cluster.node_id`). A process whose machine was \
         lost keeps the id until PostgreSQL drops its connection, within about {DEAD_CLIENT_SECS} s"
    )]
    InUse { node: String },
    #[error(
        "node id `{node}` was taken by another flexrun process while this one's connection to PostgreSQL was \
         lost; two processes may not share a node id, so this one stops (its runs go on in the other)"
    )]
    TakenOver { node: String },
    #[cfg(feature = "postgres")]
    #[error("cannot hold node id `{node}` on PostgreSQL: {source}")]
    Database {
        node: String,
        #[source]
        source: tokio_postgres::Error,
    },
}

/// Where this process stands with its node id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// It holds the lock.
    Held,
    /// The lock's connection was lost; the lock is being taken again.
    Lost,
    /// Another process took the lock while it was free.
    TakenOver,
}

/// The node id this process holds, for as long as this lives (or until [`Self::release`]).
pub struct Identity {
    node: String,
    standing: watch::Receiver<Standing>,
    /// Tells the keeper of the lock to let go of it.
    release: watch::Sender<bool>,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

impl Identity {
    /// The node id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Whether this process holds the lock on its node id now.
    pub fn is_held(&self) -> bool {
        *self.standing.borrow() == Standing::Held
    }

    /// Resolves once another process has taken this node id (never, while this one keeps it).
    pub async fn taken_over(&self) -> IdentityError {
        let mut standing = self.standing.clone();
        if standing.wait_for(|s| *s == Standing::TakenOver).await.is_err() {
            // The keeper let go of the id on request: no one took it.
            std::future::pending::<()>().await;
        }
        IdentityError::TakenOver { node: self.node.clone() }
    }

    /// Lets go of the node id (the process ends): a process started under it right after finds
    /// it free, without waiting for the server to see this one's connection close.
    pub async fn release(&self) {
        self.release.send_replace(true);
        let keeper = self.keeper.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(keeper) = keeper {
            let _ = keeper.await;
        }
    }
}

/// The advisory lock key of node id `node`: the first 8 bytes of the SHA-256 of
/// `flexrun node <node>`. A hash every build computes alike, so processes of two versions of
/// flexrun exclude each other too.
pub fn lock_key(node: &str) -> i64 {
    let digest: [u8; 32] = sha2::Sha256::digest(format!("flexrun node {node}").as_bytes()).into();
    let [a, b, c, d, e, f, g, h, ..] = digest;
    i64::from_be_bytes([a, b, c, d, e, f, g, h])
}

/// The two 32-bit halves of a lock key, as `pg_locks` shows them (`classid`, `objid`).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn halves(key: i64) -> (u32, u32) {
    let [a, b, c, d, e, f, g, h] = key.to_be_bytes();
    (u32::from_be_bytes([a, b, c, d]), u32::from_be_bytes([e, f, g, h]))
}

#[cfg(feature = "postgres")]
pub use keeper::take;

#[cfg(feature = "postgres")]
mod keeper {
    use std::sync::Mutex;
    use std::time::Duration;

    use tokio::sync::{oneshot, watch};
    use tokio_postgres::error::SqlState;

    use super::{DEAD_CLIENT_SECS, Identity, IdentityError, Standing, halves, lock_key};
    use crate::config::Settings;

    /// How long taking the lock waits for a session holding it to end: the session of a process
    /// killed a moment ago ends as soon as the server reads the closed connection.
    const LOCK_WAIT: Duration = Duration::from_secs(2);

    /// A probe of the lock's connection unanswered for this long counts it lost.
    const ANSWER_WITHIN: Duration = Duration::from_secs(10);

    /// Takes node id `settings.node_id()` (a session-level advisory lock on a connection of its
    /// own, named `flexrun-identity <node id>` in `pg_stat_activity`) and keeps it, taking it again
    /// whenever its connection is lost, until the returned [`Identity`] is released or dropped.
    pub async fn take(settings: &Settings) -> Result<Identity, IdentityError> {
        let node = settings.node_id();
        let failed = |source| IdentityError::Database { node: node.clone(), source };
        let mut config: tokio_postgres::Config = settings.database_url.parse().map_err(failed)?;
        config.application_name(format!("flexrun-identity {node}"));
        let session = match Session::open(&config, &node, None).await.map_err(failed)? {
            Attempt::Held(session) => session,
            Attempt::HeldBy(_) => return Err(IdentityError::InUse { node }),
        };
        tracing::info!(node, "holding the node id");
        crate::telemetry::node_id_held(true);
        let (standing, watched) = watch::channel(Standing::Held);
        let (release, released) = watch::channel(false);
        let poll = Duration::from_millis(settings.cluster.poll_millis);
        let keeper = Keeper { config, node: node.clone(), standing, released, poll };
        let keeper = tokio::spawn(keeper.run(session));
        Ok(Identity { node, standing: watched, release, keeper: Mutex::new(Some(keeper)) })
    }

    /// A connection holding the lock.
    struct Session {
        client: tokio_postgres::Client,
        /// The connection's end (with its error, if it failed).
        ended: oneshot::Receiver<Result<(), tokio_postgres::Error>>,
        /// Its server process (`None` if the server did not show it).
        backend: Option<Backend>,
    }

    /// A server process (a session), as `pg_stat_activity` shows it: its pid, and when it started
    /// (µs since 1970), since pids are used again.
    #[derive(Debug, PartialEq, Eq)]
    struct Backend {
        pid: i32,
        started: Option<i64>,
    }

    enum Attempt {
        Held(Session),
        /// The lock is held by this session (`None`: it ended just after the wait).
        HeldBy(Option<Backend>),
    }

    /// How the lock's connection was lost.
    #[derive(Debug, thiserror::Error)]
    enum Loss {
        #[error(transparent)]
        Failed(#[from] tokio_postgres::Error),
        #[error("the connection closed")]
        Closed,
        #[error("no answer within {0:?}")]
        Silent(Duration),
    }

    impl Session {
        /// Connects and takes the lock, waiting up to [`LOCK_WAIT`] for a holder to let go. A
        /// holder that is `previous` (this process's own earlier session, which the server has
        /// not found dead yet) is ended first.
        async fn open(
            config: &tokio_postgres::Config,
            node: &str,
            previous: Option<&Backend>,
        ) -> Result<Attempt, tokio_postgres::Error> {
            let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
            let (sender, ended) = oneshot::channel();
            tokio::spawn(async move {
                let _ = sender.send(connection.await);
            });
            // The server drops this connection once its client is gone, even without a close.
            client
                .batch_execute(&format!(
                    "SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3; \
                     SET tcp_user_timeout = {}; SET lock_timeout = {}",
                    DEAD_CLIENT_SECS * 1000,
                    LOCK_WAIT.as_millis(),
                ))
                .await?;
            let key = lock_key(node);
            let mut holder = None;
            for _ in 0..2 {
                match client.execute("SELECT pg_advisory_lock($1::bigint)", &[&key]).await {
                    Ok(_) => {
                        let backend = Backend::of(&client, "pg_backend_pid()", &[]).await?;
                        return Ok(Attempt::Held(Session { client, ended, backend }));
                    }
                    Err(error) if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {}
                    Err(error) => return Err(error),
                }
                let (classid, objid) = halves(key);
                holder = Backend::of(&client, HOLDER, &[&classid, &objid]).await?;
                match &holder {
                    // This process's own: end it, and wait for the lock once more.
                    Some(held) if Some(held) == previous => {
                        client.execute("SELECT pg_terminate_backend($1)", &[&held.pid]).await?;
                    }
                    Some(_) => break,
                    // Let go of just after the wait: try once more.
                    None => {}
                }
            }
            Ok(Attempt::HeldBy(holder))
        }

        /// Waits until the connection is lost: it ends, or a probe (every `poll`) fails or goes
        /// unanswered.
        async fn lost(&mut self, poll: Duration) -> Loss {
            let mut probes = tokio::time::interval(poll);
            loop {
                tokio::select! {
                    ended = &mut self.ended => return match ended {
                        Ok(Err(error)) => Loss::Failed(error),
                        Ok(Ok(())) | Err(_) => Loss::Closed,
                    },
                    _ = probes.tick() => match tokio::time::timeout(ANSWER_WITHIN, self.client.simple_query("")).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(error)) => return Loss::Failed(error),
                        Err(_) => return Loss::Silent(ANSWER_WITHIN),
                    },
                }
            }
        }
    }

    /// The session holding the advisory lock whose key halves are `$1`, `$2` in this database.
    const HOLDER: &str = "(SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted \
        AND l.objsubid = 1 AND l.classid = $1 AND l.objid = $2 \
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))";

    impl Backend {
        /// The session whose pid `pid` (an SQL expression over `params`) gives, if there is one.
        async fn of(
            client: &tokio_postgres::Client,
            pid: &str,
            params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        ) -> Result<Option<Self>, tokio_postgres::Error> {
            let sql = format!(
                "SELECT pid, (extract(epoch FROM backend_start) * 1000000)::int8 FROM pg_stat_activity \
                 WHERE pid = {pid}"
            );
            let row = client.query_opt(&sql, params).await?;
            Ok(row.map(|row| Self { pid: row.get(0), started: row.get(1) }))
        }
    }

    /// Watches the lock's connection and takes the lock again when it is lost.
    struct Keeper {
        config: tokio_postgres::Config,
        node: String,
        standing: watch::Sender<Standing>,
        released: watch::Receiver<bool>,
        poll: Duration,
    }

    impl Keeper {
        async fn run(mut self, mut session: Session) {
            loop {
                let loss = tokio::select! {
                    loss = session.lost(self.poll) => loss,
                    // Released, or the Identity dropped: let go of the lock.
                    _ = self.released.changed() => {
                        let _ = session.client.execute("SELECT pg_advisory_unlock($1::bigint)", &[&lock_key(&self.node)]).await;
                        return;
                    }
                };
                self.standing.send_replace(Standing::Lost);
                crate::telemetry::node_id_held(false);
                tracing::warn!(node = %self.node, error = %crate::excerpt::log(loss), "lost the connection holding the node id; taking it again");
                match self.take_again(session.backend.as_ref()).await {
                    Some(again) => session = again,
                    None => return,
                }
            }
        }

        /// Takes the lock again, every `poll` until it can; `None` once another process holds it
        /// (or the id is released meanwhile).
        async fn take_again(&mut self, previous: Option<&Backend>) -> Option<Session> {
            loop {
                match Session::open(&self.config, &self.node, previous).await {
                    Ok(Attempt::Held(session)) => {
                        self.standing.send_replace(Standing::Held);
                        crate::telemetry::node_id_held(true);
                        tracing::info!(node = %self.node, "holding the node id again");
                        return Some(session);
                    }
                    Ok(Attempt::HeldBy(Some(holder))) if Some(&holder) != previous => {
                        tracing::error!(node = %self.node, holder = holder.pid, "another process took the node id while this one's connection was lost; stopping");
                        self.standing.send_replace(Standing::TakenOver);
                        return None;
                    }
                    // Free again, or still this process's own earlier session: try again.
                    Ok(Attempt::HeldBy(_)) => {}
                    Err(error) => {
                        tracing::debug!(node = %self.node, error = %crate::excerpt::log(error), "cannot take the node id yet")
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(self.poll) => {}
                    _ = self.released.changed() => return None,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_key_is_the_same_in_every_build_and_differs_between_ids() {
        // Pinned: processes of two builds must compute one key for one node id.
        assert_eq!(lock_key("node-a"), lock_key("node-a"));
        assert_eq!(format!("{:016x}", lock_key("node-a")), "c2316da5ff69643c");
        assert_ne!(lock_key("node-a"), lock_key("node-b"));
        let key = lock_key("node-a");
        let (high, low) = halves(key);
        assert_eq!((u64::from(high) << 32) | u64::from(low), u64::from_be_bytes(key.to_be_bytes()));
    }
}
