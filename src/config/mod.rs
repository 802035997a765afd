//! Settings: the documented defaults in `config/flexrun.toml` (compiled in), an optional file named
//! by `FLEXRUN_CONFIG`, then the environment variables that are part of flexrun's contract.
//!
//! Loading never touches the network; a missing API key is only noticed when a model is called.

mod auth;
mod budget;
mod error;
mod llm;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::capability::UrlPrefix;
use crate::mcp::TokenVariables;
use crate::timeouts::Timeouts;
use budget::BudgetSettings;
use flexrun_core::run::decide::RunLimits;
use flexrun_core::settings::integer;

pub use auth::{AuthSettings, NamedKey, Secret, SessionSettings};
pub use error::ConfigError;
pub use flexrun_core::settings::{FacetDefinition, PlannerResponseFormat, ReplanSettings, RetrySettings};
pub use llm::{BreakerConfig, EndpointSettings, LlmSettings, RouteSettings};

/// The defaults, kept in one place: the same file documents them for operators.
const DEFAULTS: &str = include_str!("../../config/flexrun.toml");

/// All of flexrun's settings. See `config/flexrun.toml` for what each key means.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub bind: String,
    pub database_url: String,
    pub capabilities_dir: String,
    pub llm: LlmSettings,
    pub replan: ReplanSettings,
    #[serde(default)]
    budget: BudgetSettings,
    pub retry: RetrySettings,
    pub limits: Limits,
    pub auth: AuthSettings,
    pub http: HttpSettings,
    pub sessions: SessionSettings,
    pub http_capabilities: HttpCapabilitySettings,
    pub mcp: McpSettings,
    pub redaction: RedactionSettings,
    pub cluster: ClusterSettings,
    pub telemetry: TelemetrySettings,
    #[serde(default)]
    pub facets: BTreeMap<String, FacetDefinition>,
}

/// Several nodes on one PostgreSQL database (`run::lease`, `docs/scale-out.md`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSettings {
    /// Empty for the default: read it through [`Settings::node_id`].
    node_id: String,
    #[serde(deserialize_with = "integer")]
    pub lease_seconds: u64,
    #[serde(deserialize_with = "integer")]
    pub drain_seconds: u64,
    #[serde(deserialize_with = "integer")]
    pub poll_millis: u64,
}

/// OpenTelemetry traces (`crate::traces`, `docs/observability.md`). The standard `OTEL_*`
/// variables override these keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySettings {
    /// The OTLP/HTTP base URL: spans go to `<endpoint>/v1/traces`. Empty: no export.
    pub endpoint: String,
    /// The traces URL itself, used as is; wins over `endpoint`.
    pub traces_endpoint: String,
    /// Headers sent with every export, `name=value` pairs separated by commas (values
    /// percent-encoded), as `OTEL_EXPORTER_OTLP_HEADERS` has them: often a collector's key.
    pub headers: Secret,
    pub service_name: String,
    /// `always_on`, `always_off`, `traceidratio`, `parentbased_always_on`,
    /// `parentbased_always_off` or `parentbased_traceidratio`: decided once per run, at its start.
    pub sampler: String,
    /// The ratio of the `traceidratio` samplers, 0 to 1.
    pub sampler_arg: f64,
    /// Turns the export off whatever else is set (`OTEL_SDK_DISABLED=true`).
    pub disabled: bool,
    /// Prompts, outputs and tool arguments on spans (redacted); off by default.
    pub capture_message_content: bool,
    /// Spans waiting to be sent; more are dropped (and counted) rather than held.
    #[serde(deserialize_with = "integer")]
    pub queue_size: usize,
    /// The most spans one export request carries.
    #[serde(deserialize_with = "integer")]
    pub max_export_batch_size: usize,
    /// How long a span waits for others to share its export request, milliseconds.
    #[serde(deserialize_with = "integer")]
    pub schedule_delay_millis: u64,
    /// How long one export request may take, milliseconds; then its spans are dropped.
    #[serde(deserialize_with = "integer")]
    pub export_timeout_millis: u64,
}

