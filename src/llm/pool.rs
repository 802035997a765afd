//! The model pool: the named OpenAI-compatible endpoints (`[llm.endpoints.<name>]`, the `[llm]`
//! settings as `default`), each with its own client, call slots and circuit breaker, and the
//! routes (`[llm.routes]`) that chain their models. A call goes along its chain as
//! [`flexrun_core::llm::route`] says: to the first entry whose breaker admits it, on to the next
//! on a rate limit, an outage or a timeout, never on a content error. Each entry left behind is a
//! [`Fallback`], which the run records as a `retry` frame.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use flexrun_core::llm::route::{
    Admission, AfterFailure, Breaker, BreakerSettings, RouteEntry, after_failure, first_repeat,
};
use flexrun_core::usage::{Fallback, Metered};

use std::sync::Arc;

use super::{ChatRequest, ClientSettings, LlmClient, LlmError};
use crate::config::{ConfigError, EndpointSettings, LlmSettings, PlannerResponseFormat};
use crate::validation::FieldError;
use flexrun_core::usage::Prices;

/// The longest `Retry-After` a rate-limited entry is waited for before its chain moves on.
pub const PATIENCE: Duration = Duration::from_secs(2);

/// An endpoint of the pool.
pub struct Endpoint {
    pub name: String,
    client: LlmClient,
    /// The models it serves (none listed: any).
    models: Vec<String>,
    /// The longest a call to it may take (`timeout_secs`).
    timeout: Duration,
    /// How the planner asks this endpoint for a structured answer (local servers differ).
    pub planner_format: PlannerResponseFormat,
    breaker: Mutex<Breaker>,
}

/// What an endpoint is made of.
pub struct EndpointSetup {
    pub name: String,
    pub client: LlmClient,
    pub models: Vec<String>,
    pub timeout: Duration,
    pub planner_format: PlannerResponseFormat,
}

/// A call made along a chain: its result, with the usage of the entry that answered (which it
/// names) and the entries it left behind ([`Metered::fallbacks`]).
pub struct Routed {
    pub called: Metered<Result<String, LlmError>>,
    pub answered_by: Option<RouteEntry>,
}

/// The chains calls go along (`[llm.routes]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routes {
    pub planner: Vec<RouteEntry>,
    /// `ai` capabilities without `preferredModels` of their own.
    pub capabilities: Vec<RouteEntry>,
}

/// The endpoint `[llm]` configures.
pub const DEFAULT: &str = "default";

/// Every endpoint, and the breaker settings they share.
pub struct ModelPool {
    endpoints: BTreeMap<String, Endpoint>,
    breaker: BreakerSettings,
}

impl ModelPool {
    pub fn new(endpoints: Vec<EndpointSetup>, breaker: BreakerSettings) -> Self {
        let endpoints = endpoints
            .into_iter()
            .map(|setup| {
                let EndpointSetup { name, client, models, timeout, planner_format } = setup;
                let breaker = Mutex::default();
                let endpoint = Endpoint { name: name.clone(), client, models, timeout, planner_format, breaker };
                (name, endpoint)
            })
            .collect();
        Self { endpoints, breaker }
    }

