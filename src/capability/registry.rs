//! The registry of active capabilities: loaded from the database and `FLEXRUN_CAPABILITIES_DIR` at
//! start, extended by the register endpoint, persisted on every change. Readers take a cheap
//! snapshot, so a run plans and executes against one consistent set.
//!
//! With several nodes on one database (PostgreSQL) the stored registrations are the truth: every
//! change of them is announced to the other nodes in its transaction, and each node applies what
//! another wrote ([`Registry::follow_stored`], driven by `capability::follow`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde_json::Value;

use super::stored::{Invalid, Registrations, difference};
use super::{Capabilities, Capability, EndpointAllowlist, Executor, catalog};

/// The top-level key of a registration file that registers an MCP server.
pub const MCP_SERVER_KEY: &str = "mcpServer";
use crate::condition::dsl::Catalog;
use crate::store::capabilities::{self as rows, CapabilityRow, Summary};
use crate::store::{Store, StoreError, leases};
use crate::validation::FieldError;

/// The channel on which a node tells the others that it wrote or deleted a capability
/// registration (payload: its node id, for whoever watches the channel; the registrations are
/// read from the database). Declared here, with the writes that send it; the run wing's listener
/// (`run::lease::notify`) listens on it.
pub const REGISTRATIONS: &str = "flexrun_capabilities";

/// The longest node id a [`REGISTRATIONS`] notification carries (a payload must stay under
/// PostgreSQL's 8,000 bytes, and a node id is the operator's to choose).
const MAX_PAYLOAD_CHARS: usize = 200;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("invalid capability registration: {} problem(s)", .0.len())]
    Invalid(Vec<FieldError>),
    #[error("capability file {path}: {message}")]
    File { path: String, message: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no capability {0} is registered")]
    NotRegistered(String),
    /// A tool of an MCP server: its server offers it again whenever it lists its tools.
    #[error("capability {id} is a tool of MCP server {server}")]
    OfMcpServer { id: String, server: String },
}

pub struct Registry {
    current: RwLock<Arc<Capabilities>>,
    /// The condition variable catalog, rebuilt whenever the capabilities change.
    catalog: RwLock<Arc<Catalog>>,
    /// Facet schemas from the configuration (they win over capability contracts).
    configured_facets: Vec<(String, Value)>,
    /// The registrations stored, as this node last wrote or read them. Held while the database
    /// and the active set change, so both change in the same order — whether this node writes a
    /// registration or applies what another node wrote.
    stored: tokio::sync::Mutex<Followed>,
    /// Set when the stored registrations are to be read again ([`Registry::reread`]).
    reread: tokio::sync::Notify,
    store: Store,
    policy: EndpointAllowlist,
    /// This node's id on a database several nodes share (PostgreSQL): each write of a
    /// registration announces itself to the others in its transaction. `None` alone (SQLite).
    announce: Option<String>,
}

/// What this node applied of the stored registrations.
struct Followed {
    /// Each stored registration's text by id, valid or not (one that is not valid here was
    /// warned of once, when it was read).
    registrations: Registrations,
    /// The [`Summary`] of the rows last read.
    summary: Summary,
}

impl Registry {
    /// Loads stored registrations, then (re-)registers `files` (the capability registrations of
    /// the capabilities directory, by path). `announce`: this node's id when several nodes share
    /// the database.
    pub async fn load(
        store: Store,
        policy: EndpointAllowlist,
        configured_facets: Vec<(String, Value)>,
        files: Vec<(PathBuf, Value)>,
        announce: Option<String>,
    ) -> Result<Self, RegistryError> {
        let rows = store.read(rows::all).await?;
        let summary = Summary::of(&rows);
        let registrations = registrations(rows);
        let mut capabilities = Capabilities::new();
        let invalid =
            difference(&Registrations::new(), &registrations).apply(&mut capabilities, &registrations, &policy);
        invalid.iter().for_each(warn_invalid);
        let registry = Self {
            catalog: RwLock::new(Arc::new(catalog(&configured_facets, &capabilities))),
            current: RwLock::new(Arc::new(capabilities)),
            configured_facets,
            stored: tokio::sync::Mutex::new(Followed { registrations, summary }),
            reread: tokio::sync::Notify::new(),
            store,
            policy,
            announce,
        };
        registry.load_files(files).await?;
        Ok(registry)
    }