/// Values hidden on every read path (`crate::redact`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactionSettings {
    /// Marker words added to the built-in ones.
    pub extra_keys: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(deserialize_with = "integer")]
    pub run_timeout_secs: u64,
    #[serde(deserialize_with = "integer")]
    pub max_body_bytes: usize,
    #[serde(deserialize_with = "integer")]
    pub body_read_timeout_secs: u64,
    #[serde(deserialize_with = "integer")]
    pub max_concurrent_body_reads: usize,
    #[serde(deserialize_with = "integer")]
    pub stream_page_bytes: u64,
    #[serde(deserialize_with = "integer")]
    pub stream_backlog_bytes: u64,
    #[serde(deserialize_with = "integer")]
    pub max_concurrent_nodes: usize,
    #[serde(deserialize_with = "integer")]
    pub max_plan_nodes: usize,
    #[serde(deserialize_with = "integer")]
    pub capability_timeout_secs: u64,
    #[serde(deserialize_with = "integer")]
    pub max_capability_response_bytes: usize,
    #[serde(deserialize_with = "integer")]
    pub max_clarifications_per_run: u32,
    #[serde(deserialize_with = "integer")]
    pub post_condition_max_retries: u32,
}

/// flexrun's own HTTP server (`crate::http`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    /// Host names requests may name besides addresses and loopback names (`http::site`).
    pub allowed_hosts: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpCapabilitySettings {
    /// Parsed when the settings load, so a bad entry stops the server instead of never matching.
    pub allowed_url_prefixes: Vec<UrlPrefix>,
    pub allow_link_local: bool,
    /// `http` capability calls of this node in flight at once; more wait for a free slot.
    #[serde(deserialize_with = "integer")]
    pub max_concurrent_calls: usize,
}

/// MCP servers (`docs/mcp.md`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSettings {
    /// The environment variables a registration's `bearerTokenEnv` may name; parsed when the
    /// settings load, so a bad entry stops the server.
    pub token_variables: TokenVariables,
}