    /// The pool and the routes `settings` describe, each endpoint's key read from the variable it
    /// names (`env`); every problem is refused at start with its key.
    pub fn configure(
        settings: &LlmSettings,
        prices: Prices,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(Self, Routes), ConfigError> {
        let configured = Arc::new(configured_models(settings, &prices));
        let prices = Arc::new(prices);
        let problem = |key: String, problem: String| ConfigError::Models { key, problem };
        let client = |settings: &ClientSettings<'_>| {
            LlmClient::new(settings, prices.clone(), configured.clone())
                .map_err(|e| problem(format!("llm.endpoints.{}", settings.name), e.to_string()))
        };
        let mut setups = vec![EndpointSetup {
            name: DEFAULT.into(),
            client: client(&LlmClient::default_settings(settings))?,
            models: Vec::new(),
            timeout: Duration::from_secs(settings.timeout_secs.max(1)),
            planner_format: settings.planner_response_format,
        }];
        let mut served: BTreeMap<&str, &[String]> = BTreeMap::from([(DEFAULT, [].as_slice())]);
        for (name, endpoint) in &settings.endpoints {
            setups.push(named(settings, name, endpoint, &env, &client)?);
            served.insert(name, &endpoint.models);
        }
        let chain = |key: &str, entries: &Option<Vec<String>>| -> Result<Vec<RouteEntry>, ConfigError> {
            let Some(entries) = entries else {
                return Ok(vec![RouteEntry { endpoint: DEFAULT.into(), model: settings.model.clone() }]);
            };
            if entries.is_empty() {
                return Err(problem(format!("llm.routes.{key}"), "is empty: a route needs at least one entry".into()));
            }
            let chain = entries
                .iter()
                .enumerate()
                .map(|(i, text)| entry(&served, &format!("llm.routes.{key}[{i}]"), text))
                .collect::<Result<Vec<_>, _>>()?;
            match first_repeat(&chain) {
                Some((i, earlier)) => Err(problem(format!("llm.routes.{key}[{i}]"), repeated(&chain[i], earlier))),
                None => Ok(chain),
            }
        };
        let routes = Routes {
            planner: chain("planner", &settings.routes.planner)?,
            capabilities: chain("capabilities", &settings.routes.capabilities)?,
        };
        let breaker = BreakerSettings {
            failures: settings.breaker.failures.max(1),
            cool_down: Duration::from_secs(settings.breaker.cool_down_secs),
        };
        Ok((Self::new(setups, breaker), routes))
    }

    /// A chain of `entries` (a capability's `preferredModels`, an envelope's narrowing): each
    /// `<endpoint>/<model>` the pool has, none repeated; the error says which is not. (A
    /// capability file is not refused at start for its chain: this is where a repeat is caught.)
    pub fn chain(&self, entries: &[String]) -> Result<Vec<RouteEntry>, String> {
        let chain = self.served(entries)?;
        match first_repeat(&chain) {
            Some((i, earlier)) => Err(format!("entry {i} {}", repeated(&chain[i], earlier))),
            None => Ok(chain),
        }
    }

    /// Each of `entries` as an entry the pool serves; the error says which is not.
    fn served(&self, entries: &[String]) -> Result<Vec<RouteEntry>, String> {
        entries
            .iter()
            .map(|text| {
                let entry = RouteEntry::parse(text).ok_or_else(|| format!("{text:?} is not `<endpoint>/<model>`"))?;
                match self.endpoints.get(&entry.endpoint) {
                    Some(endpoint) if endpoint.serves(&entry.model) => Ok(entry),
                    Some(_) => Err(format!("endpoint `{}` does not serve model `{}`", entry.endpoint, entry.model)),
                    None => Err(format!("no model endpoint is named `{}`", entry.endpoint)),
                }
            })
            .collect()
    }

    /// The problems of `entries` given at `at` (an envelope's `policies.models`, a capability's
    /// `preferredModels`): each entry this pool does not serve, and the first that repeats an
    /// earlier one, with its pointer.
    pub fn check(&self, entries: &[String], at: &str) -> Vec<FieldError> {
        let mut problems: Vec<FieldError> = entries
            .iter()
            .enumerate()
            .filter_map(|(i, entry)| {
                let problem = self.served(std::slice::from_ref(entry)).err()?;
                Some(FieldError::new(format!("{at}/{i}"), "unknown_model", problem))
            })
            .collect();
        if let Ok(chain) = self.served(entries)
            && let Some((i, earlier)) = first_repeat(&chain)
        {
            problems.push(FieldError::new(format!("{at}/{i}"), "repeated_model", repeated(&chain[i], earlier)));
        }
        problems
    }

    pub fn endpoint(&self, name: &str) -> Option<&Endpoint> {
        self.endpoints.get(name)
    }

    /// Each endpoint's breaker state (`closed`, `open`, `half_open`), by name.
    pub fn states(&self) -> Vec<(String, &'static str)> {
        let now = Instant::now();
        self.endpoints.values().map(|e| (e.name.clone(), e.breaker().state(now))).collect()
    }

