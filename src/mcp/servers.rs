//! The registered MCP servers of this node: each kept in the database, watched by a task that
//! opens a session, lists the tools and offers the allowed ones as capabilities — at
//! registration, at start-up, when the server says its list changed and every `refreshSecs` —
//! and the calls of plan nodes to their tools.
//!
//! A server that cannot be reached does not stop anything: its state says why, and its task
//! tries again (sooner at first). Tools listed before stay offered while a server is away — also
//! across restarts: the last list is stored, so that runs resumed at start find their tools — and
//! a call that cannot reach the server is a transient failure, retried like an `http` call's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, watch};

use super::client::{Called, McpError, Round, Session};
use super::listing;
use crate::store::Store;
use crate::store::mcp_servers::{self as rows, McpServerRow};
use crate::validation::FieldError;
use flexrun_core::capability::{Capability, CapabilityError, ContextBundle, Reply, Signal};
use flexrun_core::mcp::question::{self, InputRequired};
use flexrun_core::mcp::{McpPolicy, McpServer, McpTool, ToolDescription, arguments, tool};

/// Receives a server's tools as capabilities, whenever they are listed (the capability registry).
pub type Publish = Arc<dyn Fn(&str, Vec<Arc<Capability>>) + Send + Sync>;

/// How long listing a server's tools may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the stored registrations are read again: several nodes share one database, and a
/// server registered through one node is offered by every node within this time.
const RESYNC: Duration = Duration::from_secs(10);

/// The first wait before trying an unreachable server again; doubled up to its refresh period.
const FIRST_RETRY: Duration = Duration::from_millis(500);

/// How many times in a row a server may answer a call with nothing but state to echo (an
/// `input_required` result without a question) before the call fails.
const MAX_STATE_ROUNDS: usize = 4;

/// Why a registration was refused.
#[derive(Debug, thiserror::Error)]
pub enum McpRegistryError {
    #[error("invalid MCP server registration: {} problem(s)", .0.len())]
    Invalid(Vec<FieldError>),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// What a server is doing now, as `GET /mcp-servers` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "snake_case", rename_all_fields = "camelCase")]
pub enum ServerState {
    /// Not answered yet.
    Connecting,
    Ready {
        protocol: Option<String>,
        listed_at: DateTime<Utc>,
    },
    Unreachable {
        error: String,
        tried_at: DateTime<Utc>,
    },
}

struct Entry {
    server: Arc<McpServer>,
    source: String,
    /// Watched by a registration waiting for the server's first answer.
    state: watch::Sender<ServerState>,
    session: Option<Arc<Session>>,
    /// The tool list as last stored (JSON), written again only when it changes.
    listed: Option<String>,
    /// Tool name → its capability, as last listed (and offered).
    tools: BTreeMap<String, Arc<Capability>>,
    /// Listed tools not offered, and why.
    refused: Vec<String>,
    changed: Arc<Notify>,
    watcher: Option<tokio::task::AbortHandle>,
}

struct Inner {
    store: Store,
    policy: McpPolicy,
    http: reqwest::Client,
    max_response_bytes: usize,
    publish: Publish,
    servers: Mutex<BTreeMap<String, Entry>>,
    /// Stored registrations this node found invalid (warned of once).
    invalid: Mutex<std::collections::BTreeSet<String>>,
}

/// The registered MCP servers. Cheap to clone.
#[derive(Clone)]
pub struct McpServers {
    inner: Arc<Inner>,
}

impl McpServers {
    /// The servers stored, then those of `files` (`{"mcpServer": …}` in the capabilities
    /// directory), each watched from now on; none is waited for.
    pub async fn load(
        store: Store,
        policy: McpPolicy,
        http: reqwest::Client,
        max_response_bytes: usize,
        publish: Publish,
        files: Vec<(std::path::PathBuf, Value)>,
    ) -> Result<Self, McpRegistryError> {
        let inner = Inner {
            store,
            policy,
            http,
            max_response_bytes,
            publish,
            servers: Mutex::new(BTreeMap::new()),
            invalid: Mutex::default(),
        };
        let servers = Self { inner: Arc::new(inner) };
        servers.sync(servers.inner.store.read(rows::all).await?);
        for (path, registration) in files {
            let source = format!("file:{}", path.display());
            servers.add(&registration, &source).await.map_err(|e| match e {
                McpRegistryError::Invalid(errors) => McpRegistryError::Invalid(
                    errors
                        .into_iter()
                        .map(|e| FieldError { path: format!("{source}: /mcpServer{}", e.path), ..e })
                        .collect(),
                ),
                other => other,
            })?;
        }
        tokio::spawn(servers.clone().follow_the_database());
        Ok(servers)
    }

