//! A run's spending budget: limits on its model calls, tokens and cost (envelope
//! `policies.budget` over the configured defaults, capped by the configured ceiling), what the
//! run has spent against them ([`Spent`]), and the one rule that says when a limit is reached.
//!
//! The limits are resolved once, when the run starts, and recorded on its `start` frame; an
//! operator who raises them records the new ones on the `hitl_resolved` that answers the budget
//! request. So a run's budget is read from its log alone, whatever the configuration says later.
//!
//! Spending is counted from what calls reported: a call that reported no token counts adds
//! nothing to the token count, and a call whose model has no price adds nothing to the cost
//! (`docs/usage.md` says so to operators). A limit is reached when what was spent is at or above
//! it; no model call starts then (calls already in flight finish: the overshoot is theirs).

use serde::{Deserialize, Serialize};

use crate::usage::{CallUsage, Known, Micros, Usage};
use crate::validation::FieldError;

/// `policies.budget` as an envelope sets it (the schema checked its shape and ranges).
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetPolicy {
    pub max_tokens: Option<u64>,
    pub max_cost_usd: Option<f64>,
    pub max_model_calls: Option<u64>,
    pub on_exceeded: Option<OnExceeded>,
}

/// New limits an operator sets when approving a paused run (`run.resume` `decision.budget`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetRaise {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_calls: Option<u64>,
}

/// The configured `[budget]`: defaults for runs whose envelope sets no limit of a kind, and the
/// most an envelope may ask to spend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetDefaults {
    pub max_tokens: Option<u64>,
    pub max_cost_usd: Option<Micros>,
    pub max_model_calls: Option<u64>,
    pub ceiling_max_cost_usd: Option<Micros>,
}

/// What a run does when it reaches a limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExceeded {
    /// Wait for an operator to raise the limit (or reject, which fails the run).
    #[default]
    Pause,
    /// Fail with `budget_exceeded`.
    Fail,
}

impl OnExceeded {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Fail => "fail",
        }
    }
}

/// Which limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Limit {
    Tokens,
    CostUsd,
    ModelCalls,
}

impl Limit {
    pub const ALL: [Limit; 3] = [Self::CostUsd, Self::Tokens, Self::ModelCalls];

    /// The name on the wire (`budget_exceeded.limit`) and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tokens => "tokens",
            Self::CostUsd => "costUsd",
            Self::ModelCalls => "modelCalls",
        }
    }

    /// The field of `policies.budget` (and of a raise) that sets this limit.
    pub fn field(self) -> &'static str {
        match self {
            Self::Tokens => "maxTokens",
            Self::CostUsd => "maxCostUsd",
            Self::ModelCalls => "maxModelCalls",
        }
    }
}

/// An amount a limit counts: tokens or calls, or dollars (a JSON number of dollars).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Amount {
    Count(u64),
    Usd(Micros),
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Count(n) => write!(f, "{n}"),
            Self::Usd(micros) => write!(f, "{micros}"),
        }
    }
}

/// A run's limits as resolved at its start (or raised since). At least one is set: a run
/// without any has no budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<Micros>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_calls: Option<u64>,
    #[serde(default)]
    pub on_exceeded: OnExceeded,
}

/// What a run has spent, as budgets count it: known counts and costs only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spent {
    pub model_calls: u64,
    /// Input and output tokens (`totalTokens`: a key redaction lets through).
    #[serde(rename = "totalTokens")]
    pub tokens: u64,
    pub cost_usd: Micros,
}

impl Spent {
    /// Adds what a frame's (or a run's) usage records.
    pub fn add_usage(&mut self, usage: &Usage) {
        self.model_calls = self.model_calls.saturating_add(u64::from(usage.tally.calls));
        self.add(usage.tally.known());
    }

    /// Adds one call not yet recorded on a frame.
    pub fn add_call(&mut self, call: &CallUsage) {
        self.model_calls = self.model_calls.saturating_add(1);
        self.add(Known::read_as_zero(&call.counts, call.cost));
    }

    fn add(&mut self, known: Known) {
        self.tokens = self.tokens.saturating_add(known.tokens);
        self.cost_usd = self.cost_usd.saturating_add(known.cost_usd);
    }