    /// Calls along `chain`; `request` builds the call for an endpoint and a model (the
    /// planner's answer format is the endpoint's). An entry whose breaker is open is passed by; a
    /// rate limit, an outage or a timeout moves on to the next entry; an answer — or a content
    /// error, which another endpoint would not change — ends the call.
    pub async fn complete<'r>(
        &self,
        chain: &'r [RouteEntry],
        request: impl Fn(&Endpoint, &'r str) -> ChatRequest<'r>,
    ) -> Routed {
        let mut fallbacks: Vec<(RouteEntry, LlmError)> = Vec::new();
        let mut last = None;
        for (index, entry) in chain.iter().enumerate() {
            let Some(endpoint) = self.endpoints.get(&entry.endpoint) else { continue };
            let admission = endpoint.admit();
            if admission == Admission::Skip {
                continue;
            }
            let slot = endpoint.client.slot().await;
            // The wait for a slot may be long (calls queue there when many runs are open) and the
            // breaker may have opened meanwhile: a call admitted before is asked again, so the
            // queue behind a dead endpoint falls over instead of waiting out its timeouts.
            let admission = if admission == Admission::Call { endpoint.admit() } else { admission };
            if admission == Admission::Skip {
                continue;
            }
            let probe = Probe { endpoint, pending: admission == Admission::Probe };
            let mut call = request(endpoint, &entry.model);
            call.timeout = call.timeout.min(endpoint.timeout);
            let called = slot.complete(call).await;
            probe.ended();
            let failure = called.result.as_ref().err().map(|error| (after_failure(error, PATIENCE), error.clone()));
            match failure {
                // An answer, or a content error: the endpoint works.
                None | Some((AfterFailure::Stop, _)) => {
                    endpoint.record(true, self.breaker);
                    let mut called = Metered { fallbacks: linked(fallbacks, Some(entry)), ..called };
                    if let Some(usage) = &mut called.usage {
                        usage.route = Some(entry.to_string());
                    }
                    return Routed { called, answered_by: Some(entry.clone()) };
                }
                Some((AfterFailure::NextEntry { wait }, error)) => {
                    // An outage counts against the breaker; a refused key or model is the endpoint
                    // answering (skipping it would only hide the refusal behind "cooling down").
                    endpoint.record(!error.is_transient(), self.breaker);
                    fallbacks.push((entry.clone(), error));
                    last = Some(called);
                    // A short Retry-After is honoured before the next entry; after the last, the
                    // run's own retry waits it out (and records it).
                    if index + 1 < chain.len() && !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                }
            }
        }
        let called = last.unwrap_or_else(|| {
            Metered::unmetered(Err(LlmError::Connection(
                "every endpoint of the route is cooling down after failures (its circuit breaker is open)".into(),
            )))
        });
        // The last failure is the call's own: nothing was tried after it.
        let last_tried = fallbacks.pop().map(|(entry, _)| entry);
        Routed { called: Metered { fallbacks: linked(fallbacks, last_tried.as_ref()), ..called }, answered_by: None }
    }
}

/// A probing call on its way: dropped before it ended (the call's future dropped with its run or
/// step), it gives the probe up, so the next call probes again instead of the endpoint being
/// skipped for good.
struct Probe<'a> {
    endpoint: &'a Endpoint,
    pending: bool,
}

impl Probe<'_> {
    /// The call ended: its outcome is recorded by the caller.
    fn ended(mut self) {
        self.pending = false;
    }
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        if self.pending {
            let now = Instant::now();
            let mut breaker = self.endpoint.breaker();
            breaker.abandon_probe(now);
            crate::telemetry::model_endpoint_state(&self.endpoint.name, breaker.state(now));
        }
    }
}

/// Each entry left behind with the one tried after it: the next that failed, or `then` (the
/// one that answered, or failed last).
fn linked(failed: Vec<(RouteEntry, LlmError)>, then: Option<&RouteEntry>) -> Vec<Fallback> {
    let nexts: Vec<Option<String>> = failed
        .iter()
        .skip(1)
        .map(|(entry, _)| Some(entry.to_string()))
        .chain([then.map(ToString::to_string)])
        .collect();
    failed
        .into_iter()
        .zip(nexts)
        .map(|((entry, error), next)| Fallback { failed: entry.to_string(), next, error: error.to_string() })
        .collect()
}

/// Every model name the configuration holds: `[llm].model`, the endpoints' `models`, the routes'
/// entries and the priced models.
fn configured_models(settings: &LlmSettings, prices: &Prices) -> BTreeSet<String> {
    let routes = [&settings.routes.planner, &settings.routes.capabilities];
    let routed = routes.into_iter().flatten().flatten().filter_map(|text| RouteEntry::parse(text)).map(|e| e.model);
    let listed = settings.endpoints.values().flat_map(|endpoint| endpoint.models.iter().cloned());
    let priced = prices.models().map(String::from);
    [settings.model.clone()].into_iter().chain(routed).chain(listed).chain(priced).collect()
}

