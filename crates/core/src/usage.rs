//! What model calls used and cost: one call's report ([`CallUsage`]), the sum of several as a
//! frame or a run shows it ([`Usage`]), and the prices that turn tokens into money ([`Prices`]).
//!
//! Money is counted in whole micro-dollars ([`Micros`]): each call's cost is computed exactly
//! (tokens × price in micro-dollars per million tokens) and rounded once, to the micro-dollar it
//! is shown with; every sum after that adds integers. So a run's total is exactly the sum of its
//! frames' costs, whatever the order they are added in, and no floating-point drift builds up.
//!
//! A count a call did not report is unknown (`null`), never 0, and a sum with an unknown part is
//! unknown: a total that pretended to know would let a budget pass unnoticed.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An amount of US dollars in micro-dollars, shown on the wire as a number of dollars rounded to
/// 1e-6.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Micros(pub u64);

impl Micros {
    const PER_DOLLAR: f64 = 1_000_000.0;

    /// Dollars (as configured or sent) in micro-dollars, rounded to the nearest; `None` for a
    /// negative, infinite or unrepresentable amount.
    pub fn from_dollars(dollars: f64) -> Option<Self> {
        let micros = (dollars * Self::PER_DOLLAR).round();
        // Up to 2^53 µ$ (about 9 billion dollars) a micro-dollar count is exact in an f64.
        let exact = (0.0..=9_007_199_254_740_992.0).contains(&micros);
        #[expect(clippy::as_conversions, reason = "range-checked above: a whole number in 0..=2^53")]
        exact.then_some(Self(micros as u64))
    }

    pub fn dollars(self) -> f64 {
        #[expect(clippy::as_conversions, reason = "micro-dollar counts stay far below 2^53")]
        let micros = self.0 as f64;
        micros / Self::PER_DOLLAR
    }

    pub fn saturating_add(self, other: Self) -> Self {
        Self(self.0.saturating_add(other.0))
    }
}

/// `$0.0039`: dollars with the digits that are not trailing zeros, to the micro-dollar.
impl std::fmt::Display for Micros {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (whole, micros) = (self.0 / 1_000_000, self.0 % 1_000_000);
        let fraction = format!("{micros:06}");
        let fraction = fraction.trim_end_matches('0');
        if fraction.is_empty() { write!(f, "${whole}") } else { write!(f, "${whole}.{fraction}") }
    }
}

impl Serialize for Micros {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.dollars())
    }
}

impl<'de> Deserialize<'de> for Micros {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let dollars = f64::deserialize(deserializer)?;
        Self::from_dollars(dollars)
            .ok_or_else(|| serde::de::Error::custom(format!("{dollars} is not an amount of dollars")))
    }
}

/// The price of a model's tokens, in micro-dollars per million tokens (so a call's cost in
/// pico-dollars is tokens × price, exactly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    pub input: Micros,
    pub output: Micros,
    /// Input tokens served from the provider's prompt cache.
    pub cached_input: Micros,
}

impl Price {
    /// What a call cost, rounded to the micro-dollar; `None` when its input or output tokens are
    /// unknown. Cached tokens are part of the input tokens (as Chat Completions reports them); a
    /// call that did not say how many were cached pays the full input price for all of them.
    fn cost(&self, call: &Counts) -> Option<Micros> {
        let (input, output) = (call.input_tokens?, call.output_tokens?);
        let cached = call.cached_input_tokens.unwrap_or(0).min(input);
        let pico = u128::from(input - cached) * u128::from(self.input.0)
            + u128::from(cached) * u128::from(self.cached_input.0)
            + u128::from(output) * u128::from(self.output.0);
        let micros = (pico + 500_000) / 1_000_000;
        Some(Micros(u64::try_from(micros).unwrap_or(u64::MAX)))
    }
}

/// Prices by model name (`[llm.prices."<model>"]`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices(BTreeMap<String, Price>);

impl Prices {
    pub fn new(prices: BTreeMap<String, Price>) -> Self {
        Self(prices)
    }