    async fn load_files(&self, files: Vec<(PathBuf, Value)>) -> Result<(), RegistryError> {
        for (path, value) in files {
            let source = format!("file:{}", path.display());
            self.register(value, &source).await.map_err(|e| match e {
                RegistryError::Invalid(errors) => file_error(
                    &path,
                    errors.iter().map(|e| format!("{}: {}", e.path, e.message)).collect::<Vec<_>>().join("; "),
                ),
                other => other,
            })?;
        }
        Ok(())
    }

    /// Validates, persists and activates a registration (replacing one with the same id).
    pub async fn register(&self, registration: Value, source: &str) -> Result<Arc<Capability>, RegistryError> {
        let capability = Arc::new(Capability::parse(registration, &self.policy).map_err(RegistryError::Invalid)?);
        let mut stored = self.stored.lock().await;
        let now = crate::store::now();
        let row = CapabilityRow {
            capability_id: capability.id.clone(),
            version: capability.version.clone(),
            agent_type: capability.executor.executor_type(),
            kind: capability.kind,
            registration: capability.registration.to_string(),
            source: source.to_string(),
            registered_at: now,
            updated_at: now,
        };
        let text = row.registration.clone();
        let announce = self.announcement();
        self.store
            .write(move |conn| {
                rows::save(conn, row.clone())?;
                announce.as_deref().map_or(Ok(()), |node| leases::notify(conn, REGISTRATIONS, node))
            })
            .await?;
        self.change(|next| {
            next.insert(capability.id.clone(), capability.clone());
        });
        stored.registrations.insert(capability.id.clone(), text);
        Ok(capability)
    }

    /// Removes a registration and stops offering it: runs started from now on cannot plan it (a
    /// run that started before keeps the capabilities it started with). A registration stored
    /// but no longer valid (not offered) is removed too. A capabilities file registers its
    /// capability again at the next start.
    pub async fn unregister(&self, id: &str) -> Result<(), RegistryError> {
        let mut stored = self.stored.lock().await;
        if let Some(capability) = self.snapshot().get(id)
            && let Executor::Mcp(tool) = &capability.executor
        {
            return Err(RegistryError::OfMcpServer { id: id.to_string(), server: tool.server.clone() });
        }
        let owned = id.to_string();
        let announce = self.announcement();
        let removed = self
            .store
            .write(move |conn| {
                let removed = rows::remove(conn, &owned)?;
                if removed && let Some(node) = &announce {
                    leases::notify(conn, REGISTRATIONS, node)?;
                }
                Ok(removed)
            })
            .await?;
        if !removed {
            return Err(RegistryError::NotRegistered(id.to_string()));
        }
        self.change(|next| {
            next.remove(id);
        });
        stored.registrations.remove(id);
        Ok(())
    }

    /// The payload of this node's [`REGISTRATIONS`] notifications (its id, cut to fit); `None`
    /// when no other node shares the database.
    fn announcement(&self) -> Option<String> {
        self.announce.as_deref().map(|node| crate::excerpt::excerpt(node, MAX_PAYLOAD_CHARS).into_owned())
    }

    /// Asks for the stored registrations to be read again (`capability::follow` does it): another
    /// node announced a change, or this node may have missed announcements.
    pub fn reread(&self) {
        // A permit is kept until taken: asks made while a read is under way make one more read.
        self.reread.notify_one();
    }

    /// Waits until [`Self::reread`] is called (at once if it was since the last wait).
    pub async fn reread_asked(&self) {
        self.reread.notified().await;
    }

    /// Reads the stored registrations and makes the active set offer them: what another node
    /// registered is offered, what it unregistered is not any more, a registration replaced is
    /// offered as it is now (see [`super::stored::Difference::apply`]; MCP servers' tools are
    /// left as their connections set them). One stored but not valid here is warned of, once.
    /// Runs started before keep the capabilities they started with.
    pub async fn follow_stored(&self) -> Result<(), RegistryError> {
        let mut followed = self.stored.lock().await;
        let rows = self.store.read(rows::all).await?;
        let summary = Summary::of(&rows);
        let stored = registrations(rows);
        let changes = difference(&followed.registrations, &stored);
        if !changes.is_empty() {
            let mut invalid = Vec::new();
            self.change(|next| invalid = changes.apply(next, &stored, &self.policy));
            invalid.iter().for_each(warn_invalid);
            tracing::info!(
                stored = %crate::excerpt::log(changes.stored.join(", ")),
                removed = %crate::excerpt::log(changes.removed.join(", ")),
                "capability registrations changed in the database; the active set follows them"
            );
        }
        followed.registrations = stored;
        followed.summary = summary;
        Ok(())
    }