    /// Watches every stored server this node does not watch yet, or under another registration
    /// (one registered through another node).
    fn sync(&self, stored: Vec<McpServerRow>) {
        for row in stored {
            let parsed = serde_json::from_str(&row.registration).ok().map(|v| McpServer::parse(&v, &self.inner.policy));
            match parsed {
                Some(Ok(server)) => {
                    if !self.entries().get(&server.id).is_some_and(|entry| *entry.server == server) {
                        self.watch(server, row.source, row.tools);
                    }
                }
                _ => {
                    let mut invalid = self.inner.invalid.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                    if invalid.insert(row.registration) {
                        tracing::warn!(
                            server = %crate::excerpt::log(&row.server_id),
                            "stored MCP server registration is not valid here; its tools are not offered"
                        );
                    }
                }
            }
        }
    }

    /// Reads the stored registrations again every [`RESYNC`].
    async fn follow_the_database(self) {
        loop {
            tokio::time::sleep(RESYNC).await;
            match self.inner.store.read(rows::all).await {
                Ok(stored) => self.sync(stored),
                Err(error) => tracing::warn!(%error, "could not read the MCP server registrations"),
            }
        }
    }

    /// Validates, stores and watches a registration (replacing one with the same id), then waits
    /// for the server's first answer — within a bound — so that the caller sees its tools.
    pub async fn register(&self, registration: &Value, source: &str) -> Result<Value, McpRegistryError> {
        let id = self.add(registration, source).await?;
        let state = self.entries().get(&id).map(|entry| entry.state.subscribe());
        if let Some(mut state) = state {
            let answered = state.wait_for(|state| !matches!(state, ServerState::Connecting));
            let _ = tokio::time::timeout(super::client::CONNECT_TIMEOUT + LIST_TIMEOUT, answered).await;
        }
        Ok(self.listing(&id).unwrap_or(Value::Null))
    }

    /// Validates, stores and watches a registration; its id. The same registration again changes
    /// nothing (a file read at every start keeps the tools stored and its server's session).
    async fn add(&self, registration: &Value, source: &str) -> Result<String, McpRegistryError> {
        let server = McpServer::parse(registration, &self.inner.policy).map_err(McpRegistryError::Invalid)?;
        if self.entries().get(&server.id).is_some_and(|entry| *entry.server == server) {
            return Ok(server.id);
        }
        let now = crate::store::now();
        let row = McpServerRow {
            server_id: server.id.clone(),
            registration: registration.to_string(),
            source: source.to_string(),
            registered_at: now,
            updated_at: now,
            tools: None,
        };
        self.inner.store.write(move |conn| rows::save(conn, row.clone())).await?;
        let id = server.id.clone();
        self.watch(server, source.to_string(), None);
        Ok(id)
    }

    /// Every server, as `GET /mcp-servers` shows it: no header value, no token.
    pub fn list(&self) -> Vec<Value> {
        let entries = self.entries();
        entries.values().map(shown).collect()
    }

    /// Whether `capability_id` names a tool of a registered server (`<serverId>.<tool>`), offered
    /// or not: a plan's step whose capability is gone was such a tool when this says so.
    pub fn names_a_tool(&self, capability_id: &str) -> bool {
        capability_id.split_once('.').is_some_and(|(server, _)| self.entries().contains_key(server))
    }