    /// What was spent against `limit`.
    pub fn on(&self, limit: Limit) -> Amount {
        match limit {
            Limit::Tokens => Amount::Count(self.tokens),
            Limit::CostUsd => Amount::Usd(self.cost_usd),
            Limit::ModelCalls => Amount::Count(self.model_calls),
        }
    }
}

/// A limit the run has reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reached {
    pub limit: Limit,
    pub max: Amount,
    pub spent: Amount,
}

impl Reached {
    /// `costUsd: $0.05 spent of $0.05`.
    pub fn describe(&self) -> String {
        format!("{}: {} spent of {}", self.limit.as_str(), self.spent, self.max)
    }
}

/// Why an operator's raise was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NotRaised {
    #[error("the run reached its {} limit ({}): send `budget.{}` above what it has spent", .0.limit.as_str(), .0.describe(), .0.limit.field())]
    StillReached(Reached),
    #[error("`budget.{field}` = {value} is not an amount of dollars")]
    NotAnAmount { field: &'static str, value: f64 },
}

impl BudgetLimits {
    /// The limits of a new run: the envelope's where it sets them, else the configured
    /// defaults; a cost limit above the configured ceiling is refused (with its pointer), and a
    /// run that sets no cost limit gets the ceiling. `None`: the run has no budget.
    pub fn resolve(policy: &BudgetPolicy, defaults: &BudgetDefaults) -> Result<Option<Self>, FieldError> {
        let at = "/policies/budget/maxCostUsd";
        let asked = policy
            .max_cost_usd
            // A limit that rounds to no micro-dollar would stop the run before its first call.
            .map(|dollars| Micros::from_dollars(dollars).filter(|m| m.0 > 0).ok_or_else(|| not_dollars(at, dollars)))
            .transpose()?;
        if let (Some(asked), Some(ceiling)) = (asked, defaults.ceiling_max_cost_usd)
            && asked > ceiling
        {
            let message = format!("maxCostUsd {asked} is above this server's ceiling of {ceiling} per run");
            return Err(FieldError::new(at, "above_ceiling", message));
        }
        let limits = Self {
            max_tokens: policy.max_tokens.or(defaults.max_tokens),
            max_cost_usd: asked.or(defaults.max_cost_usd).or(defaults.ceiling_max_cost_usd),
            max_model_calls: policy.max_model_calls.or(defaults.max_model_calls),
            on_exceeded: policy.on_exceeded.unwrap_or_default(),
        };
        let any = limits.max_tokens.is_some() || limits.max_cost_usd.is_some() || limits.max_model_calls.is_some();
        Ok(any.then_some(limits))
    }

    /// The limit `limit` is set to, if it is.
    pub fn max(&self, limit: Limit) -> Option<Amount> {
        match limit {
            Limit::Tokens => self.max_tokens.map(Amount::Count),
            Limit::CostUsd => self.max_cost_usd.map(Amount::Usd),
            Limit::ModelCalls => self.max_model_calls.map(Amount::Count),
        }
    }

    /// The first limit `spent` has reached (cost, then tokens, then calls), if any.
    pub fn reached(&self, spent: &Spent) -> Option<Reached> {
        Limit::ALL.into_iter().find_map(|limit| {
            let max = self.max(limit)?;
            let spent = spent.on(limit);
            (spent >= max).then_some(Reached { limit, max, spent })
        })
    }

    /// These limits with an operator's `raise` applied; refused unless the run can go on under
    /// them (no limit reached by what it has spent).
    pub fn raised(&self, raise: &BudgetRaise, spent: &Spent) -> Result<Self, NotRaised> {
        let cost = raise
            .max_cost_usd
            .map(|value| Micros::from_dollars(value).ok_or(NotRaised::NotAnAmount { field: "maxCostUsd", value }))
            .transpose()?;
        let raised = Self {
            max_tokens: raise.max_tokens.or(self.max_tokens),
            max_cost_usd: cost.or(self.max_cost_usd),
            max_model_calls: raise.max_model_calls.or(self.max_model_calls),
            on_exceeded: self.on_exceeded,
        };
        match raised.reached(spent) {
            Some(reached) => Err(NotRaised::StillReached(reached)),
            None => Ok(raised),
        }
    }

    /// The planner prompt's `BUDGET` lines: [`Self::lines`] as a list.
    pub fn prompt_lines(&self, spent: &Spent) -> Vec<String> {
        self.lines(spent).into_iter().map(|line| format!("- {line}")).collect()
    }