/// Why a chain's entry that repeats entry `earlier` is refused.
fn repeated(entry: &RouteEntry, earlier: usize) -> String {
    format!(
        "repeats `{entry}` (entry {earlier}): a chain tries each entry once, and the run's retries go along it again"
    )
}

/// A named endpoint, checked: its URL, its key's variable, its bounds.
fn named(
    defaults: &LlmSettings,
    name: &str,
    endpoint: &EndpointSettings,
    env: &impl Fn(&str) -> Option<String>,
    client: &impl Fn(&ClientSettings<'_>) -> Result<LlmClient, ConfigError>,
) -> Result<EndpointSetup, ConfigError> {
    let key = |field: &str| format!("llm.endpoints.{name}.{field}");
    let problem = |field: &str, problem: String| ConfigError::Models { key: key(field), problem };
    if name == DEFAULT || RouteEntry::parse(&format!("{name}/m")).is_none_or(|e| e.endpoint != name) {
        return Err(ConfigError::Models {
            key: format!("llm.endpoints.{name}"),
            problem:
                "is not an endpoint name: 1 to 64 letters, digits, `-` or `_`, and not `default` (that is `[llm]`)"
                    .into(),
        });
    }
    match url::Url::parse(&endpoint.base_url) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {}
        _ => return Err(problem("base_url", "is not an http(s) URL (e.g. https://api.openai.com/v1)".into())),
    }
    let api_key = match &endpoint.api_key_env {
        None => String::new(),
        Some(variable) => env(variable).filter(|k| !k.is_empty()).ok_or_else(|| {
            problem("api_key_env", format!("names the environment variable {variable}, which is not set"))
        })?,
    };
    let timeout_secs = endpoint.timeout_secs.unwrap_or(defaults.timeout_secs);
    let max_concurrent_calls = endpoint.max_concurrent_calls.unwrap_or(defaults.max_concurrent_calls);
    if timeout_secs == 0 || max_concurrent_calls == 0 {
        return Err(problem("timeout_secs", "and max_concurrent_calls must be at least 1".into()));
    }
    let settings = ClientSettings {
        name,
        base_url: &endpoint.base_url,
        api_key: &api_key,
        max_response_bytes: defaults.max_response_bytes,
        max_concurrent_calls,
    };
    Ok(EndpointSetup {
        name: name.to_string(),
        client: client(&settings)?,
        models: endpoint.models.clone(),
        timeout: Duration::from_secs(timeout_secs),
        planner_format: endpoint.planner_response_format.unwrap_or(defaults.planner_response_format),
    })
}

/// A route's entry at `key`, naming an endpoint the pool has and a model it serves.
fn entry(served: &BTreeMap<&str, &[String]>, key: &str, text: &str) -> Result<RouteEntry, ConfigError> {
    let problem = |problem: String| ConfigError::Models { key: key.to_string(), problem };
    let entry = RouteEntry::parse(text).ok_or_else(|| problem(format!("= {text:?} is not `<endpoint>/<model>`")))?;
    match served.get(entry.endpoint.as_str()) {
        None => Err(problem(format!("names endpoint `{}`, which `[llm.endpoints]` does not have", entry.endpoint))),
        Some(models) if !models.is_empty() && !models.contains(&entry.model) => {
            Err(problem(format!("names model `{}`, which endpoint `{}` does not list", entry.model, entry.endpoint)))
        }
        Some(_) => Ok(entry),
    }
}

impl Endpoint {
    /// Whether it serves `model` (an endpoint that lists none serves any).
    fn serves(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|m| m == model)
    }

    fn breaker(&self) -> std::sync::MutexGuard<'_, Breaker> {
        self.breaker.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn admit(&self) -> Admission {
        let now = Instant::now();
        let mut breaker = self.breaker();
        let admission = breaker.admit(now);
        crate::telemetry::model_endpoint_state(&self.name, breaker.state(now));
        admission
    }

    fn record(&self, succeeded: bool, settings: BreakerSettings) {
        let now = Instant::now();
        let mut breaker = self.breaker();
        breaker.record(succeeded, now, settings);
        crate::telemetry::model_endpoint_state(&self.name, breaker.state(now));
    }
}