    /// The price of a call answered by `reported` (the model the response names) when it was
    /// asked of `requested`: the reported name is matched first, then the requested one.
    pub fn of(&self, reported: Option<&str>, requested: &str) -> Option<&Price> {
        reported.and_then(|model| self.0.get(model)).or_else(|| self.0.get(requested))
    }

    /// The models priced.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}

/// Token counts; `None` where a call did not report one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cached_input_tokens: Option<u64>,
    pub reasoning_tokens: Option<u64>,
}

impl Counts {
    /// Input and output tokens together, as budgets count them; unknown if either is.
    pub fn tokens(&self) -> Option<u64> {
        Some(self.input_tokens?.saturating_add(self.output_tokens?))
    }

    fn add(&mut self, other: &Self) {
        let sum = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_add(b?));
        self.input_tokens = sum(self.input_tokens, other.input_tokens);
        self.output_tokens = sum(self.output_tokens, other.output_tokens);
        self.cached_input_tokens = sum(self.cached_input_tokens, other.cached_input_tokens);
        self.reasoning_tokens = sum(self.reasoning_tokens, other.reasoning_tokens);
    }
}

/// What one model call that got an answer reported, and what it cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallUsage {
    /// The model that answered (as the response names it), else the one asked.
    pub model: String,
    pub counts: Counts,
    /// `None` when the model has no price or the call's tokens are unknown.
    pub cost: Option<Micros>,
    /// The route entry asked, `<endpoint>/<model>` (set by the model pool).
    pub route: Option<String>,
}

impl CallUsage {
    /// A call answered by `reported` (else `requested`) with `counts`, priced from `prices`.
    pub fn priced(prices: &Prices, requested: &str, reported: Option<&str>, counts: Counts) -> Self {
        let reported = reported_model(reported);
        let cost = prices.of(reported, requested).and_then(|price| price.cost(&counts));
        Self { model: reported.unwrap_or(requested).to_string(), counts, cost, route: None }
    }
}

/// The model a response names, when it is a name to keep ([`crate::excerpt::identifier`]; a
/// route's model names are at most 200 characters too). The name is copied into every frame,
/// document, list and trace that shows the call, so a server naming its model with megabytes of
/// text (or with characters that break a log line) is not taken at its word: the call is
/// recorded under the model asked for.
pub fn reported_model(reported: Option<&str>) -> Option<&str> {
    reported.and_then(crate::excerpt::identifier)
}

/// A model call's result with the usage it reported: `None` when no model answered (the call
/// failed before a response, or was not a model call at all).
#[derive(Debug)]
pub struct Metered<T> {
    pub result: T,
    pub usage: Option<CallUsage>,
    /// The route entries the call passed by before this result (a rate limit, an outage): the
    /// run records each as a `retry` frame.
    pub fallbacks: Vec<Fallback>,
}

/// A route entry a model call left behind, and the one it tried next.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fallback {
    /// `<endpoint>/<model>` that failed.
    pub failed: String,
    /// `<endpoint>/<model>` tried next; none when the chain ran out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    #[serde(skip)]
    pub error: String,
}

impl<T> Metered<T> {
    /// A result no model call went into.
    pub fn unmetered(result: T) -> Self {
        Self { result, usage: None, fallbacks: Vec::new() }
    }

    /// A result of a call a model answered (or that failed on an answer), with its usage.
    pub fn answered(result: T, usage: CallUsage) -> Self {
        Self { result, usage: Some(usage), fallbacks: Vec::new() }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Metered<U> {
        Metered { result: f(self.result), usage: self.usage, fallbacks: self.fallbacks }
    }
}

/// Calls, their tokens and their cost added up: what one frame's calls used, or a model's share
/// of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tally {
    pub calls: u32,
    #[serde(flatten)]
    pub counts: Counts,
    /// `None` when any call's model has no price (or its tokens are unknown).
    pub cost_usd: Option<Micros>,
    /// What the calls add up to counting only what is known, where that is more than the sums
    /// above say with an unknown one read as 0 — some calls were priced and another was not, or
    /// reported tokens another did not. A budget counts this, so one unpriced call does not take
    /// the priced ones' cost off what a run spent. Absent otherwise (all known, or all unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known: Option<Known>,
}

