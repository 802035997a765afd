//! The error codes of the HTTP API: the `code` of every `{"error": {"code", "message",
//! "details"}}` the server answers with, each declared once, here, with its HTTP status and
//! what it means to a client. The core's refusals carry them, so the server's one error mapping
//! (`http::error`) takes a response's status from its code, and the OpenAPI document lists
//! them; a code cannot be answered with one status here and another there, nor be missing from
//! the document.

/// Declares [`ErrorCode`] from one list: each code's variant, its wire name, its HTTP status and
/// its description (which is also the variant's documentation).
macro_rules! error_codes {
    ($($code:ident => $name:literal, $status:literal, $description:literal;)+) => {
        /// An error code of the HTTP API.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $(#[doc = $description] $code),+
        }

        impl ErrorCode {
            /// Every code, in declaration order (the OpenAPI document lists them).
            pub const ALL: &'static [ErrorCode] = &[$(Self::$code),+];

            /// The `code` of the error body.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$code => $name),+
                }
            }

            /// The HTTP status of a response with this code.
            pub fn status(self) -> u16 {
                match self {
                    $(Self::$code => $status),+
                }
            }

            /// What the code tells a client, in one line.
            pub fn description(self) -> &'static str {
                match self {
                    $(Self::$code => $description),+
                }
            }
        }
    };
}

