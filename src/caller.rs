//! Who a request is: a caller or an operator, by the name of its key, and what each may see. Kept
//! apart from how a request proves it (`http::auth`: a key; `http::session`: a browser session
//! standing for a key), so the domain's rules (whose runs and threads a caller reaches) need no
//! HTTP.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Caller,
    Operator,
}

/// The principal of requests when no keys are configured.
pub const ANONYMOUS: &str = "anonymous";

/// An authenticated request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Caller {
    pub role: Role,
    /// Who is calling: the name of the key presented (`anonymous` when no keys are configured).
    /// Owns the runs it starts and scopes the idempotency keys it sends.
    pub principal: String,
}

impl Caller {
    /// Whether this caller may see a run that `owner` started: its own runs, or every run for an
    /// operator. (A run stored before runs had owners has none: only operators see it.)
    pub fn may_see(&self, owner: Option<&str>) -> bool {
        self.role == Role::Operator || owner == Some(self.principal.as_str())
    }

    /// The owner whose runs a list shows: none (every run) for an operator.
    pub fn owner_filter(&self) -> Option<&str> {
        (self.role != Role::Operator).then_some(self.principal.as_str())
    }
}