/// Tokens and cost counting only the calls that reported them, or were priced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Known {
    /// Input and output tokens (`totalTokens`: a key redaction lets through).
    #[serde(rename = "totalTokens")]
    pub tokens: u64,
    pub cost_usd: Micros,
}

impl Default for Tally {
    /// No calls: every count known and zero.
    fn default() -> Self {
        let zero = Some(0);
        let counts =
            Counts { input_tokens: zero, output_tokens: zero, cached_input_tokens: zero, reasoning_tokens: zero };
        Self { calls: 0, counts, cost_usd: Some(Micros(0)), known: None }
    }
}

impl Tally {
    fn add_call(&mut self, call: &CallUsage) {
        self.add(&Self { calls: 1, counts: call.counts, cost_usd: call.cost, known: None });
    }

    fn add(&mut self, other: &Self) {
        let known = self.known().plus(other.known());
        self.calls = self.calls.saturating_add(other.calls);
        self.counts.add(&other.counts);
        self.cost_usd = self.cost_usd.zip(other.cost_usd).map(|(a, b)| a.saturating_add(b));
        self.known = (known != self.read_as_zero()).then_some(known);
    }

    /// The tokens and cost a budget counts: those known. (A frame recorded before `known` was
    /// counts an unknown sum as nothing, as it was counted then.)
    pub fn known(&self) -> Known {
        self.known.unwrap_or_else(|| self.read_as_zero())
    }

    /// The sums with an unknown one read as 0.
    fn read_as_zero(&self) -> Known {
        Known::read_as_zero(&self.counts, self.cost_usd)
    }
}

impl Known {
    /// `counts` and `cost` with an unknown one read as 0 (what they add to what is known).
    pub fn read_as_zero(counts: &Counts, cost: Option<Micros>) -> Self {
        let tokens = counts.input_tokens.unwrap_or_default().saturating_add(counts.output_tokens.unwrap_or_default());
        Self { tokens, cost_usd: cost.unwrap_or_default() }
    }

    fn plus(self, other: Self) -> Self {
        Self {
            tokens: self.tokens.saturating_add(other.tokens),
            cost_usd: self.cost_usd.saturating_add(other.cost_usd),
        }
    }
}

/// The `usage` of a frame (its calls) or of a run, a plan version or a node (their frames added
/// up): the tally and the models that answered, in the order they first did. A run's total on
/// `complete` also breaks the tally down by model.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    #[serde(flatten)]
    pub tally: Tally,
    pub models: Vec<String>,
    /// The route entries (`<endpoint>/<model>` as asked) that answered, in the order they first
    /// did: with `models` (as the responses name them), which model answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answered_by: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_model: Option<BTreeMap<String, Tally>>,
}

impl Usage {
    /// The usage of `calls`; `None` for no call (a frame without model calls has no `usage`).
    /// Calls answered by more than one model are also broken down by model, so that the run's
    /// breakdown stays exact.
    pub fn of_calls(calls: &[CallUsage]) -> Option<Self> {
        if calls.is_empty() {
            return None;
        }
        let mut usage = Self::default();
        let mut by_model: BTreeMap<String, Tally> = BTreeMap::new();
        for call in calls {
            usage.tally.add_call(call);
            by_model.entry(call.model.clone()).or_default().add_call(call);
            if !usage.models.contains(&call.model) {
                usage.models.push(call.model.clone());
            }
            if let Some(route) = call.route.as_ref().filter(|r| !usage.answered_by.contains(r)) {
                usage.answered_by.push(route.clone());
            }
        }
        usage.by_model = (by_model.len() > 1).then_some(by_model);
        Some(usage)
    }