    /// Per limit, what was spent and what is left: `costUsd: $0.02 spent of $0.05, $0.03 left`.
    pub fn lines(&self, spent: &Spent) -> Vec<String> {
        Limit::ALL
            .into_iter()
            .filter_map(|limit| {
                let max = self.max(limit)?;
                let spent = spent.on(limit);
                let left = match (max, spent) {
                    (Amount::Count(max), Amount::Count(spent)) => Amount::Count(max.saturating_sub(spent)),
                    (Amount::Usd(max), Amount::Usd(spent)) => Amount::Usd(Micros(max.0.saturating_sub(spent.0))),
                    (max, _) => max,
                };
                Some(format!("{}: {spent} spent of {max}, {left} left", limit.as_str()))
            })
            .collect()
    }
}

fn not_dollars(at: &str, dollars: f64) -> FieldError {
    FieldError::new(at, "invalid_amount", format!("{dollars} is not an amount of dollars of at least $0.000001"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::Counts;

    fn call(input: Option<u64>, output: Option<u64>, cost: Option<u64>) -> CallUsage {
        let counts = Counts { input_tokens: input, output_tokens: output, ..Counts::default() };
        CallUsage { model: "m".into(), counts, cost: cost.map(Micros), route: None }
    }

    fn defaults() -> BudgetDefaults {
        BudgetDefaults::default()
    }

    #[test]
    fn no_limit_anywhere_is_no_budget() {
        assert_eq!(BudgetLimits::resolve(&BudgetPolicy::default(), &defaults()), Ok(None));
    }

    #[test]
    fn the_envelope_wins_over_the_defaults_limit_by_limit() {
        let configured = BudgetDefaults { max_tokens: Some(10), max_model_calls: Some(5), ..defaults() };
        let policy = BudgetPolicy { max_tokens: Some(100), on_exceeded: Some(OnExceeded::Fail), ..Default::default() };
        let limits = BudgetLimits::resolve(&policy, &configured).unwrap().unwrap();
        assert_eq!((limits.max_tokens, limits.max_model_calls, limits.max_cost_usd), (Some(100), Some(5), None));
        assert_eq!(limits.on_exceeded, OnExceeded::Fail);
    }

    #[test]
    fn the_ceiling_refuses_more_and_bounds_a_run_that_sets_no_cost() {
        let configured = BudgetDefaults { ceiling_max_cost_usd: Some(Micros(2_000_000)), ..defaults() };
        let above = BudgetPolicy { max_cost_usd: Some(2.5), ..Default::default() };
        let error = BudgetLimits::resolve(&above, &configured).unwrap_err();
        assert_eq!((error.path.as_str(), error.code.as_str()), ("/policies/budget/maxCostUsd", "above_ceiling"));
        let none = BudgetLimits::resolve(&BudgetPolicy::default(), &configured).unwrap().unwrap();
        assert_eq!(none.max_cost_usd, Some(Micros(2_000_000)));
        let at = BudgetPolicy { max_cost_usd: Some(2.0), ..Default::default() };
        assert!(BudgetLimits::resolve(&at, &configured).is_ok());
        let dust = BudgetPolicy { max_cost_usd: Some(1e-9), ..Default::default() };
        let error = BudgetLimits::resolve(&dust, &configured).unwrap_err();
        assert_eq!((error.path.as_str(), error.code.as_str()), ("/policies/budget/maxCostUsd", "invalid_amount"));
    }

    #[test]
    fn a_limit_is_reached_at_its_value_and_unknown_counts_add_nothing() {
        let limits = BudgetLimits {
            max_tokens: Some(100),
            max_cost_usd: Some(Micros(50)),
            max_model_calls: Some(3),
            on_exceeded: OnExceeded::Pause,
        };
        let mut spent = Spent::default();
        spent.add_call(&call(Some(60), Some(30), Some(20)));
        assert_eq!(limits.reached(&spent), None);
        spent.add_call(&call(None, Some(10), None));
        assert_eq!((spent.tokens, spent.cost_usd, spent.model_calls), (100, Micros(20), 2));
        let reached = limits.reached(&spent).unwrap();
        assert_eq!(
            (reached.limit, reached.max, reached.spent),
            (Limit::Tokens, Amount::Count(100), Amount::Count(100))
        );
        spent.add_call(&call(Some(1), Some(1), Some(40)));
        assert_eq!(limits.reached(&spent).unwrap().limit, Limit::CostUsd, "cost is looked at first");
    }

    #[test]
    fn a_frame_with_an_unpriced_call_counts_what_its_other_calls_spent() {
        let calls = [call(Some(60), Some(30), Some(20)), call(None, Some(10), None), call(Some(5), Some(5), Some(7))];
        let mut one_by_one = Spent::default();
        calls.iter().for_each(|c| one_by_one.add_call(c));
        let usage = Usage::of_calls(&calls).unwrap();
        assert_eq!((usage.tally.cost_usd, usage.tally.counts.input_tokens), (None, None), "the sums are unknown");
        let mut recorded = Spent::default();
        recorded.add_usage(&usage);
        assert_eq!((recorded.tokens, recorded.cost_usd, recorded.model_calls), (110, Micros(27), 3));
        assert_eq!(recorded, one_by_one, "a frame counts as its calls did before it was recorded");

        let read_back: Usage = serde_json::from_value(serde_json::to_value(&usage).unwrap()).unwrap();
        let mut again = Spent::default();
        again.add_usage(&read_back);
        assert_eq!(again, recorded, "what a budget counts is in the frame");
        let known = serde_json::to_value(&usage).unwrap()["known"].clone();
        assert_eq!(known, serde_json::json!({"totalTokens": 110, "costUsd": 0.000027}));
        let all_known = Usage::of_calls(&calls[..1]).unwrap();
        assert!(serde_json::to_value(&all_known).unwrap().get("known").is_none(), "only where a sum is unknown");
        let unpriced = Usage::of_calls(&[call(Some(1), Some(2), None), call(Some(3), Some(4), None)]).unwrap();
        assert_eq!(unpriced.tally.cost_usd, None);
        assert!(serde_json::to_value(&unpriced).unwrap().get("known").is_none(), "nothing known beyond the sums");
    }

    #[test]
    fn a_raise_must_leave_every_limit_above_what_was_spent() {
        let limits = BudgetLimits {
            max_tokens: Some(100),
            max_cost_usd: None,
            max_model_calls: Some(2),
            on_exceeded: OnExceeded::Pause,
        };
        let spent = Spent { model_calls: 2, tokens: 150, cost_usd: Micros(0) };
        let only_calls = BudgetRaise { max_model_calls: Some(5), ..Default::default() };
        let refused = limits.raised(&only_calls, &spent).unwrap_err();
        assert!(matches!(refused, NotRaised::StillReached(Reached { limit: Limit::Tokens, .. })), "{refused}");
        let same = BudgetRaise { max_tokens: Some(150), max_model_calls: Some(5), ..Default::default() };
        assert!(limits.raised(&same, &spent).is_err(), "a limit at what was spent is still reached");
        let both = BudgetRaise { max_tokens: Some(500), max_model_calls: Some(5), ..Default::default() };
        let raised = limits.raised(&both, &spent).unwrap();
        assert_eq!((raised.max_tokens, raised.max_model_calls), (Some(500), Some(5)));
    }

    #[test]
    fn limits_read_back_as_written_on_the_start_frame() {
        let limits = BudgetLimits {
            max_tokens: None,
            max_cost_usd: Some(Micros(1_250_000)),
            max_model_calls: Some(4),
            on_exceeded: OnExceeded::Fail,
        };
        let json = serde_json::to_value(limits).unwrap();
        assert_eq!(json, serde_json::json!({"maxCostUsd": 1.25, "maxModelCalls": 4, "onExceeded": "fail"}));
        assert_eq!(serde_json::from_value::<BudgetLimits>(json).unwrap(), limits);
    }

    #[test]
    fn the_prompt_says_what_is_left_of_each_limit() {
        let limits = BudgetLimits {
            max_tokens: Some(1000),
            max_cost_usd: Some(Micros(100_000)),
            max_model_calls: None,
            on_exceeded: OnExceeded::Pause,
        };
        let spent = Spent { model_calls: 3, tokens: 400, cost_usd: Micros(25_000) };
        assert_eq!(
            limits.prompt_lines(&spent),
            ["- costUsd: $0.025 spent of $0.1, $0.075 left", "- tokens: 400 spent of 1000, 600 left"]
        );
    }
}
