//! A LangGraph run request, read into what flexrun does with it: a new run from an input (a
//! TaskEnvelope or a chat input), or an answer to the thread's open interrupt (`command.resume`),
//! streamed in the modes asked for. Pure: parsing and mapping only.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value, json};

use super::chat;
use crate::events::payload::{HitlKind, HitlRequestInfo};
use crate::run::operator::Answer;

/// The one assistant: its graph is the run's plan.
pub const ASSISTANT: &str = "flex";

/// What the client wants streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamMode {
    /// The run's projection after each step.
    Values,
    /// One event per plan and per node completion (and interrupts).
    Updates,
    /// Every native flex frame.
    Custom,
    /// The final answer as an AI message (`messages` events).
    MessagesTuple,
}

impl StreamMode {
    pub fn parse(name: &str) -> Result<Self, RequestError> {
        match name {
            "values" => Ok(Self::Values),
            "updates" => Ok(Self::Updates),
            "custom" => Ok(Self::Custom),
            "messages-tuple" => Ok(Self::MessagesTuple),
            other => Err(RequestError(format!(
                "stream mode {:?} is not supported: use values, updates, custom or messages-tuple",
                crate::excerpt::excerpt(other, 40)
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Values => "values",
            Self::Updates => "updates",
            Self::Custom => "custom",
            Self::MessagesTuple => "messages-tuple",
        }
    }
}

/// A request flexrun cannot take, in words for the client.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct RequestError(pub String);

impl From<chat::ChatError> for RequestError {
    fn from(error: chat::ChatError) -> Self {
        Self(error.0)
    }
}

/// The assistant a request names, if it is not flexrun's one assistant (a missing or
/// non-text `assistant_id` names none).
pub fn unknown_assistant(body: &Value) -> Option<String> {
    match body.get("assistant_id") {
        Some(Value::String(id)) if id == ASSISTANT => None,
        Some(Value::String(id)) => Some(crate::excerpt::excerpt(id, 60).into_owned()),
        _ => Some(String::new()),
    }
}

/// The body of `POST …/runs`, `…/runs/stream` and `…/runs/wait`, as the SDK sends it (keys whose
/// value is `None` are left out). Its `assistant_id` is checked first, by [`unknown_assistant`].
/// A key not listed here is refused: a later client's feature is not silently dropped.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    #[serde(default, rename = "assistant_id")]
    _assistant_id: Option<IgnoredAny>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    command: Option<Value>,
    #[serde(default)]
    stream_mode: Option<Value>,
    #[serde(default)]
    multitask_strategy: Option<String>,
    #[serde(default)]
    if_not_exists: Option<String>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    /// Features flexrun does not have: refused rather than ignored, as they change what runs.
    #[serde(default)]
    interrupt_before: Option<Value>,
    #[serde(default)]
    interrupt_after: Option<Value>,
    #[serde(default)]
    webhook: Option<Value>,
    #[serde(default)]
    checkpoint: Option<Value>,
    #[serde(default)]
    checkpoint_id: Option<Value>,
    #[serde(default)]
    after_seconds: Option<Value>,
    /// Accepted with no effect: they change nothing that runs (`docs/langgraph-api.md`).
    #[serde(default, rename = "config")]
    _config: Option<IgnoredAny>,
    #[serde(default, rename = "context")]
    _context: Option<IgnoredAny>,
    #[serde(default, rename = "stream_subgraphs")]
    _stream_subgraphs: Option<IgnoredAny>,
    #[serde(default, rename = "stream_resumable")]
    _stream_resumable: Option<IgnoredAny>,
    #[serde(default, rename = "durability")]
    _durability: Option<IgnoredAny>,
    #[serde(default, rename = "on_disconnect")]
    _on_disconnect: Option<IgnoredAny>,
    #[serde(default, rename = "on_completion")]
    _on_completion: Option<IgnoredAny>,
    #[serde(default, rename = "feedback_keys")]
    _feedback_keys: Option<IgnoredAny>,
    #[serde(default, rename = "langsmith_tracer")]
    _langsmith_tracer: Option<IgnoredAny>,
    #[serde(default, rename = "checkpoint_during")]
    _checkpoint_during: Option<IgnoredAny>,
    /// Resuming a thread with nothing to answer is always refused (409 `no_interrupt`).
    #[serde(default, rename = "strict_resume")]
    _strict_resume: Option<IgnoredAny>,
}

/// What a run request asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRequest {
    pub action: Action,
    pub modes: Vec<StreamMode>,
    /// Create the thread if it does not exist (`if_not_exists: create`).
    pub create_thread: bool,
    pub metadata: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Start a run from `input`: a TaskEnvelope, or chat `messages` (LangChain format).
    Start(Input),
    /// Answer the thread's open interrupt with `command.resume`.
    Resume(Value),
    /// Start a run from a checkpoint of the thread (LangGraph's time travel): a fork of the
    /// checkpoint's run, reusing what it had done by then.
    Fork(FromCheckpoint),
}

/// A run from a checkpoint: `checkpoint_id` (or `checkpoint.checkpoint_id`), with what changes.
#[derive(Debug, Clone, PartialEq)]
pub struct FromCheckpoint {
    pub checkpoint: Checkpoint,
    /// `input`: a whole TaskEnvelope instead of the checkpoint run's.
    pub envelope: Option<Value>,
    /// `command.update.outputs`: node id → the output that node is reused with.
    pub outputs: Map<String, Value>,
}

/// A checkpoint id as the history hands them out: `<runId>:<seq>`, the run right after that
/// frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub run_id: String,
    pub seq: u64,
}