    /// Adds another usage (a frame's, say) to this one, and to its breakdown by model if it
    /// keeps one.
    pub fn add(&mut self, other: &Self) {
        self.tally.add(&other.tally);
        for model in &other.models {
            if !self.models.contains(model) {
                self.models.push(model.clone());
            }
        }
        for route in &other.answered_by {
            if !self.answered_by.contains(route) {
                self.answered_by.push(route.clone());
            }
        }
        let Some(by_model) = &mut self.by_model else { return };
        match (&other.by_model, other.models.as_slice()) {
            (Some(theirs), _) => {
                for (model, tally) in theirs {
                    by_model.entry(model.clone()).or_default().add(tally);
                }
            }
            (None, [model]) => by_model.entry(model.clone()).or_default().add(&other.tally),
            (None, _) => {}
        }
    }

    /// An empty total that keeps a breakdown by model (a run's).
    pub fn by_model() -> Self {
        Self { by_model: Some(BTreeMap::new()), ..Self::default() }
    }

    /// Input and output tokens together; unknown if any call did not report them.
    pub fn tokens(&self) -> Option<u64> {
        self.tally.counts.tokens()
    }
}

/// `2 calls, 1500 in + 150 out tokens, $0.0039` for people (the command line, the console); an
/// unknown count is `?`, an unknown cost (a model without a price) `cost unknown`.
impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = |n: Option<u64>| n.map_or_else(|| "?".to_string(), |n| n.to_string());
        let tally = &self.tally;
        let calls = if tally.calls == 1 { "call" } else { "calls" };
        let (input, output) = (count(tally.counts.input_tokens), count(tally.counts.output_tokens));
        let cost = tally.cost_usd.map_or_else(|| "cost unknown".to_string(), |cost| cost.to_string());
        write!(f, "{} {calls}, {input} in + {output} out tokens, {cost}", tally.calls)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn price(input: f64, output: f64, cached: f64) -> Price {
        let m = |d| Micros::from_dollars(d).unwrap();
        Price { input: m(input), output: m(output), cached_input: m(cached) }
    }

    fn counts(input: u64, output: u64, cached: Option<u64>, reasoning: Option<u64>) -> Counts {
        Counts {
            input_tokens: Some(input),
            output_tokens: Some(output),
            cached_input_tokens: cached,
            reasoning_tokens: reasoning,
        }
    }

    #[test]
    fn a_call_costs_its_tokens_at_the_price_of_the_model_that_answered() {
        let prices = Prices::new(BTreeMap::from([("big".to_string(), price(2.5, 10.0, 1.25))]));
        // 1,000 input tokens of which 400 cached, 200 output: 600×2.5 + 400×1.25 + 200×10 µ$ = 4,000 µ$.
        let call = CallUsage::priced(&prices, "big", Some("big"), counts(1_000, 200, Some(400), Some(50)));
        assert_eq!(call.cost, Some(Micros(4_000)));
        // The reported name is unknown: the requested one is priced.
        let call = CallUsage::priced(&prices, "big", Some("big-2026-01-01"), counts(1_000, 0, None, None));
        assert_eq!((call.model.as_str(), call.cost), ("big-2026-01-01", Some(Micros(2_500))));
        // No price, or unknown tokens: unknown cost.
        assert_eq!(CallUsage::priced(&prices, "small", None, counts(1, 1, None, None)).cost, None);
        assert_eq!(CallUsage::priced(&prices, "big", None, Counts::default()).cost, None);
    }

    #[test]
    fn costs_round_once_per_call_to_the_micro_dollar() {
        let prices = Prices::new(BTreeMap::from([("m".to_string(), price(0.15, 0.6, 0.075))]));
        // 7 input tokens at $0.15/Mtok = 1.05 µ$ → 1; 3 output at $0.6/Mtok = 1.8 µ$ → together 2.85 → 3.
        let call = CallUsage::priced(&prices, "m", None, counts(7, 3, None, None));
        assert_eq!(call.cost, Some(Micros(3)));
    }

    #[test]
    fn an_unknown_part_makes_the_sum_unknown_and_sums_are_exact() {
        let prices = Prices::new(BTreeMap::from([("m".to_string(), price(0.1, 0.3, 0.1))]));
        let known = CallUsage::priced(&prices, "m", None, counts(10_000_000, 1_000_000, Some(0), None));
        let unreported = CallUsage::priced(&prices, "m", None, Counts::default());
        let frame = Usage::of_calls(&[known.clone(), known.clone()]).unwrap();
        assert_eq!(frame.tally.calls, 2);
        assert_eq!(frame.tally.counts.input_tokens, Some(20_000_000));
        assert_eq!(frame.tally.counts.reasoning_tokens, None, "no call reported reasoning tokens");
        assert_eq!(frame.tally.cost_usd, Some(Micros(2_600_000)));
        let mut run = Usage::by_model();
        run.add(&frame);
        run.add(&Usage::of_calls(&[unreported]).unwrap());
        assert_eq!(run.tally.calls, 3);
        assert_eq!(run.tally.counts.input_tokens, None);
        assert_eq!(run.tally.cost_usd, None);
        assert_eq!(run.by_model.as_ref().unwrap()["m"].calls, 3);
        assert_eq!(Usage::of_calls(&[]), None);
    }

    #[test]
    fn the_wire_shape_names_every_count_and_shows_unknowns_as_null() {
        let prices = Prices::new(BTreeMap::from([("m".to_string(), price(1.0, 2.0, 0.5))]));
        let call = CallUsage::priced(&prices, "m", None, counts(1_200, 300, Some(200), Some(40)));
        let usage = Usage::of_calls(&[call, CallUsage::priced(&prices, "x", None, counts(1, 1, None, None))]).unwrap();
        let wire = serde_json::to_value(&usage).unwrap();
        assert_eq!(
            wire,
            json!({"calls": 2, "inputTokens": 1_201, "outputTokens": 301, "cachedInputTokens": null,
                   "reasoningTokens": null, "costUsd": null, "known": {"totalTokens": 1_502, "costUsd": 0.0017},
                   "models": ["m", "x"],
                   "byModel": {
                       "m": {"calls": 1, "inputTokens": 1_200, "outputTokens": 300, "cachedInputTokens": 200,
                             "reasoningTokens": 40, "costUsd": 0.0017},
                       "x": {"calls": 1, "inputTokens": 1, "outputTokens": 1, "cachedInputTokens": null,
                             "reasoningTokens": null, "costUsd": null}}})
        );
        let mut run = Usage::by_model();
        run.add(&usage);
        assert_eq!(run.by_model, usage.by_model, "a frame's breakdown is added model by model");
        let single = Usage::of_calls(&[CallUsage::priced(&prices, "m", None, counts(1_200, 300, Some(200), Some(40)))]);
        let wire = serde_json::to_value(single.as_ref().unwrap()).unwrap();
        assert_eq!(wire["costUsd"], json!(0.0017), "1,000×1 + 200×0.5 + 300×2 µ$");
        let back: Usage = serde_json::from_value(wire).unwrap();
        assert_eq!(Some(back), single);
    }

    #[test]
    fn people_read_usage_in_one_line() {
        let prices = Prices::new(BTreeMap::from([("m".to_string(), price(2.0, 8.0, 0.5))]));
        let usage = Usage::of_calls(&[CallUsage::priced(&prices, "m", None, counts(1_500, 150, None, None))]).unwrap();
        assert_eq!(usage.to_string(), "1 call, 1500 in + 150 out tokens, $0.0042");
        let unknown = Usage::of_calls(&[CallUsage::priced(&prices, "x", None, Counts::default())]).unwrap();
        assert_eq!(unknown.to_string(), "1 call, ? in + ? out tokens, cost unknown");
        assert_eq!(Micros(12_000_000).to_string(), "$12");
        assert_eq!(Micros(1).to_string(), "$0.000001");
    }

    #[test]
    fn dollars_round_trip_through_their_wire_form() {
        for micros in [0, 1, 3, 999_999, 1_000_000, 4_200, 123_456_789, 9_007_199_254_740_992] {
            let text = serde_json::to_string(&Micros(micros)).unwrap();
            assert_eq!(serde_json::from_str::<Micros>(&text).unwrap(), Micros(micros), "{text}");
        }
        assert_eq!(Micros::from_dollars(-0.01), None);
        assert_eq!(Micros::from_dollars(f64::NAN), None);
        assert_eq!(Micros::from_dollars(f64::INFINITY), None);
    }
}