    fn listing(&self, id: &str) -> Option<Value> {
        self.entries().get(id).map(shown)
    }

    fn entries(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        self.inner.servers.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts (or restarts) the task that keeps `server`'s tools listed; the tools `stored`
    /// (as last listed, JSON) are offered until the server answers.
    fn watch(&self, server: McpServer, source: String, stored: Option<String>) {
        let id = server.id.clone();
        let changed = Arc::new(Notify::new());
        let listed: Vec<Value> = stored.as_deref().and_then(|text| serde_json::from_str(text).ok()).unwrap_or_default();
        let (tools, refused) = offered(&server, listed);
        let entry = Entry {
            server: Arc::new(server),
            source,
            state: watch::Sender::new(ServerState::Connecting),
            session: None,
            listed: stored,
            tools,
            refused,
            changed: changed.clone(),
            watcher: None,
        };
        let offered: Vec<Arc<Capability>> = entry.tools.values().cloned().collect();
        let replaced = self.entries().insert(id.clone(), entry);
        if let Some(watcher) = replaced.and_then(|old| old.watcher) {
            watcher.abort();
        }
        (self.inner.publish)(&id, offered);
        let task = tokio::spawn(self.clone().keep_listed(id.clone(), changed));
        if let Some(entry) = self.entries().get_mut(&id) {
            entry.watcher = Some(task.abort_handle());
        }
    }

    /// Lists the tools now, then again whenever the server says they changed or the refresh
    /// period has passed; an unreachable server is tried again sooner.
    async fn keep_listed(self, id: String, changed: Arc<Notify>) {
        let mut retry = FIRST_RETRY;
        loop {
            let Some(server) = self.entries().get(&id).map(|e| e.server.clone()) else { return };
            let wait = match self.refresh(&server, &changed).await {
                Ok(()) => {
                    retry = FIRST_RETRY;
                    server.refresh
                }
                Err(error) => {
                    self.set_state(&id, ServerState::Unreachable { error: error.to_string(), tried_at: Utc::now() });
                    self.drop_session(&id);
                    let wait = retry.min(server.refresh);
                    retry = (retry * 2).min(server.refresh);
                    wait
                }
            };
            tokio::select! {
                () = changed.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn refresh(&self, server: &McpServer, changed: &Arc<Notify>) -> Result<(), McpError> {
        let session = self.session(server, changed.clone()).await?;
        let listing = tokio::time::timeout(LIST_TIMEOUT, listing::read(&session, server)).await;
        let listing = listing.map_err(|_| McpError::Timeout(LIST_TIMEOUT))??;
        let text = serde_json::to_string(&listing.tools).unwrap_or_default();
        let (tools, mut refused) = offered(server, listing.tools);
        // First: the reasons after it may be cut short, this one never.
        refused.splice(0..0, listing.stopped);
        let offered: Vec<Arc<Capability>> = tools.values().cloned().collect();
        let changed_list = {
            let mut entries = self.entries();
            let Some(entry) = entries.get_mut(&server.id) else { return Ok(()) };
            entry.tools = tools;
            entry.refused = refused;
            entry.state.send_replace(ServerState::Ready { protocol: session.protocol(), listed_at: Utc::now() });
            let changed_list = entry.listed.as_deref() != Some(text.as_str());
            if changed_list {
                entry.listed = Some(text.clone());
            }
            changed_list
        };
        (self.inner.publish)(&server.id, offered);
        if changed_list {
            let id = server.id.clone();
            let stored = self.inner.store.write(move |conn| rows::set_tools(conn, &id, &text)).await;
            if let Err(error) = stored {
                tracing::warn!(server = %crate::excerpt::log(&server.id), %error, "could not store the MCP server's tool list");
            }
        }
        Ok(())
    }

    /// The server's open session, or a new one.
    async fn session(&self, server: &McpServer, changed: Arc<Notify>) -> Result<Arc<Session>, McpError> {
        if let Some(session) = self.entries().get(&server.id).and_then(|e| e.session.clone()) {
            return Ok(session);
        }
        let session =
            Arc::new(Session::open(server, self.inner.http.clone(), self.inner.max_response_bytes, changed).await?);
        if let Some(entry) = self.entries().get_mut(&server.id) {
            entry.session = Some(session.clone());
        }
        Ok(session)
    }

    fn set_state(&self, id: &str, state: ServerState) {
        if let Some(entry) = self.entries().get(id) {
            entry.state.send_replace(state);
        }
    }

    fn drop_session(&self, id: &str) {
        let session = self.entries().get_mut(id).and_then(|e| e.session.take());
        if let Some(session) = session.and_then(Arc::into_inner) {
            tokio::spawn(session.close());
        }
    }

    /// Calls `tool` for the node `bundle` describes: its arguments completed from the node's
    /// facets, the run, node and attempt in `_meta`, the operator's answer when the tool asked a
    /// question before. The result as the node's output facet, or the tool's (next) question.
    pub async fn call(
        &self,
        tool: &McpTool,
        facet: &str,
        bundle: &ContextBundle,
        timeout: Duration,
    ) -> Result<Reply, CapabilityError> {
        let (server, changed, offered) = {
            let entries = self.entries();
            let entry = entries.get(&tool.server);
            let unavailable =
                || CapabilityError::ToolUnavailable(format!("MCP server `{}` is not registered", tool.server));
            let entry = entry.ok_or_else(unavailable)?;
            (entry.server.clone(), entry.changed.clone(), entry.tools.contains_key(&tool.name))
        };
        if !offered {
            let message = format!("MCP server `{}` no longer offers tool `{}`", tool.server, tool.name);
            return Err(CapabilityError::ToolUnavailable(message));
        }
        let arguments = match &bundle.arguments {
            Some(arguments) => arguments::resolve(arguments, |facet| bundle.inputs.get(facet))
                .map_err(|e| CapabilityError::ArgumentUnresolved(e.to_string()))?,
            None => Value::Object(Map::new()),
        };
        let Value::Object(arguments) = arguments else {
            return Err(CapabilityError::ArgumentUnresolved("the arguments, resolved, are not a JSON object".into()));
        };
        let mut meta = Map::from_iter([
            ("flexrun/runId".to_string(), json!(bundle.run_id)),
            ("flexrun/nodeId".to_string(), json!(bundle.node_id)),
            ("flexrun/attempt".to_string(), json!(bundle.attempt)),
        ]);
        // The step's span, as the OpenTelemetry MCP conventions carry it: in `_meta`.
        if let Some(scope) = crate::traces::SpanScope::current() {
            meta.insert("traceparent".to_string(), json!(scope.traceparent()));
        }
        // One deadline for the whole call: opening a session counts against it too.
        let timeout = server.timeout.min(timeout);
        let deadline = tokio::time::Instant::now() + timeout;
        let opening = by(deadline, timeout, self.session(&server, changed)).await;
        let session = opening.map_err(|error| self.unreachable(&server.id, error))?;
        let mut round = bundle.tool_answer.as_ref().map_or_else(Round::default, |answer| Round {
            input_responses: Some(answer.input_responses()),
            request_state: answer.request_state.clone(),
        });
        for _ in 0..MAX_STATE_ROUNDS {
            let called = session.call(&tool.name, arguments.clone(), meta.clone(), round, timeout);
            let asked = match by(deadline, timeout, called).await {
                Ok(Called::Result(result)) => return tool::output(tool, facet, &result).map(Reply::Output),
                Ok(Called::InputRequired(asked)) => asked,
                Err(McpError::Refused(message)) => return Err(CapabilityError::Protocol(message)),
                // As an `http` capability's answer over the limit: not retried, and the session,
                // which only lost the connection that carried the answer, is kept.
                Err(McpError::TooLarge(limit)) => return Err(CapabilityError::TooLarge(limit)),
                Err(error) => return Err(self.unreachable(&server.id, error)),
            };
            match question::read(&asked)? {
                InputRequired::Question(question) => {
                    let context = Some(question.context());
                    return Ok(Reply::Signal(Signal::Clarify { question: question.message, context }));
                }
                InputRequired::StateOnly(state) => round = Round { input_responses: None, request_state: Some(state) },
            }
        }
        Err(CapabilityError::Protocol(format!(
            "the server asked to be called again {MAX_STATE_ROUNDS} times without a result or a question"
        )))
    }

    /// A call that could not reach the server: its session is dropped (the next call opens a new
    /// one) and the failure is transient.
    fn unreachable(&self, id: &str, error: McpError) -> CapabilityError {
        self.drop_session(id);
        match error {
            McpError::Timeout(after) => CapabilityError::Timeout(after),
            other => CapabilityError::Connection(other.to_string()),
        }
    }
}

/// `work`, failed as a timeout after `timeout` once `deadline` has passed.
async fn by<T>(
    deadline: tokio::time::Instant,
    timeout: Duration,
    work: impl Future<Output = Result<T, McpError>>,
) -> Result<T, McpError> {
    tokio::time::timeout_at(deadline, work).await.unwrap_or(Err(McpError::Timeout(timeout)))
}

/// How many reasons for tools not offered a server's listing shows; the rest are counted. A
/// server may list thousands of tools: every listing (the API, the console) would carry a line
/// for each.
const MAX_REFUSED_SHOWN: usize = 20;

/// The tools of `listed` that `server` offers, by name, and why the others that it would offer
/// are not (the first [`MAX_REFUSED_SHOWN`], then how many more).
fn offered(server: &McpServer, listed: Vec<Value>) -> (BTreeMap<String, Arc<Capability>>, Vec<String>) {
    let mut tools = BTreeMap::new();
    let mut refused = Vec::new();
    for value in listed {
        let description: ToolDescription = match serde_json::from_value(value) {
            Ok(description) => description,
            Err(error) => {
                let error = crate::excerpt::excerpt(&error.to_string(), crate::excerpt::MESSAGE).into_owned();
                refused.push(format!("a tool the server describes unreadably: {error}"));
                continue;
            }
        };
        if !server.tools.offers(&description.name) {
            continue;
        }
        if tools.len() == tool::MAX_TOOLS {
            let name = crate::excerpt::excerpt(&description.name, tool::NAME_SHOWN);
            refused.push(format!("`{name}`: more than {} tools", tool::MAX_TOOLS));
            continue;
        }
        let name = description.name.clone();
        match tool::capability(server, description) {
            Ok(capability) => {
                tools.insert(name, Arc::new(capability));
            }
            Err(error) => refused.push(error.to_string()),
        }
    }
    if refused.len() > MAX_REFUSED_SHOWN {
        let more = refused.len() - MAX_REFUSED_SHOWN;
        refused.truncate(MAX_REFUSED_SHOWN);
        refused.push(format!("… and {more} more tools not offered"));
    }
    (tools, refused)
}

/// A server as the API shows it.
fn shown(entry: &Entry) -> Value {
    let server = &entry.server;
    let mut shown = json!({
        "id": server.id,
        "url": flexrun_core::redact::url(server.url.as_str()),
        "headers": server.headers().keys().collect::<Vec<_>>(),
        "bearerTokenEnv": server.bearer_token_env,
        "source": entry.source,
        "toolCount": entry.tools.len(),
        "tools": entry.tools.values().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        "refusedTools": entry.refused,
        "timeoutSecs": server.timeout.as_secs(),
        "refreshSecs": server.refresh.as_secs(),
    });
    let state = serde_json::to_value(&*entry.state.borrow());
    if let (Value::Object(shown), Ok(Value::Object(state))) = (&mut shown, state) {
        shown.extend(state);
    }
    shown
}
