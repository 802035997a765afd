//! The answer flexrun gives a request in place of a server's answer over the response limit
//! (`limits.max_capability_response_bytes`).
//!
//! The SDK's transport only passes on what a server says: when flexrun's client
//! ([`super::http::McpHttp`]) stops reading a body at the limit, an error of the client's would
//! reach the caller as a closed transport (an SSE stream's error is only logged), which reads as
//! "could not reach the server" — a transient failure, retried, and the tool called again. So the
//! client answers the request itself with this JSON-RPC error, and the session tells it from any
//! server's error by a mark only this process knows.

use std::sync::LazyLock;

use rmcp::model::{ErrorData, RequestId, ServerJsonRpcMessage};
use serde_json::{Map, Value};

/// The key of the mark in the answer's `data`.
const MARK: &str = "flexrun/responseTooLarge";

/// The mark's value: random, made once per process. A server cannot send it, so none can make its
/// own error pass for this one.
static TOKEN: LazyLock<String> = LazyLock::new(|| uuid::Uuid::new_v4().to_string());

/// The error answering request `id`, whose answer was larger than `limit` bytes.
pub fn answer(id: RequestId, limit: usize) -> ServerJsonRpcMessage {
    let data = Map::from_iter([(MARK.to_string(), Value::String(TOKEN.clone()))]);
    let message = format!("the server's answer is larger than {limit} bytes");
    ServerJsonRpcMessage::error(ErrorData::internal_error(message, Some(Value::Object(data))), Some(id))
}

/// Whether `error` is an [`answer`] of this process.
pub fn is_answer(error: &ErrorData) -> bool {
    error.data.as_ref().and_then(|data| data.get(MARK)).and_then(Value::as_str) == Some(TOKEN.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_is_told_from_a_servers_error_with_the_same_key() {
        let ServerJsonRpcMessage::Error(made) = answer(RequestId::Number(7), 100) else { panic!("an error") };
        assert!(is_answer(&made.error));
        assert_eq!(made.error.message, "the server's answer is larger than 100 bytes");
        let forged = ErrorData::internal_error("too large", Some(json!({MARK: "guessed"})));
        assert!(!is_answer(&forged));
        assert!(!is_answer(&ErrorData::internal_error("too large", None)));
    }
}
