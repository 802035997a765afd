//! The registry of active capabilities: loaded from the database and `FLEXRUN_CAPABILITIES_DIR` at
//! start, extended by the register endpoint, persisted on every change. Readers take a cheap
//! snapshot, so a run plans and executes against one consistent set.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde_json::Value;

use super::{Capabilities, Capability, EndpointAllowlist, Executor, catalog};

/// The top-level key of a registration file that registers an MCP server.
pub const MCP_SERVER_KEY: &str = "mcpServer";
use crate::condition::dsl::Catalog;
use crate::store::capabilities::{self as rows, CapabilityRow};
use crate::store::{Store, StoreError};
use crate::validation::FieldError;

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
    /// Serialises registrations so the database and the active set change in the same order.
    registering: tokio::sync::Mutex<()>,
    store: Store,
    policy: EndpointAllowlist,
}

impl Registry {
    /// Loads stored registrations, then (re-)registers `files` (the capability registrations of
    /// the capabilities directory, by path).
    pub async fn load(
        store: Store,
        policy: EndpointAllowlist,
        configured_facets: Vec<(String, Value)>,
        files: Vec<(PathBuf, Value)>,
    ) -> Result<Self, RegistryError> {
        let stored = store.read(rows::all).await?;
        let mut capabilities = Capabilities::new();
        for row in stored {
            match serde_json::from_str(&row.registration)
                .map_err(|e| vec![FieldError::new("", "json", e.to_string())])
                .and_then(|value| Capability::parse(value, &policy))
            {
                Ok(capability) => {
                    capabilities.insert(capability.id.clone(), Arc::new(capability));
                }
                Err(errors) => tracing::warn!(
                    capability = %crate::excerpt::log(&row.capability_id),
                    problems = errors.len(),
                    first = %crate::excerpt::log(errors.first().map(|e| format!("{}: {}", e.path, e.message)).unwrap_or_default()),
                    "stored capability registration is no longer valid; it is not active"
                ),
            }
        }
        let registry = Self {
            catalog: RwLock::new(Arc::new(catalog(&configured_facets, &capabilities))),
            current: RwLock::new(Arc::new(capabilities)),
            configured_facets,
            registering: tokio::sync::Mutex::new(()),
            store,
            policy,
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
        let _registering = self.registering.lock().await;
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
        self.store.write(move |conn| rows::save(conn, row.clone())).await?;
        self.change(|next| {
            next.insert(capability.id.clone(), capability.clone());
        });
        Ok(capability)
    }

    /// Removes a registration and stops offering it: runs started from now on cannot plan it (a
    /// run that started before keeps the capabilities it started with). A registration stored
    /// but no longer valid (not offered) is removed too. A capabilities file registers its
    /// capability again at the next start.
    pub async fn unregister(&self, id: &str) -> Result<(), RegistryError> {
        let _registering = self.registering.lock().await;
        if let Some(capability) = self.snapshot().get(id)
            && let Executor::Mcp(tool) = &capability.executor
        {
            return Err(RegistryError::OfMcpServer { id: id.to_string(), server: tool.server.clone() });
        }
        let owned = id.to_string();
        if !self.store.write(move |conn| rows::remove(conn, &owned)).await? {
            return Err(RegistryError::NotRegistered(id.to_string()));
        }
        self.change(|next| {
            next.remove(id);
        });
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