error_codes! {
    // 400: the request is malformed.
    InvalidJson => "invalid_json", 400,
        "The request body is not valid JSON.";
    InvalidBody => "invalid_body", 400,
        "The request body could not be read to its end.";
    InvalidRequest => "invalid_request", 400,
        "The request body breaks the endpoint's rules; `details` say where when they can.";
    InvalidEnvelope => "invalid_envelope", 400,
        "The task envelope is not valid; `details` list every problem.";
    InvalidConditionDsl => "invalid_condition_dsl", 400,
        "A condition expression does not compile; `details` give each error and its range.";
    InvalidCapability => "invalid_capability", 400,
        "The capability registration is not valid; `details` list every problem.";
    InvalidMcpServer => "invalid_mcp_server", 400,
        "The MCP server registration is not valid; `details` list every problem.";
    InvalidQuery => "invalid_query", 400,
        "A query parameter is unknown, malformed or out of its range.";
    InvalidPath => "invalid_path", 400,
        "A path segment is not of the form the endpoint takes.";
    InvalidUrl => "invalid_url", 400,
        "The URL contains the NUL character (`%00`).";
    InvalidCorrelationId => "invalid_correlation_id", 400,
        "`X-Correlation-Id` (or, as a detail of `invalid_envelope`, `metadata.correlationId`) is not 1 to 200 visible ASCII characters.";
    InvalidIdempotencyKey => "invalid_idempotency_key", 400,
        "`Idempotency-Key` is not 1 to 255 visible ASCII characters.";
    InvalidLastEventId => "invalid_last_event_id", 400,
        "`Last-Event-ID` is not an id of an event the stream sent.";
    InvalidThreadId => "invalid_thread_id", 400,
        "The thread id is not one a thread can have.";
    DecisionRequired => "decision_required", 400,
        "The run waits for a decision on a request: send `decision`.";
    HumanPayloadRequired => "human_payload_required", 400,
        "The run waits for a human node's output: send `payload` with `output` or `decline`.";
    WrongNode => "wrong_node", 400,
        "The payload is for another human node than the one the run waits for.";
    AnswerRequired => "answer_required", 400,
        "The run waits for the answer to a question: send it as `decision.freeformText`.";
    AnswerInvalid => "answer_invalid", 400,
        "The answer does not fit the schema a tool's question asked for; nothing was recorded.";
    // 401, 403: who sent the request.
    Unauthenticated => "unauthenticated", 401,
        "No API key was sent while keys are configured (or the browser session ended).";
    InvalidApiKey => "invalid_api_key", 401,
        "The API key matches no configured key.";
    Forbidden => "forbidden", 403,
        "The action needs an operator key.";
    CrossSiteRequest => "cross_site_request", 403,
        "A request that changes something came from another site's page.";
    // 404, 405: what the request names.
    NotFound => "not_found", 404,
        "No endpoint has this path.";
    RunNotFound => "run_not_found", 404,
        "No such run (or one the caller may not see).";
    TaskNotFound => "task_not_found", 404,
        "No such human task (or one the caller may not see).";
    CheckpointNotFound => "checkpoint_not_found", 404,
        "No such checkpoint of this thread (ids read `<runId>:<seq>`, as its history lists them).";
    ThreadNotFound => "thread_not_found", 404,
        "No such thread (or one the caller may not see).";
    AssistantNotFound => "assistant_not_found", 404,
        "No such assistant: the LangGraph API has one.";
    SchemaNotFound => "schema_not_found", 404,
        "No schema has this name.";
    ValueNotFound => "value_not_found", 404,
        "The pointer is not one of the run's values that its document leaves out.";
    CapabilityNotFound => "capability_not_found", 404,
        "No capability is registered with this id.";
    MethodNotAllowed => "method_not_allowed", 405,
        "The endpoint does not take this method; `Allow` lists those it takes.";
    // 408, 413, 415, 421: how the request was sent.
    BodyTimeout => "body_timeout", 408,
        "The request body did not arrive in time; the connection is closed.";
    PayloadTooLarge => "payload_too_large", 413,
        "The request body is larger than the server takes; the connection is closed.";
    UnsupportedMediaType => "unsupported_media_type", 415,
        "The request body was not sent with the content type the endpoint takes.";
    HostNotAllowed => "host_not_allowed", 421,
        "The `Host` names a host this server does not answer to (`http.allowed_hosts`).";
    // 409, 422: the request contradicts what the server holds.
    InvalidRunState => "invalid_run_state", 409,
        "The run is not in a status the command applies to (another command may have come first).";
    StalePlanVersion => "stale_plan_version", 409,
        "`expectedPlanVersion` is not the run's plan version.";
    StaleRequest => "stale_request", 409,
        "The request answered is not the one the run waits on (it was answered or superseded).";
    ReplanInProgress => "replan_in_progress", 409,
        "The run is planning already.";
    RunBusy => "run_busy", 409,
        "Another command or the run's coordinator is changing the run; nothing was done: send it again.";
    Conflict => "conflict", 409,
        "The run changed while the command was applied; nothing was done.";
    InvalidTaskState => "invalid_task_state", 409,
        "The task is not an open human task.";
    CapabilityOfMcpServer => "capability_of_mcp_server", 409,
        "The capability is a tool an MCP server offers: it goes when the server no longer lists it.";
    ThreadExists => "thread_exists", 409,
        "A thread with this id exists already.";
    ThreadBusy => "thread_busy", 409,
        "The thread has a run in progress: wait for it, or join it.";
    NoInterrupt => "no_interrupt", 409,
        "The thread's newest run does not wait for an answer.";
    NotWaiting => "invalid_run_state", 422,
        "A replan of a run that neither waits on an operator nor plans (the one code with two statuses).";
    BudgetNotRaised => "budget_not_raised", 422,
        "A budget request was approved without limits that leave the run room to go on.";
    ReplanLimit => "replan_limit", 422,
        "The run has used every replan it is allowed.";
    IdempotencyKeyReused => "idempotency_key_reused", 422,
        "The `Idempotency-Key` was used with another body.";
    // 500, 503: the server.
    InternalError => "internal_error", 500,
        "The server failed; the message gives a reference to find in its log.";
    TooManyUploads => "too_many_uploads", 503,
        "Too many request bodies are being read at once; retry after `Retry-After`.";
    DatabaseUnavailable => "database_unavailable", 503,
        "The database cannot be reached; nothing was done: retry after `Retry-After`.";
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::ErrorCode;

    #[test]
    fn codes_are_unique_and_each_has_an_error_status_and_a_description() {
        let mut seen: HashMap<&str, ErrorCode> = HashMap::new();
        for &code in ErrorCode::ALL {
            assert!((400..=599).contains(&code.status()), "{code:?} has status {}", code.status());
            assert!(!code.description().is_empty(), "{code:?} has no description");
            let name = code.as_str();
            assert!(!name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{name:?}");
            if let Some(earlier) = seen.insert(name, code) {
                // The one name clients have always been sent with two statuses: 409 for most
                // commands, 422 for a replan.
                assert_eq!((earlier, code), (ErrorCode::InvalidRunState, ErrorCode::NotWaiting), "{name} twice");
            }
        }
    }
}
