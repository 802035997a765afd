//! The composition root: every long-lived part of a flexrun server, built once at start-up and
//! shared by the HTTP handlers and the run coordinators.

use crate::traces::Traces;
use std::sync::Arc;
use std::time::Duration;

use crate::budget::BudgetDefaults;
use crate::capability::{
    AddressGuard, EndpointAllowlist, Executors, GuardedResolver, HttpLimits, RegistrationFiles, Registry, RegistryError,
};
use crate::config::Settings;
use crate::events::Bus;
use crate::facet::{FacetCatalog, FacetCatalogError};
use crate::llm::pool::ModelPool;
use crate::mcp::{McpPolicy, McpRegistryError, McpServers, Publish};
use crate::planner::Planner;
use crate::redact::Redaction;
use crate::run::backlog::Backlogs;
use crate::run::lease::claims::{Claims, Leasing};
use crate::run::lease::identity::{Identity, IdentityError};
use crate::run::state::RunState;
use crate::store::{Store, StoreError};

/// Whole-run reads (`Services::run_reads`) at once: a few keep the CPU busy; more only add memory.
const RUN_READS: usize = 4;

/// Sees the state of a run after each commit of its log. Tests use it to check that a live
/// run's state equals the fold of its committed log at every step.
pub type CommitObserver = Arc<dyn Fn(&RunState) + Send + Sync>;

/// What tests put in place of parts a server builds itself. A server uses `Hooks::default()`.
#[derive(Default)]
pub struct Hooks {
    /// Sees every commit of every run's log.
    pub observer: Option<CommitObserver>,
    /// Resolves the host names of `http` capabilities instead of the system resolver, so tests
    /// can give names chosen addresses without DNS. What it answers is checked all the same.
    pub lookup: Option<Arc<dyn reqwest::dns::Resolve>>,
}