impl Checkpoint {
    pub fn parse(id: &str) -> Option<Self> {
        let (run_id, seq) = id.rsplit_once(':')?;
        let seq = seq.parse().ok().filter(|seq| *seq > 0)?;
        Some(Self { run_id: run_id.to_string(), seq })
    }

    pub fn id(&self) -> String {
        format!("{}:{}", self.run_id, self.seq)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Envelope(Value),
    Chat(Vec<Value>),
}

impl RunRequest {
    pub fn parse(body: &Value) -> Result<Self, RequestError> {
        let body = Body::deserialize(body).map_err(|e| {
            RequestError(format!("invalid run request: {}", crate::excerpt::excerpt(&e.to_string(), 200)))
        })?;
        let unsupported = [
            ("interrupt_before", &body.interrupt_before),
            ("interrupt_after", &body.interrupt_after),
            ("webhook", &body.webhook),
            ("after_seconds", &body.after_seconds),
        ];
        if let Some((name, _)) = unsupported.iter().find(|(_, v)| v.as_ref().is_some_and(|v| !is_empty(v))) {
            return Err(RequestError(format!("`{name}` is not supported by flexrun")));
        }
        match body.multitask_strategy.as_deref() {
            None | Some("reject") => {}
            Some(other) => {
                return Err(RequestError(format!(
                    "multitask_strategy {:?} is not supported: flexrun rejects a run on a busy thread (\"reject\")",
                    crate::excerpt::excerpt(other, 40)
                )));
            }
        }
        let create_thread = match body.if_not_exists.as_deref() {
            None | Some("reject") => false,
            Some("create") => true,
            Some(other) => {
                return Err(RequestError(format!(
                    "if_not_exists must be \"create\" or \"reject\", not {:?}",
                    crate::excerpt::excerpt(other, 40)
                )));
            }
        };
        Ok(Self {
            action: match checkpoint(body.checkpoint_id.as_ref(), body.checkpoint.as_ref())? {
                Some(checkpoint) => Action::Fork(from_checkpoint(checkpoint, body.input, body.command)?),
                None => action(body.input, body.command)?,
            },
            modes: modes(body.stream_mode.as_ref())?,
            create_thread,
            metadata: body.metadata.unwrap_or_default(),
        })
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

fn action(input: Option<Value>, command: Option<Value>) -> Result<Action, RequestError> {
    let command = command.filter(|c| !is_empty(c));
    if let Some(command) = command {
        if input.as_ref().is_some_and(|i| !is_empty(i)) {
            return Err(RequestError("send either `input` (a new run) or `command` (a resume), not both".into()));
        }
        if command.get("goto").is_some_and(|v| !is_empty(v)) {
            return Err(RequestError("`command.goto` is not supported by flexrun".into()));
        }
        if command.get("update").is_some_and(|v| !is_empty(v)) {
            return Err(RequestError(
                "`command.update` needs `checkpoint_id`: it changes the state a run from a checkpoint starts with"
                    .into(),
            ));
        }
        return match command.get("resume") {
            Some(resume) if !resume.is_null() => Ok(Action::Resume(resume.clone())),
            _ => Err(RequestError("`command` needs `resume`: the answer to the thread's interrupt".into())),
        };
    }
    let Some(input) = input.filter(|i| !i.is_null()) else {
        return Err(RequestError("send `input`: a TaskEnvelope or chat `messages`".into()));
    };
    if input.get("objective").is_none()
        && let Some(messages) = input.get("messages")
    {
        return Ok(Action::Start(Input::Chat(chat::messages(messages)?)));
    }
    Ok(Action::Start(Input::Envelope(input)))
}

/// The checkpoint a request names: `checkpoint_id`, or `checkpoint.checkpoint_id` (of the root
/// namespace: flexrun has no subgraphs); none when neither is given.
fn checkpoint(id: Option<&Value>, checkpoint: Option<&Value>) -> Result<Option<Checkpoint>, RequestError> {
    let from_object = match checkpoint.filter(|c| !is_empty(c)) {
        None => None,
        Some(object) => {
            if object.get("checkpoint_ns").is_some_and(|ns| !ns.is_null() && ns != "") {
                return Err(RequestError("`checkpoint.checkpoint_ns` must be empty: flexrun has no subgraphs".into()));
            }
            object.get("checkpoint_id").filter(|v| !v.is_null())
        }
    };
    let named = match (id.filter(|v| !v.is_null()), from_object) {
        (Some(a), Some(b)) if a != b => {
            return Err(RequestError(
                "`checkpoint_id` and `checkpoint.checkpoint_id` name different checkpoints".into(),
            ));
        }
        (Some(id), _) | (None, Some(id)) => id,
        (None, None) => return Ok(None),
    };
    let parsed = named.as_str().and_then(Checkpoint::parse);
    parsed.map(Some).ok_or_else(|| {
        let shown = crate::excerpt::excerpt(&named.to_string(), 80).into_owned();
        RequestError(format!(
            "{shown} is not a checkpoint id: they read `<runId>:<seq>`, as the thread's history lists them"
        ))
    })
}

/// A run from `checkpoint`: `input` may replace the envelope, `command.update.outputs` the
/// outputs of completed nodes; nothing else applies to a run that starts from a checkpoint.
fn from_checkpoint(
    checkpoint: Checkpoint,
    input: Option<Value>,
    command: Option<Value>,
) -> Result<FromCheckpoint, RequestError> {
    let command = command.filter(|c| !is_empty(c)).unwrap_or_default();
    if ["resume", "goto"].iter().any(|key| command.get(key).is_some_and(|v| !is_empty(v))) {
        return Err(RequestError(
            "`command.resume` and `command.goto` do not apply to a run from a checkpoint: send `command.update` \
             (outputs) or `input` (an envelope)"
                .into(),
        ));
    }
    let mut outputs = Map::new();
    if let Some(update) = command.get("update").filter(|u| !is_empty(u)) {
        let update = match update {
            Value::Object(fields) => fields.clone(),
            Value::Array(pairs) => pairs
                .iter()
                .filter_map(|pair| Some((pair.get(0)?.as_str()?.to_string(), pair.get(1)?.clone())))
                .collect(),
            _ => return Err(RequestError("`command.update` is an object (or a list of [key, value] pairs)".into())),
        };
        for (key, value) in update {
            match (key.as_str(), value) {
                ("outputs", Value::Object(given)) => outputs.extend(given),
                _ => {
                    return Err(RequestError(format!(
                        "`command.update` may set `outputs` (node id → output, as in `values.outputs`), not `{}`: \
                         the rest of a run's state is derived",
                        crate::excerpt::excerpt(&key, 40)
                    )));
                }
            }
        }
    }
    let envelope = match input.filter(|i| !is_empty(i)) {
        None => None,
        Some(input) if input.get("objective").is_some() => Some(input),
        Some(_) => {
            return Err(RequestError(
                "`input` of a run from a checkpoint is a whole TaskEnvelope (or none: the checkpoint run's)".into(),
            ));
        }
    };
    Ok(FromCheckpoint { checkpoint, envelope, outputs })
}

fn modes(stream_mode: Option<&Value>) -> Result<Vec<StreamMode>, RequestError> {
    let modes = match stream_mode {
        None | Some(Value::Null) => vec![StreamMode::Values],
        Some(Value::String(name)) => vec![StreamMode::parse(name)?],
        Some(Value::Array(names)) => names
            .iter()
            .map(|n| {
                n.as_str().ok_or_else(|| RequestError("stream_mode lists names".into())).and_then(StreamMode::parse)
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(RequestError("stream_mode is a name or a list of names".into())),
    };
    // Each mode once, in the order first asked for: a list naming modes over and over is one of
    // a few modes, not a long `Location` to answer with.
    let mut unique: Vec<StreamMode> = Vec::new();
    for mode in modes {
        if !unique.contains(&mode) {
            unique.push(mode);
        }
    }
    Ok(unique)
}

/// The envelope a run on `thread_id` starts from: the TaskEnvelope given (its thread set to
/// this one), or for chat messages (after the thread's `history`) one whose objective is the
/// last human message, with a freeform answer.
pub fn envelope(input: &Input, thread_id: &str, history: &[Value]) -> Result<Value, RequestError> {
    match input {
        Input::Envelope(envelope) => {
            let mut envelope = envelope.clone();
            if let Some(object) = envelope.as_object_mut() {
                let constraints = object.entry("constraints").or_insert_with(|| json!({}));
                if let Some(constraints) = constraints.as_object_mut() {
                    constraints.insert("threadId".into(), json!(thread_id));
                }
            }
            Ok(envelope)
        }
        Input::Chat(messages) => Ok(chat::envelope(messages, thread_id, history)?),
    }
}

/// `command.resume` as the answer to `request`: `true`/`false`; a decision object (`{approved,
/// freeformText?}`); a `run.resume` body (`{decision}` or `{payload}`, read by `flex_answer`);
/// text (a question's answer); or Agent Inbox responses (`[{type: accept|edit|response|ignore,
/// args}]`).
pub fn resume_answer(
    resume: &Value,
    request: &HitlRequestInfo,
    flex_answer: impl Fn(&Value) -> Option<Answer>,
) -> Result<Answer, RequestError> {
    let decide_raising = |approved: bool, feedback: Option<String>, budget: Option<&Value>| {
        let budget = budget
            .map(|b| crate::validation::decode(b, "/budget"))
            .transpose()
            .map_err(|e| RequestError(format!("`budget` is invalid: {}", e.message)))?;
        Ok(Answer::Decide { request_id: Some(request.id.clone()), approved, feedback, budget })
    };
    let decide = |approved: bool, feedback: Option<String>| Answer::Decide {
        request_id: Some(request.id.clone()),
        approved,
        feedback,
        budget: None,
    };
    let node = || request.node_id.clone().unwrap_or_default();
    let kind = request.kind;
    let wrong = |what: &str| RequestError(format!("{what} does not answer a {} request", kind.as_str()));
    match resume {
        Value::Bool(approved) if matches!(kind, HitlKind::Approval | HitlKind::Budget) => Ok(decide(*approved, None)),
        Value::String(text) if kind == HitlKind::Clarify => Ok(decide(true, Some(text.clone()))),
        Value::Object(object) if object.contains_key("decision") || object.contains_key("payload") => {
            flex_answer(resume).ok_or_else(|| RequestError("the run.resume body in `command.resume` is invalid".into()))
        }
        Value::Object(object) if object.get("approved").is_some_and(Value::is_boolean) => {
            let approved = object["approved"].as_bool().unwrap_or_default();
            let feedback = object.get("freeformText").and_then(Value::as_str).map(String::from);
            decide_raising(approved, feedback, object.get("budget"))
        }
        Value::Array(responses) => {
            // One response per interrupt, and a run waits on one: a second would be dropped unread.
            let [response] = responses.as_slice() else {
                let message = format!("the list holds {} responses: a run waits on one interrupt", responses.len());
                return Err(RequestError(if responses.is_empty() {
                    "the list of responses is empty".into()
                } else {
                    message
                }));
            };
            let args = response.get("args").cloned().unwrap_or(Value::Null);
            let text = args.as_str().map(String::from);
            match (response.get("type").and_then(Value::as_str).unwrap_or_default(), kind) {
                ("accept", HitlKind::Approval) => Ok(decide(true, None)),
                ("response", HitlKind::Approval) => Ok(decide(false, text)),
                ("ignore", HitlKind::Approval | HitlKind::Budget) => Ok(decide(false, None)),
                ("edit", HitlKind::Budget) => {
                    // An Agent Inbox edit is `{action, args}`: the limits are in the edited args
                    // (beside the action request's own, which Agent Chat UI sends back), or are
                    // those args.
                    let edited = args.get("args").unwrap_or(&args);
                    decide_raising(true, None, edited.get("budget").or(Some(edited)))
                }
                ("response", HitlKind::Clarify) => Ok(decide(true, text)),
                ("edit", HitlKind::HumanTask) => {
                    let output = args.get("args").cloned().unwrap_or(args);
                    Ok(Answer::Submit { request_id: Some(request.id.clone()), node_id: node(), output })
                }
                ("ignore", HitlKind::HumanTask) => Ok(Answer::Decline {
                    request_id: Some(request.id.clone()),
                    node_id: node(),
                    reason: "declined from a chat client".into(),
                    note: None,
                }),
                (other, _) => Err(wrong(&format!("a {:?} response", crate::excerpt::excerpt(other, 40)))),
            }
        }
        Value::Bool(_) => Err(wrong("true or false")),
        Value::String(_) => Err(wrong("text")),
        _ => Err(wrong("this value")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::payload::HitlSubject;

    #[test]
    fn a_stream_request_with_the_sdks_keys() {
        let body = json!({"assistant_id": "flex", "input": {"objective": "o"}, "stream_mode": ["values", "custom"],
                          "config": {}, "stream_resumable": true, "on_disconnect": "continue"});
        let request = RunRequest::parse(&body).unwrap();
        assert_eq!(request.modes, vec![StreamMode::Values, StreamMode::Custom]);
        assert_eq!(request.action, Action::Start(Input::Envelope(json!({"objective": "o"}))));
        let default = RunRequest::parse(&json!({"assistant_id": "flex", "input": {"objective": "o"}})).unwrap();
        assert_eq!(default.modes, vec![StreamMode::Values]);
        let repeated: Vec<&str> = ["updates", "values"].iter().cycle().take(1000).copied().collect();
        let body = json!({"assistant_id": "flex", "input": {"objective": "o"}, "stream_mode": repeated});
        assert_eq!(RunRequest::parse(&body).unwrap().modes, vec![StreamMode::Updates, StreamMode::Values], "each once");
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        let refused = |body: Value| RunRequest::parse(&body).unwrap_err().0;
        assert_eq!(unknown_assistant(&json!({"assistant_id": "agent", "input": {}})).as_deref(), Some("agent"));
        assert_eq!(unknown_assistant(&json!({"input": {}})).as_deref(), Some(""));
        assert_eq!(unknown_assistant(&json!({"assistant_id": "flex"})), None);
        assert!(
            refused(json!({"assistant_id": "flex", "input": {"objective": "o"}, "stream_mode": "debug"}))
                .contains("not supported")
        );
        assert!(
            refused(json!({"assistant_id": "flex", "input": {"objective": "o"}, "multitask_strategy": "enqueue"}))
                .contains("reject")
        );
        assert!(
            refused(json!({"assistant_id": "flex", "input": {"objective": "o"}, "webhook": "http://x"}))
                .contains("webhook")
        );
        assert!(refused(json!({"assistant_id": "flex"})).contains("input"));
        assert!(refused(json!({"assistant_id": "flex", "command": {"goto": "x"}})).contains("goto"));
        let unknown = refused(json!({"assistant_id": "flex", "input": {"objective": "o"}, "priority": 1}));
        assert!(unknown.contains("unknown field `priority`"), "{unknown}");
    }

    #[test]
    fn a_checkpoint_makes_the_request_a_run_from_it_with_only_outputs_to_update() {
        let parsed = |body: Value| RunRequest::parse(&body).map(|r| r.action);
        let from = |body: Value| match parsed(body) {
            Ok(Action::Fork(from)) => from,
            other => panic!("{other:?}"),
        };
        let by_id = from(json!({"assistant_id": "flex", "checkpoint_id": "r-1:7"}));
        assert_eq!(
            (by_id.checkpoint, by_id.envelope, by_id.outputs.len()),
            (Checkpoint { run_id: "r-1".into(), seq: 7 }, None, 0)
        );
        let by_object = from(
            json!({"assistant_id": "flex", "checkpoint": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "r-1:7"},
                                    "command": {"update": [["outputs", {"draft": {"text": "x"}}]]}}),
        );
        assert_eq!(by_object.outputs["draft"], json!({"text": "x"}));
        let refused = |body: Value| parsed(body).unwrap_err().0;
        assert!(refused(json!({"checkpoint_id": "seven"})).contains("`<runId>:<seq>`"));
        assert!(refused(json!({"checkpoint_id": "r-1:7", "command": {"resume": true}})).contains("command.resume"));
        assert!(
            refused(json!({"checkpoint_id": "r-1:7", "command": {"update": {"status": "done"}}})).contains("`status`")
        );
        assert!(
            refused(json!({"checkpoint_id": "r-1:7", "checkpoint": {"checkpoint_id": "r-1:8"}})).contains("different")
        );
        assert!(refused(json!({"checkpoint_id": "r-1:7", "input": {"messages": []}})).contains("TaskEnvelope"));
        assert!(refused(json!({"command": {"update": {"outputs": {}}, "resume": 1}})).contains("checkpoint_id"));
    }

    #[test]
    fn a_chat_input_becomes_a_freeform_envelope_on_the_thread() {
        let body = json!({"assistant_id": "flex", "input": {"messages": [{"role": "user", "content": "Hi there"}]}});
        let Action::Start(input) = RunRequest::parse(&body).unwrap().action else { panic!("a start") };
        let history = vec![json!({"type": "ai", "content": "earlier"})];
        let envelope = envelope(&input, "t-1", &history).unwrap();
        assert_eq!(envelope["objective"], "Hi there");
        assert_eq!(envelope["outputContract"]["mode"], "freeform");
        assert_eq!(envelope["constraints"]["threadId"], "t-1");
        let messages = chat::stored_messages(&envelope).unwrap();
        assert_eq!((messages.len(), messages[1]["type"].as_str()), (2, Some("human")));
        assert_eq!(messages[1]["content"], "Hi there");
    }

    #[test]
    fn resume_values_map_to_flex_answers() {
        let answer = |resume: Value, kind: HitlKind| {
            let request = HitlRequestInfo {
                id: "r".into(),
                kind,
                subject: HitlSubject::Node,
                question: "?".into(),
                plan_version: 1,
                created_at: String::new(),
                node_id: Some("n".into()),
                context: Value::Null,
            };
            resume_answer(&resume, &request, |_| None)
        };
        let decide = |approved, feedback: Option<&str>| Answer::Decide {
            request_id: Some("r".into()),
            approved,
            feedback: feedback.map(String::from),
            budget: None,
        };
        assert_eq!(answer(json!(true), HitlKind::Approval).unwrap(), decide(true, None));
        assert_eq!(
            answer(json!({"approved": false, "freeformText": "why"}), HitlKind::Approval).unwrap(),
            decide(false, Some("why"))
        );
        assert_eq!(
            answer(json!([{"type": "response", "args": "shorter"}]), HitlKind::Approval).unwrap(),
            decide(false, Some("shorter"))
        );
        assert_eq!(answer(json!("EU"), HitlKind::Clarify).unwrap(), decide(true, Some("EU")));
        assert_eq!(
            answer(
                json!([{"type": "edit", "args": {"action": "submit_task", "args": {"ok": true}}}]),
                HitlKind::HumanTask
            )
            .unwrap(),
            Answer::Submit { request_id: Some("r".into()), node_id: "n".into(), output: json!({"ok": true}) }
        );
        assert!(answer(json!("text"), HitlKind::Approval).is_err());
        assert!(answer(json!([{"type": "accept"}]), HitlKind::HumanTask).is_err());
        assert!(answer(json!([]), HitlKind::Approval).unwrap_err().0.contains("empty"));
        let two = answer(json!([{"type": "accept"}, {"type": "ignore"}]), HitlKind::Approval).unwrap_err();
        assert!(two.0.contains("holds 2 responses"), "{two}");
    }
}