    /// Reads the stored registrations again ([`Self::follow_stored`]) if their [`Summary`] is
    /// not that of the rows read last: the cheap check `capability::follow` makes between
    /// announcements.
    pub async fn check_stored(&self) -> Result<(), RegistryError> {
        let now = self.store.read(rows::summary).await?;
        let last = self.stored.lock().await.summary;
        if last != now {
            self.follow_stored().await?;
        }
        Ok(())
    }

    /// Offers `tools` as MCP server `server`'s capabilities, in place of those it offered before.
    /// A registered capability keeps its id: a tool of the same id is not offered.
    pub fn set_tools(&self, server: &str, tools: Vec<Arc<Capability>>) {
        self.change(|next| {
            next.retain(|_, c| !matches!(&c.executor, Executor::Mcp(tool) if tool.server == server));
            for tool in tools {
                next.entry(tool.id.clone()).or_insert(tool);
            }
        });
    }

    /// Activates the set `edit` makes of the active one, with its condition catalog.
    fn change(&self, edit: impl FnOnce(&mut Capabilities)) {
        let mut current = self.current.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut next = Capabilities::clone(&current);
        edit(&mut next);
        let next_catalog = catalog(&self.configured_facets, &next);
        *current = Arc::new(next);
        *self.catalog.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(next_catalog);
    }

    /// The condition variable catalog of the active capabilities.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// The active capabilities now.
    pub fn snapshot(&self) -> Arc<Capabilities> {
        self.current.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }
}

/// Each row's registration text by id.
fn registrations(rows: Vec<CapabilityRow>) -> Registrations {
    rows.into_iter().map(|row| (row.capability_id, row.registration)).collect()
}

/// Says that a stored registration is not offered: it is skipped, the node serves on.
fn warn_invalid(invalid: &Invalid) {
    let errors = &invalid.errors;
    tracing::warn!(
        capability = %crate::excerpt::log(&invalid.capability_id),
        problems = errors.len(),
        first = %crate::excerpt::log(errors.first().map(|e| format!("{}: {}", e.path, e.message)).unwrap_or_default()),
        "stored capability registration is no longer valid; it is not active"
    );
}

fn file_error(path: &Path, message: String) -> RegistryError {
    RegistryError::File { path: path.display().to_string(), message }
}

/// The registrations of the capabilities directory: capabilities, and MCP servers (`{"mcpServer":
/// …}` files, whose tools arrive through [`Registry::set_tools`]), each by path.
pub struct RegistrationFiles {
    pub capabilities: Vec<(PathBuf, Value)>,
    pub mcp_servers: Vec<(PathBuf, Value)>,
}

impl RegistrationFiles {
    /// The `*.json` files of `dir` (none without one), in name order, read as JSON.
    pub fn read(dir: Option<&Path>) -> Result<Self, RegistryError> {
        let mut files = Self { capabilities: Vec::new(), mcp_servers: Vec::new() };
        for (path, mut value) in dir.map(registration_files).transpose()?.unwrap_or_default() {
            match value.get_mut(MCP_SERVER_KEY).map(Value::take) {
                Some(server) => files.mcp_servers.push((path, server)),
                None => files.capabilities.push((path, value)),
            }
        }
        Ok(files)
    }
}

/// The `*.json` files of `dir`, in name order, read as JSON.
pub fn registration_files(dir: &Path) -> Result<Vec<(PathBuf, Value)>, RegistryError> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| file_error(dir, e.to_string()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).map_err(|e| file_error(&path, e.to_string()))?;
            let value = serde_json::from_str(&text).map_err(|e| file_error(&path, e.to_string()))?;
            Ok((path, value))
        })
        .collect()
}