/// Why the server's long-lived parts could not be set up: the database, the capability
/// registry, the facet catalog or an HTTP client.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    McpServers(#[from] McpRegistryError),
    #[error(transparent)]
    FacetCatalog(#[from] FacetCatalogError),
    #[error("cannot set up an HTTP client: {0}")]
    HttpClient(#[from] reqwest::Error),
    #[error(transparent)]
    ModelClient(#[from] crate::llm::ClientError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

pub struct Services {
    pub settings: Settings,
    pub store: Store,
    pub bus: Arc<Bus>,
    pub registry: Arc<Registry>,
    /// The registered MCP servers (their tools are in the registry).
    pub mcp: McpServers,
    /// The model endpoints, with their breakers (health shows them).
    pub models: Arc<ModelPool>,
    pub planner: Planner,
    pub executors: Executors,
    pub facets: FacetCatalog,
    /// The configured budget defaults and ceiling (`[budget]`).
    pub budget: BudgetDefaults,
    /// What no read path shows (`crate::redact`).
    pub redaction: Redaction,
    /// What streams hold of run logs their clients have not taken yet, bounded per node.
    pub backlogs: Arc<Backlogs>,
    /// Reads that fold a whole run's log at once (`run::view`), bounded in number: each holds
    /// the run's state while it is built, so many at once would hold many runs' worth.
    pub run_reads: tokio::sync::Semaphore,
    /// The runs whose log this process writes, and how to stop the task writing one.
    pub claims: Arc<Claims>,
    /// The node id this process holds on a shared database (PostgreSQL); `None` alone (SQLite).
    pub identity: Option<Identity>,
    /// Sees every commit of every run's log (tests); a server has none.
    pub commit_observer: Option<CommitObserver>,
    /// The runtime run coordinators are spawned on (the HTTP workers run their own).
    pub runtime: tokio::runtime::Handle,
    /// Where runs' spans go (`[telemetry]`); off without an endpoint.
    pub traces: Traces,
}

impl Services {
    /// Opens the database (migrating it), takes this node's id on PostgreSQL (refusing to start
    /// if a live process holds it), loads capabilities and prepares the model clients. Makes no
    /// network call but to the database. Must be called from within the runtime that will drive
    /// runs.
    pub async fn start(settings: Settings) -> Result<Arc<Self>, SetupError> {
        Self::start_with(settings, Hooks::default()).await
    }

    /// [`Self::start`], with `hooks` in place of the parts they replace.
    pub async fn start_with(settings: Settings, hooks: Hooks) -> Result<Arc<Self>, SetupError> {
        // Run coordinators submit most writes: with SQLite their runtime commits them itself.
        let store = Store::open_on(&settings.database_url, &tokio::runtime::Handle::current())?;
        // Several nodes may share a PostgreSQL database: runs are leased there, by a node id this
        // process proves it alone holds before it serves anything. SQLite has one node.
        #[cfg(feature = "postgres")]
        let identity =
            if store.is_postgres() { Some(crate::run::lease::identity::take(&settings).await?) } else { None };
        #[cfg(not(feature = "postgres"))]
        let identity: Option<Identity> = None;
        let leasing = match &identity {
            Some(identity) => Some(Leasing {
                node: identity.node().to_string(),
                lease: Duration::from_secs(settings.cluster.lease_seconds),
                since: store.read(crate::store::leases::now).await?,
            }),
            None => None,
        };
        let facets = FacetCatalog::new(settings.facets.clone())?;
        let addresses = AddressGuard { allow_link_local: settings.http_capabilities.allow_link_local };
        let policy = EndpointAllowlist {
            allowed_url_prefixes: settings.http_capabilities.allowed_url_prefixes.clone(),
            addresses,
        };
        let configured = settings.facets.iter().filter_map(|(f, d)| d.schema.clone().map(|s| (f.clone(), s))).collect();
        let files = RegistrationFiles::read(settings.capabilities_dir().as_deref())?;
        // On a shared database, each change of the registrations is announced to the other nodes.
        let announce = identity.as_ref().map(|identity| identity.node().to_string());
        let registry =
            Arc::new(Registry::load(store.clone(), policy.clone(), configured, files.capabilities, announce).await?);
        let (pool, routes) = ModelPool::configure(&settings.llm, settings.prices()?, |name| std::env::var(name).ok())?;
        let models = Arc::new(pool);
        let planner = Planner::new(models.clone(), routes.planner.clone());
        let llm = (models.clone(), routes.capabilities.clone());
        let limits = HttpLimits {
            max_response_bytes: settings.limits.max_capability_response_bytes,
            max_concurrent_calls: settings.http_capabilities.max_concurrent_calls,
        };
        let executors = match hooks.lookup {
            Some(lookup) => Executors::with_resolver(llm, limits, GuardedResolver::new(lookup, addresses))?,
            None => Executors::new(llm, limits, addresses)?,
        };
        let publish: Publish = {
            let registry = registry.clone();
            Arc::new(move |server: &str, tools| registry.set_tools(server, tools))
        };
        let http = executors.http_client();
        let policy = McpPolicy { endpoints: policy, token_variables: settings.mcp.token_variables.clone() };
        let mcp = McpServers::load(store.clone(), policy, http, limits.max_response_bytes, publish, files.mcp_servers)
            .await?;
        let executors = executors.with_mcp(mcp.clone());
        let redaction = Redaction::new(&settings.redaction.extra_keys);
        let backlogs = Backlogs::new(settings.limits.stream_backlog_bytes);
        let budget = settings.budget()?;
        let traces = Traces::start(&settings.telemetry, redaction.clone())?;
        Ok(Arc::new(Self {
            settings,
            store,
            bus: Arc::new(Bus::default()),
            registry,
            mcp,
            models,
            planner,
            executors,
            facets,
            budget,
            redaction,
            backlogs,
            run_reads: tokio::sync::Semaphore::new(RUN_READS),
            claims: Arc::new(Claims::new(leasing)),
            identity,
            commit_observer: hooks.observer,
            runtime: tokio::runtime::Handle::current(),
            traces,
        }))
    }
}