/// Environment variables that override a setting, in order of preference.
const ENV_OVERRIDES: &[(&str, &[&str])] = &[
    ("bind", &["FLEXRUN_BIND"]),
    ("database_url", &["FLEXRUN_DATABASE_URL"]),
    ("capabilities_dir", &["FLEXRUN_CAPABILITIES_DIR"]),
    ("llm.base_url", &["FLEXRUN_LLM_BASE_URL", "OPENAI_BASE_URL"]),
    ("llm.api_key", &["FLEXRUN_LLM_API_KEY", "OPENAI_API_KEY"]),
    ("llm.model", &["FLEXRUN_LLM_MODEL"]),
    ("llm.max_concurrent_calls", &["FLEXRUN_LLM_MAX_CONCURRENT_CALLS"]),
    ("http_capabilities.max_concurrent_calls", &["FLEXRUN_HTTP_CAPABILITIES_MAX_CONCURRENT_CALLS"]),
    ("replan.max_goal_condition_replans", &["FLEXRUN_GOAL_CONDITION_REPLAN_LIMIT"]),
    ("cluster.node_id", &["FLEXRUN_NODE_ID"]),
    ("cluster.lease_seconds", &["FLEXRUN_LEASE_SECONDS"]),
    ("cluster.drain_seconds", &["FLEXRUN_DRAIN_SECONDS"]),
    ("telemetry.endpoint", &["OTEL_EXPORTER_OTLP_ENDPOINT"]),
    ("telemetry.traces_endpoint", &["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]),
    ("telemetry.headers", &["OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"]),
    ("telemetry.service_name", &["OTEL_SERVICE_NAME"]),
    ("telemetry.sampler", &["OTEL_TRACES_SAMPLER"]),
    ("telemetry.sampler_arg", &["OTEL_TRACES_SAMPLER_ARG"]),
    ("telemetry.disabled", &["OTEL_SDK_DISABLED"]),
    ("telemetry.capture_message_content", &["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"]),
    ("telemetry.schedule_delay_millis", &["OTEL_BSP_SCHEDULE_DELAY"]),
    ("telemetry.max_export_batch_size", &["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"]),
    ("telemetry.queue_size", &["OTEL_BSP_MAX_QUEUE_SIZE"]),
    ("telemetry.export_timeout_millis", &["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"]),
];

fn as_u64(value: usize) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// Comma-separated list variables.
const ENV_LIST_OVERRIDES: &[(&str, &str)] = &[
    ("auth.api_keys", "FLEXRUN_API_KEYS"),
    ("auth.operator_keys", "FLEXRUN_OPERATOR_KEYS"),
    ("http.allowed_hosts", "FLEXRUN_ALLOWED_HOSTS"),
    ("mcp.token_variables", "FLEXRUN_MCP_TOKEN_VARIABLES"),
];

impl Limits {
    /// The bounds the run's decisions read.
    pub fn run_limits(&self) -> RunLimits {
        RunLimits {
            max_plan_nodes: self.max_plan_nodes,
            post_condition_max_retries: self.post_condition_max_retries,
            max_clarifications_per_run: self.max_clarifications_per_run,
        }
    }
}

impl Settings {
    /// Loads the settings from the defaults, `FLEXRUN_CONFIG` and the process environment.
    pub fn load() -> Result<Self, ConfigError> {
        Self::load_from(|name| std::env::var(name).ok())
    }

    /// Loads the settings with `env` standing in for the process environment (tests, the demo).
    pub fn load_from(env: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut builder =
            config::Config::builder().add_source(config::File::from_str(DEFAULTS, config::FileFormat::Toml));
        if let Some(path) = env("FLEXRUN_CONFIG").filter(|p| !p.is_empty()) {
            builder = builder.add_source(config::File::new(&path, config::FileFormat::Toml));
        }
        for (key, names) in ENV_OVERRIDES {
            let value = names.iter().find_map(|name| env(name).filter(|v| !v.is_empty()));
            builder = builder.set_override_option(*key, value)?;
        }
        for (key, name) in ENV_LIST_OVERRIDES {
            if let Some(list) = env(name) {
                let items: Vec<String> =
                    list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
                builder = builder.set_override(*key, items)?;
            }
        }
        let settings: Settings = builder.build()?.try_deserialize()?;
        settings.check()?;
        Ok(settings)
    }

    fn check(&self) -> Result<(), ConfigError> {
        self.check_values()?;
        self.prices()?;
        self.budget()?;
        self.auth.check()?;
        self.telemetry.check()?;
        let bind = self.bind_addr()?;
        if !self.auth.enabled() && !self.auth.allow_anonymous && !bind.ip().is_loopback() {
            return Err(ConfigError::AnonymousPublic { bind });
        }
        // A prefix nothing could ever be registered under is a mistake to report, not to keep.
        let http = &self.http_capabilities;
        if let Some(prefix) = http
            .allowed_url_prefixes
            .iter()
            .find(|p| !http.allow_link_local && p.address().is_some_and(crate::capability::is_link_local_or_metadata))
        {
            return Err(ConfigError::LinkLocalPrefix { prefix: prefix.to_string() });
        }
        Ok(())
    }

    /// Values that would only fail later, at run time and as if the failure were transient: a
    /// model URL that is not one, a limit of zero.
    fn check_values(&self) -> Result<(), ConfigError> {
        let invalid = |key, problem: &str| Err(ConfigError::Invalid { key, problem: problem.to_string() });
        match url::Url::parse(&self.llm.base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {}
            _ => {
                let shown = crate::excerpt::excerpt(&self.llm.base_url, 100);
                return invalid(
                    "llm.base_url",
                    &format!("= {shown:?} is not an http(s) URL (e.g. https://api.openai.com/v1)"),
                );
            }
        }
        let limits = &self.limits;
        let positive = [
            ("llm.timeout_secs", self.llm.timeout_secs),
            ("llm.max_response_bytes", as_u64(self.llm.max_response_bytes)),
            ("llm.max_concurrent_calls", as_u64(self.llm.max_concurrent_calls)),
            ("http_capabilities.max_concurrent_calls", as_u64(self.http_capabilities.max_concurrent_calls)),
            ("limits.max_body_bytes", as_u64(limits.max_body_bytes)),
            ("limits.body_read_timeout_secs", limits.body_read_timeout_secs),
            ("limits.max_concurrent_body_reads", as_u64(limits.max_concurrent_body_reads)),
            ("limits.stream_page_bytes", limits.stream_page_bytes),
            ("limits.stream_backlog_bytes", limits.stream_backlog_bytes),
            ("limits.max_concurrent_nodes", as_u64(limits.max_concurrent_nodes)),
            ("limits.max_plan_nodes", as_u64(limits.max_plan_nodes)),
            ("limits.capability_timeout_secs", limits.capability_timeout_secs),
            ("limits.run_timeout_secs", limits.run_timeout_secs),
            ("limits.max_capability_response_bytes", as_u64(limits.max_capability_response_bytes)),
            ("cluster.lease_seconds", self.cluster.lease_seconds),
            ("cluster.poll_millis", self.cluster.poll_millis),
            ("sessions.max_per_principal", as_u64(self.sessions.max_per_principal)),
            ("sessions.sign_in_attempts_per_minute", self.sessions.sign_in_attempts_per_minute.into()),
        ];
        if let Some((key, _)) = positive.into_iter().find(|(_, value)| *value == 0) {
            return invalid(key, "must be at least 1");
        }
        // NaN reads as valid TOML (`nan`) and from the environment; a delay made of it would stop
        // the run that waits on it.
        let delay = self.retry.base_delay_secs;
        if !(delay.is_finite() && delay >= 0.0) {
            return invalid("retry.base_delay_secs", &format!("= {delay} is not a number of seconds (0 or more)"));
        }
        Ok(())
    }

    /// This node's name on a shared PostgreSQL database (leases, health, metrics; held by
    /// `run::lease::identity`): as configured, or `<host>-<port>` of `bind`.
    ///
    /// The default names the node, not the process: a node restarted on its host and port has
    /// the same name, so it takes back the runs it leased before at once instead of after their
    /// leases run out. Two live processes on one host cannot listen on one port, so they get two
    /// names — unless they listen on the same port of two addresses, and then the second refuses
    /// to start until it is given a name. A port of 0 is picked anew by the kernel at every start:
    /// it names nothing, and the default is then `<host>-<pid>`, unique but not stable.
    pub fn node_id(&self) -> String {
        if !self.cluster.node_id.is_empty() {
            return self.cluster.node_id.clone();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "node".into());
        match self.bind_addr() {
            Ok(bind) if bind.port() != 0 => format!("{host}-{}", bind.port()),
            _ => format!("{host}-{}", std::process::id()),
        }
    }

    /// The listen address.
    pub fn bind_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.bind.parse().map_err(|_| ConfigError::Bind { value: self.bind.clone() })
    }

    /// The configured timeouts, which an envelope's `timeouts` may override.
    pub fn timeouts(&self) -> Timeouts {
        let seconds = |value: u64| std::time::Duration::from_secs(value.max(1));
        Timeouts {
            run: seconds(self.limits.run_timeout_secs),
            model_call: seconds(self.llm.timeout_secs),
            capability_call: seconds(self.limits.capability_timeout_secs),
        }
    }

    /// The capability registration directory, if one is configured.
    pub fn capabilities_dir(&self) -> Option<PathBuf> {
        (!self.capabilities_dir.is_empty()).then(|| PathBuf::from(&self.capabilities_dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flexrun_core::budget::BudgetDefaults;
    use flexrun_core::usage::Micros;
    use std::collections::HashMap;

    fn load(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::load_from(|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let s = load(&[]).unwrap();
        assert_eq!(s.bind, "127.0.0.1:8080");
        assert_eq!(s.database_url, "sqlite://flexrun.db");
        assert_eq!(s.replan.max_goal_condition_replans, 2);
        assert_eq!(s.replan.max_replans, 4);
        assert!(!s.auth.enabled());
        assert!(s.capabilities_dir().is_none());
    }

    #[test]
    fn contract_environment_variables_override() {
        let s = load(&[
            ("FLEXRUN_BIND", "127.0.0.1:9999"),
            ("OPENAI_BASE_URL", "http://fallback/v1"),
            ("FLEXRUN_LLM_API_KEY", "sk-test"),
            ("OPENAI_API_KEY", "sk-other"),
            ("FLEXRUN_GOAL_CONDITION_REPLAN_LIMIT", "5"),
            ("FLEXRUN_API_KEYS", "a, b,"),
        ])
        .unwrap();
        assert_eq!(s.bind, "127.0.0.1:9999");
        assert_eq!(s.llm.base_url, "http://fallback/v1");
        assert_eq!(s.llm.api_key.expose(), "sk-test");
        assert_eq!(s.replan.max_goal_condition_replans, 5);
        assert_eq!(s.auth.api_keys, vec![Secret::new("a"), Secret::new("b")]);
    }

    #[test]
    fn secrets_do_not_print() {
        let s = load(&[("FLEXRUN_LLM_API_KEY", "sk-very-secret")]).unwrap();
        assert!(!format!("{s:?}").contains("sk-very-secret"));
    }

    fn load_file(toml: &str) -> Result<Settings, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("flexrun.toml");
        std::fs::write(&path, toml).unwrap();
        load(&[("FLEXRUN_CONFIG", path.to_str().unwrap())])
    }

    #[test]
    fn budget_defaults_are_read_and_bad_ones_name_their_key() {
        assert_eq!(load(&[]).unwrap().budget().unwrap(), BudgetDefaults::default(), "no budget by default");
        let s =
            load_file("[budget]\ndefault_max_cost_usd = 0.5\ndefault_max_model_calls = 20\nceiling_max_cost_usd = 2\n")
                .unwrap();
        let budget = s.budget().unwrap();
        assert_eq!((budget.max_cost_usd, budget.max_model_calls), (Some(Micros(500_000)), Some(20)));
        assert_eq!(budget.ceiling_max_cost_usd, Some(Micros(2_000_000)));
        for (file, key) in [
            ("[budget]\ndefault_max_cost_usd = -1\n", "budget.default_max_cost_usd"),
            ("[budget]\nceiling_max_cost_usd = 0\n", "budget.ceiling_max_cost_usd"),
            ("[budget]\ndefault_max_tokens = 0\n", "budget.default_max_tokens"),
            ("[budget]\ndefault_max_cost_usd = 3\nceiling_max_cost_usd = 2\n", "budget.default_max_cost_usd"),
        ] {
            let error = shown(load_file(file).unwrap_err());
            assert!(error.contains(&format!("`{key}`")), "{file}: {error}");
        }
    }

    #[test]
    fn prices_are_read_per_model_and_a_bad_one_names_its_key() {
        let s = load_file(
            "[llm.prices.\"gpt-4.1-mini\"]\ninput_per_mtok = 0.4\noutput_per_mtok = 1.6\ncached_input_per_mtok = 0.1\n\
             [llm.prices.local]\ninput_per_mtok = 0\noutput_per_mtok = 0\n",
        )
        .unwrap();
        let prices = s.prices().unwrap();
        let mini = prices.of(None, "gpt-4.1-mini").expect("a model name with dots is one key");
        assert_eq!((mini.input, mini.output, mini.cached_input), (Micros(400_000), Micros(1_600_000), Micros(100_000)));
        let local = prices.of(Some("local"), "other").unwrap();
        assert_eq!(local.cached_input, local.input, "the cached price defaults to the input price");
        assert!(load(&[]).unwrap().prices().unwrap().of(None, "gpt-4o-mini").is_none(), "no prices by default");

        let negative = shown(load_file("[llm.prices.m]\ninput_per_mtok = -1\noutput_per_mtok = 1\n").unwrap_err());
        assert!(negative.contains("`llm.prices.\"m\".input_per_mtok` = -1 is not a price"), "{negative}");
        let text = shown(load_file("[llm.prices.m]\ninput_per_mtok = \"cheap\"\noutput_per_mtok = 1\n").unwrap_err());
        assert!(text.contains("input_per_mtok"), "{text}");
        let unknown = shown(load_file("[llm.prices.m]\ninput = 1\noutput_per_mtok = 1\n").unwrap_err());
        assert!(unknown.contains("unknown field `input`"), "{unknown}");
    }

    #[test]
    fn allowed_url_prefixes_are_parsed_when_the_settings_load() {
        let s = load_file(
            "[http_capabilities]\nallowed_url_prefixes = [\"https://tools.internal/api\", \"http://[::1]:8080\"]\n",
        )
        .unwrap();
        let prefixes = &s.http_capabilities.allowed_url_prefixes;
        assert_eq!(
            prefixes,
            &[UrlPrefix::parse("https://tools.internal/api").unwrap(), UrlPrefix::parse("http://[::1]:8080/").unwrap()]
        );
        assert!(!s.http_capabilities.allow_link_local, "refused by default");

        for (entry, says) in [
            ("localhost", "is not a URL"),
            ("ftp://tools/", "scheme `ftp`"),
            ("http://tools/?x=1", "query string"),
            ("http://user:pw@tools/", "credentials"),
        ] {
            let toml = format!("[http_capabilities]\nallowed_url_prefixes = [\"https://ok/\", {entry:?}]\n");
            let err = load_file(&toml).unwrap_err().to_string();
            assert!(err.contains(entry) && err.contains(says), "{entry}: {err}");
            assert!(err.contains("http_capabilities.allowed_url_prefixes"), "{entry}: names the key: {err}");
            let report = format!("{:#}", anyhow::Error::from(load_file(&toml).unwrap_err()));
            assert_eq!(report.matches(entry).count(), 1, "said once: {report}");
        }
    }

    #[test]
    fn mcp_token_variables_are_parsed_when_the_settings_load() {
        let defaults = load(&[]).unwrap().mcp.token_variables;
        assert!(defaults.allows("CALC_MCP_TOKEN") && !defaults.allows("FLEXRUN_API_KEYS"), "{defaults}");
        let listed = load(&[("FLEXRUN_MCP_TOKEN_VARIABLES", "GITHUB_TOKEN, SEARCH_*")]).unwrap().mcp.token_variables;
        assert_eq!(listed.to_string(), "GITHUB_TOKEN, SEARCH_*");
        assert!(!listed.allows("CALC_MCP_TOKEN"), "the list replaces the default");
        let err = load_file("[mcp]\ntoken_variables = [\"*_MCP_TOKEN\", \"A*B\"]\n").unwrap_err().to_string();
        assert!(err.contains("mcp.token_variables") && err.contains("\"A*B\""), "{err}");
    }

    #[test]
    fn a_link_local_prefix_needs_allow_link_local() {
        let listed = "[http_capabilities]\nallowed_url_prefixes = [\"http://169.254.169.254/\"]\n";
        let err = load_file(listed).unwrap_err();
        assert!(matches!(err, ConfigError::LinkLocalPrefix { .. }), "{err}");
        assert!(err.to_string().contains("allow_link_local"), "{err}");
        let allowed = load_file(&format!("{listed}allow_link_local = true\n")).unwrap();
        assert!(allowed.http_capabilities.allow_link_local);
    }

    /// The message an error prints with its causes (as `flexrun` shows it).
    fn shown(error: ConfigError) -> String {
        format!("{:#}", anyhow::Error::from(error))
    }

    #[test]
    fn a_bad_configuration_is_one_message() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        };
        let unknown = file("unknown.toml", "bnd = \"127.0.0.1:1\"\n");
        let message = shown(load(&[("FLEXRUN_CONFIG", &unknown)]).unwrap_err());
        assert!(message.starts_with("configuration: unknown field `bnd`, expected one of `bind`"), "{message}");
        assert_eq!(message.matches("unknown field").count(), 1, "{message}");

        let syntax = file("syntax.toml", "bind = \n");
        let message = shown(load(&[("FLEXRUN_CONFIG", &syntax)]).unwrap_err());
        assert!(
            message.starts_with("configuration: ") && message.contains("syntax.toml: TOML parse error"),
            "{message}"
        );
        assert_eq!(message.matches("TOML parse error").count(), 1, "{message}");
        assert!(!message.ends_with('\n'), "{message:?}");

        let message = shown(load(&[("FLEXRUN_GOAL_CONDITION_REPLAN_LIMIT", "many")]).unwrap_err());
        assert_eq!(
            message,
            "configuration: invalid type: string \"many\", expected an integer for key \
             `replan.max_goal_condition_replans`"
        );
        let missing = dir.path().join("missing.toml").display().to_string();
        let message = shown(load(&[("FLEXRUN_CONFIG", &missing)]).unwrap_err());
        assert_eq!(message, format!("configuration: configuration file {missing:?} not found"));
    }

    #[test]
    fn values_flexrun_cannot_work_with_are_refused_when_loading() {
        for url in ["localhost:8000/v1", "not a url", "ftp://models.example/v1", "http://"] {
            let message = shown(load(&[("FLEXRUN_LLM_BASE_URL", url)]).unwrap_err());
            assert!(message.starts_with("configuration: `llm.base_url` = "), "{url}: {message}");
        }
        let long = format!("http://{}", "x".repeat(100_000));
        assert!(load(&[("FLEXRUN_LLM_BASE_URL", "http://127.0.0.1:9/v1")]).is_ok());
        let message = shown(load(&[("FLEXRUN_LLM_BASE_URL", &format!("{long} x"))]).unwrap_err());
        assert!(message.len() < 400, "a bad URL is quoted in part: {} bytes", message.len());

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zero.toml");
        std::fs::write(&path, "[limits]\nmax_concurrent_body_reads = 0\n").unwrap();
        let message = shown(load(&[("FLEXRUN_CONFIG", &path.display().to_string())]).unwrap_err());
        assert_eq!(message, "configuration: `limits.max_concurrent_body_reads` must be at least 1");
        for delay in ["nan", "inf", "-1.5"] {
            std::fs::write(&path, format!("[retry]\nbase_delay_secs = {delay}\n")).unwrap();
            let message = shown(load(&[("FLEXRUN_CONFIG", &path.display().to_string())]).unwrap_err());
            assert!(message.starts_with("configuration: `retry.base_delay_secs` = "), "{delay}: {message}");
        }
        std::fs::write(&path, "[retry]\nbase_delay_secs = 0.5\n").unwrap();
        assert!(load(&[("FLEXRUN_CONFIG", &path.display().to_string())]).is_ok());
    }

    /// The keys of the integer settings the documented defaults set (`llm.breaker.failures`), and
    /// those they leave unset.
    fn integer_keys() -> Vec<String> {
        fn walk(table: &config::Map<String, config::Value>, at: &str, keys: &mut Vec<String>) {
            for (name, value) in table {
                let key = if at.is_empty() { name.clone() } else { format!("{at}.{name}") };
                match &value.kind {
                    config::ValueKind::Table(inner) => walk(inner, &key, keys),
                    config::ValueKind::I64(_) | config::ValueKind::U64(_) => keys.push(key),
                    _ => {}
                }
            }
        }
        let defaults = config::Source::collect(&config::File::from_str(DEFAULTS, config::FileFormat::Toml)).unwrap();
        let mut keys = Vec::new();
        walk(&defaults, "", &mut keys);
        assert!(keys.len() >= 30 && keys.iter().any(|k| k == "llm.breaker.failures"), "{keys:?}");
        let unset = ["budget.default_max_tokens", "budget.default_max_model_calls"];
        keys.extend(unset.map(String::from));
        keys.extend(["timeout_secs", "max_concurrent_calls"].map(|k| format!("llm.endpoints.local.{k}")));
        keys
    }

    /// A file setting `key` to `value` (an endpoint named with what it must have besides).
    fn setting(key: &str, value: &str) -> String {
        let (table, name) = key.rsplit_once('.').unwrap();
        let endpoint = if table.starts_with("llm.endpoints.") { "base_url = \"http://127.0.0.1:9/v1\"\n" } else { "" };
        format!("[{table}]\n{endpoint}{name} = {value}\n")
    }

    #[test]
    fn an_integer_setting_takes_only_an_integer_and_a_refusal_names_it() {
        let message = shown(load_file("[budget]\ndefault_max_tokens = 1.5\n").unwrap_err());
        assert_eq!(
            message,
            "configuration: invalid type: floating point `1.5`, expected an integer for key `budget.default_max_tokens`"
        );
        for key in integer_keys() {
            assert!(load_file(&setting(&key, "7")).is_ok(), "{key} = 7");
            // `2.0` too: a setting is an integer or not, whatever the fraction.
            for value in ["1.5", "2.0", "-1", "true", "1e3", "\"yes\""] {
                let message = shown(load_file(&setting(&key, value)).unwrap_err());
                assert!(message.ends_with(&format!(" for key `{key}`")), "{key} = {value}: {message}");
                assert!(message.contains("expected an integer"), "{key} = {value}: {message}");
            }
        }
        let message = shown(load_file("[limits]\nmax_clarifications_per_run = 4294967296\n").unwrap_err());
        assert_eq!(
            message,
            "configuration: invalid value: integer `4294967296`, expected an integer from 0 to 4294967295 for key \
             `limits.max_clarifications_per_run`"
        );
    }

    #[test]
    fn an_integer_variable_takes_only_decimal_digits_and_a_refusal_names_its_setting() {
        let integers = integer_keys();
        let variables: Vec<(&str, &str)> = ENV_OVERRIDES
            .iter()
            .filter(|(key, _)| integers.iter().any(|k| k == key))
            .flat_map(|(key, names)| names.iter().map(move |name| (*key, *name)))
            .collect();
        assert!(variables.len() >= 9, "{variables:?}");
        let long = "9".repeat(100_000);
        for (key, name) in variables {
            assert!(load(&[(name, "7")]).is_ok(), "{name}=7");
            for value in ["1.5", "2.0", "yes", "on", "true", "-1", " 7", "", &long] {
                if value.is_empty() {
                    assert!(load(&[(name, value)]).is_ok(), "an empty variable is not set");
                    continue;
                }
                let message = shown(load(&[(name, value)]).unwrap_err());
                assert!(message.ends_with(&format!(" for key `{key}`")), "{name}={value}: {message}");
                assert!(message.len() < 300, "{name}: a long value is quoted in part: {message}");
            }
        }
        let message = shown(load(&[("FLEXRUN_LEASE_SECONDS", "1.5")]).unwrap_err());
        assert_eq!(
            message,
            "configuration: invalid type: string \"1.5\", expected an integer for key `cluster.lease_seconds`"
        );
    }

    #[test]
    fn key_lists_read_otherwise_than_meant_are_refused() {
        let refused = |vars: &[(&str, &str)]| shown(load(vars).unwrap_err());
        assert_eq!(
            refused(&[("FLEXRUN_API_KEYS", "bob:k0,al ice:k1")]),
            "configuration: `auth.api_keys` entry 2 contains white space or a control character"
        );
        assert_eq!(
            refused(&[("FLEXRUN_OPERATOR_KEYS", "ops:")]),
            "configuration: `auth.operator_keys` entry 1 has a name but no key (`name:key`)"
        );
        let both = refused(&[("FLEXRUN_API_KEYS", "alice:k1"), ("FLEXRUN_OPERATOR_KEYS", "ops:k1")]);
        assert_eq!(
            both,
            "configuration: `auth.operator_keys` and `auth.api_keys` list the same key: a key has one role"
        );
        let named = refused(&[("FLEXRUN_API_KEYS", "alice:k1"), ("FLEXRUN_OPERATOR_KEYS", "alice:k2")]);
        assert!(named.contains("both name `alice`"), "{named}");
        let twice = refused(&[("FLEXRUN_API_KEYS", "a:k1,b:k1")]);
        assert_eq!(twice, "configuration: `auth.api_keys` lists one key twice");
        for message in [both, twice] {
            assert!(!message.contains("k1"), "a key is never shown: {message}");
        }
        assert!(load(&[("FLEXRUN_API_KEYS", "alice:k1,alice:k2"), ("FLEXRUN_OPERATOR_KEYS", "ops:k3")]).is_ok());
        let long = format!("{}:k1", "a".repeat(65));
        for entry in ["alice@corp.com:k1", long.as_str()] {
            let message = refused(&[("FLEXRUN_API_KEYS", entry)]);
            assert!(
                message.starts_with("configuration: `auth.api_keys` entry 1 names its key with other"),
                "{message}"
            );
            assert!(!message.contains("k1") && !message.contains("alice"), "an entry is never shown: {message}");
        }
        assert!(load(&[("FLEXRUN_API_KEYS", "alice:k1:with:colons,nameless")]).is_ok());
    }

    #[test]
    fn the_default_node_id_is_the_host_and_the_port_it_listens_on() {
        let host = load(&[]).unwrap().node_id().strip_suffix("-8080").expect("ends with the port").to_string();
        assert!(!host.is_empty());
        assert_eq!(load(&[("FLEXRUN_BIND", "127.0.0.1:9999")]).unwrap().node_id(), format!("{host}-9999"));
        let picked = load(&[("FLEXRUN_BIND", "127.0.0.1:0")]).unwrap().node_id();
        assert_eq!(picked, format!("{host}-{}", std::process::id()), "a port the kernel picks names nothing");
        let named = load(&[("FLEXRUN_BIND", "127.0.0.1:9999"), ("FLEXRUN_NODE_ID", "pod-3")]).unwrap();
        assert_eq!(named.node_id(), "pod-3");
    }

    #[test]
    fn public_bind_without_keys_is_refused() {
        let err = load(&[("FLEXRUN_BIND", "0.0.0.0:8080")]).unwrap_err();
        assert!(matches!(err, ConfigError::AnonymousPublic { .. }), "{err}");
        assert!(load(&[("FLEXRUN_BIND", "0.0.0.0:8080"), ("FLEXRUN_API_KEYS", "k")]).is_ok());
    }
}
