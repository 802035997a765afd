//! The errors of loading settings, and how the loader's own errors are shown.

use std::net::SocketAddr;

/// Why settings could not be loaded. Each is one complete message: none has a source error that
/// would repeat it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file that does not parse, a value of the wrong type, an unknown key. Not a `source`:
    /// the message already carries the loader's error, and reports that print causes would show
    /// it twice.
    #[error("configuration: {}", describe(.0))]
    Load(config::ConfigError),
    #[error("configuration: `bind` = {value:?} is not a socket address (e.g. 127.0.0.1:8080)")]
    Bind { value: String },
    #[error(
        "configuration: refusing to listen on {bind} without API keys; set FLEXRUN_API_KEYS / \
         FLEXRUN_OPERATOR_KEYS, or `auth.allow_anonymous = true` if the network is trusted"
    )]
    AnonymousPublic { bind: SocketAddr },
    #[error(
        "configuration: `http_capabilities.allowed_url_prefixes` lists `{prefix}`, a link-local or \
         cloud-metadata address, which is refused unless `http_capabilities.allow_link_local = true`"
    )]
    LinkLocalPrefix { prefix: String },
    /// A value of the right type that flexrun cannot work with.
    #[error("configuration: `{key}` {problem}")]
    Invalid { key: &'static str, problem: String },
    #[error(
        "configuration: `llm.prices.{model:?}.{field}` = {value} is not a price (US dollars per million tokens, 0 or more)"
    )]
    Price { model: String, field: &'static str, value: f64 },
    /// An endpoint or route of the model pool that cannot work.
    #[error("configuration: `{key}` {problem}")]
    Models { key: String, problem: String },
}

impl From<config::ConfigError> for ConfigError {
    fn from(error: config::ConfigError) -> Self {
        Self::Load(error)
    }
}

/// The `config` crate's error as one message. A file that does not parse is named first: the
/// crate puts it after the parser's report, which spans several lines.
fn describe(error: &config::ConfigError) -> String {
    match error {
        config::ConfigError::FileParse { uri: Some(uri), cause } => format!("{uri}: {}", cause.to_string().trim_end()),
        other => other.to_string(),
    }
}
