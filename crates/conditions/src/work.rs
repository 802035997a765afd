//! How much an evaluation may do, bounded before it starts.
//!
//! A rule is small, but what it does grows with the data it iterates: `some` nested in `some`
//! over two arrays of a thousand elements evaluates its predicate a million times, four deep a
//! million million; a `reduce` whose body `cat`s its accumulator twice doubles a string with
//! every element. The engine has no step or memory budget and cannot be interrupted, so a rule
//! whose evaluation over this data could exceed [`MOST_WORK`] is refused before it starts.
//!
//! The estimate is an upper bound, worked out from the rule and two figures of the data (its
//! longest array, and its size in elements and string bytes): every operator counts one step,
//! an iteration counts its body once for each element it may have, and an operator that builds
//! a value (`cat`, `merge`, `map`, …) counts the elements and bytes it may build. A collection a
//! rule iterates at its top level (not inside another iteration) by a `var` path is looked up in
//! the data, so its real length counts; one inside an iteration counts as the longest array of
//! the data. A rule with no iteration and no building operator does one step per operator, and
//! is not estimated at all.
//!
//! Comparing two long strings is counted as one step, not by their length.

use serde_json::Value;

/// The most steps one evaluation may take (about a second of the engine's time at worst).
pub const MOST_WORK: u64 = 20_000_000;

/// Operators that evaluate their second argument once per element of their first.
const ITERATING: [&str; 5] = ["some", "all", "none", "filter", "map"];

/// Operators whose result may be as large as all their operands together.
const BUILDING: [&str; 15] = [
    "cat", "merge", "substr", "split", "upper", "lower", "trim", "sort", "slice", "distinct", "group_by", "keys",
    "values", "entries", "map",
];

/// Whether evaluations of `rule` are to be estimated: it iterates or builds values.
pub fn needs_estimate(rule: &Value) -> bool {
    match rule {
        Value::Array(items) => items.iter().any(needs_estimate),
        Value::Object(map) => map.iter().any(|(key, value)| {
            let op = (map.len() == 1).then_some(key.as_str());
            op.is_some_and(|op| op == "reduce" || ITERATING.contains(&op) || BUILDING.contains(&op))
                || needs_estimate(value)
        }),
        _ => false,
    }
}

/// Refuses an evaluation of `rule` over `data` that could take more than [`MOST_WORK`] steps.
pub fn check(rule: &Value, data: &Value) -> Result<(), String> {
    let figures = Figures::of(data);
    let work = Estimate { data, figures }.cost(rule, Scope::Top).work;
    if work <= MOST_WORK {
        return Ok(());
    }
    Err(format!(
        "the condition could take more than {MOST_WORK} steps over this data (it iterates or builds values over \
         arrays of up to {} elements): it is not evaluated",
        figures.longest
    ))
}

/// The two figures of the data an estimate uses.
#[derive(Debug, Clone, Copy)]
struct Figures {
    /// The most elements of one of its arrays.
    longest: u64,
    /// Its elements and string bytes, all of them: the most a value read from it can hold.
    size: u64,
}

impl Figures {
    fn of(data: &Value) -> Self {
        let mut figures = Self { longest: 0, size: 0 };
        let mut stack = vec![data];
        while let Some(value) = stack.pop() {
            figures.size = figures.size.saturating_add(1);
            match value {
                Value::Array(items) => {
                    figures.longest = figures.longest.max(count(items.len()));
                    stack.extend(items);
                }
                Value::Object(map) => stack.extend(map.values()),
                Value::String(text) => figures.size = figures.size.saturating_add(count(text.len())),
                _ => {}
            }
        }
        figures
    }
}

/// Where a part of the rule is evaluated: at the top (reading the data itself), inside an
/// iteration, or inside a `reduce` whose accumulator may hold `accumulator` elements and bytes.
#[derive(Debug, Clone, Copy)]
enum Scope {
    Top,
    Iterated,
    Reduced { accumulator: u64 },
}

/// Steps an evaluation may take, and the most elements and bytes its result may hold.
#[derive(Debug, Clone, Copy)]
struct Cost {
    work: u64,
    size: u64,
}

struct Estimate<'d> {
    data: &'d Value,
    figures: Figures,
}

impl Estimate<'_> {
    fn cost(&self, rule: &Value, scope: Scope) -> Cost {
        match rule {
            Value::Array(items) => self.all(items, scope),
            Value::Object(map) if map.len() == 1 => match map.iter().next() {
                Some((op, args)) => self.operator(op, args, scope),
                None => Cost { work: 1, size: 1 },
            },
            Value::Object(map) => self.all(map.values(), scope),
            Value::String(text) => Cost { work: 1, size: count(text.len()).saturating_add(1) },
            _ => Cost { work: 1, size: 1 },
        }
    }

    /// A list of values, each evaluated.
    fn all<'v>(&self, items: impl IntoIterator<Item = &'v Value>, scope: Scope) -> Cost {
        items.into_iter().fold(Cost { work: 1, size: 1 }, |sum, item| {
            let cost = self.cost(item, scope);
            Cost { work: sum.work.saturating_add(cost.work), size: sum.size.saturating_add(cost.size) }
        })
    }

    fn operator(&self, op: &str, args: &Value, scope: Scope) -> Cost {
        let args = match args {
            Value::Array(items) => items.as_slice(),
            single => std::slice::from_ref(single),
        };
        match op {
            "var" | "val" => Cost { work: 1, size: self.read_size(args, scope) },
            "reduce" => self.reduce(args, scope),
            _ if ITERATING.contains(&op) => self.iterate(op, args, scope),
            _ => {
                let operands = self.all(args, scope);
                if BUILDING.contains(&op) {
                    Cost { work: operands.work.saturating_add(operands.size), size: operands.size }
                } else {
                    // A comparison, test or sum yields a scalar; `if`, `or`, `??`, … one operand.
                    Cost { work: operands.work, size: operands.size }
                }
            }
        }
    }

    /// What a `var` or `val` may yield: a reduce's accumulator, else anything in the data.
    fn read_size(&self, args: &[Value], scope: Scope) -> u64 {
        match (scope, args.first()) {
            (Scope::Reduced { accumulator }, Some(Value::String(name))) if name == "accumulator" => accumulator,
            _ => self.figures.size,
        }
    }

    fn iterate(&self, op: &str, args: &[Value], scope: Scope) -> Cost {
        let (collection, body) = (args.first().unwrap_or(&Value::Null), args.get(1).unwrap_or(&Value::Null));
        let over = self.cost(collection, scope);
        let elements = self.elements(collection, over, scope);
        // The DSL's quantifier over the data itself (`dsl::ROOT_FRAME`) reads the data as the top.
        let framed = collection == &*crate::dsl::ROOT_FRAME;
        let inner = if framed || matches!(scope, Scope::Reduced { .. }) { scope } else { Scope::Iterated };
        let body = self.cost(body, inner);
        let work = over.work.saturating_add(elements.saturating_mul(body.work)).saturating_add(1);
        let size = match op {
            "map" => elements.saturating_mul(body.size).saturating_add(1),
            "filter" => over.size,
            _ => 1,
        };
        Cost { work: if op == "map" { work.saturating_add(size) } else { work }, size }
    }

    /// `reduce`: its body once per element, each time with the accumulator the last one built.
    fn reduce(&self, args: &[Value], scope: Scope) -> Cost {
        let collection = args.first().unwrap_or(&Value::Null);
        let over = self.cost(collection, scope);
        let elements = self.elements(collection, over, scope);
        let initial = self.cost(args.get(2).unwrap_or(&Value::Null), scope);
        let body = args.get(1).unwrap_or(&Value::Null);
        let mut cost = Cost { work: over.work.saturating_add(initial.work), size: initial.size };
        let mut step = 0;
        while step < elements && cost.work <= MOST_WORK {
            let once = self.cost(body, Scope::Reduced { accumulator: cost.size });
            cost = Cost { work: cost.work.saturating_add(once.work), size: once.size };
            step += 1;
        }
        cost
    }

    /// How many elements an iteration over `collection` may see: at the top, a `var` path's real
    /// length; elsewhere no more than the data's longest array or what the collection may hold.
    fn elements(&self, collection: &Value, cost: Cost, scope: Scope) -> u64 {
        let read = match collection {
            // A filter yields some of its collection's elements.
            Value::Object(map) if map.len() == 1 && map.contains_key("filter") => {
                let filtered = map.get("filter").and_then(Value::as_array).and_then(|args| args.first());
                return filtered.map_or(0, |inner| self.elements(inner, self.cost(inner, scope), scope));
            }
            Value::Object(map) if map.len() == 1 => map.get("var").or_else(|| map.get("val")),
            Value::Array(items) => return count(items.len()),
            _ => return 0,
        };
        match (scope, read) {
            (Scope::Top, Some(path)) => self.top_level_length(path).unwrap_or(self.figures.longest),
            (_, Some(_)) => self.figures.longest,
            (_, None) => cost.size,
        }
    }

    /// The length of the array a top-level `var` reads (0 if it reads no array), when its path
    /// is a plain dotted one.
    fn top_level_length(&self, path: &Value) -> Option<u64> {
        let path = match path {
            Value::String(path) => path.as_str(),
            Value::Array(items) => items.first()?.as_str()?,
            _ => return None,
        };
        let mut at = self.data;
        for segment in path.split('.').filter(|s| !s.is_empty()) {
            at = match at {
                Value::Object(map) => map.get(segment)?,
                Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
                _ => return Some(0),
            };
        }
        Some(at.as_array().map_or(0, |items| count(items.len())))
    }
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn array(n: usize) -> Value {
        Value::Array(vec![json!(1); n])
    }

    #[test]
    fn nested_iterations_over_long_arrays_are_refused() {
        let a = array(1000);
        let four_deep = json!({"some": [a, {"some": [a, {"some": [a, {"some": [a, false]}]}]}]});
        let error = check(&four_deep, &json!({})).unwrap_err();
        assert!(error.contains("more than 20000000 steps"), "{error}");
        let two_deep = json!({"some": [a, {"some": [a, false]}]});
        assert_eq!(check(&two_deep, &json!({})), Ok(()), "a million steps is within the bound");
    }

    #[test]
    fn a_top_level_collection_counts_its_real_length() {
        let rule = json!({"some": [{"var": "items"}, {"some": [{"val": [[1], "other"]}, {"==": [{"var": ""}, 2]}]}]});
        let small = json!({"items": array(10), "other": array(10), "big": array(100_000)});
        assert_eq!(check(&rule, &small), Ok(()), "10 × the longest array (100,000) × the body");
        let big = json!({"items": array(1000), "other": array(10), "big": array(100_000)});
        assert!(check(&rule, &big).is_err(), "1,000 × 100,000: the inner collection may be the longest array");
    }

    #[test]
    fn a_reduce_doubling_its_accumulator_is_refused_and_one_adding_to_it_is_not() {
        let doubling = json!({"reduce": [array(40), {"cat": [{"var": "accumulator"}, {"var": "accumulator"}]}, "xx"]});
        assert!(check(&doubling, &json!({})).is_err());
        let sum = json!({"reduce": [{"var": "xs"}, {"+": [{"var": "current"}, {"var": "accumulator"}]}, 0]});
        assert_eq!(check(&sum, &json!({"xs": array(10_000)})), Ok(()));
    }

    #[test]
    fn building_from_large_values_counts_what_is_built() {
        let text = "x".repeat(1_000_000);
        let many: Vec<Value> = (0..30).map(|_| json!({"var": "text"})).collect();
        assert!(check(&json!({"cat": many}), &json!({"text": text})).is_err(), "30 copies of 1 MB");
        assert_eq!(check(&json!({"cat": [{"var": "text"}, "!"]}), &json!({"text": text})), Ok(()));
    }

    #[test]
    fn only_rules_that_iterate_or_build_are_estimated() {
        assert!(!needs_estimate(&json!({"and": [{">=": [{"var": "a"}, 1]}, {"!": {"missing": ["b"]}}]})));
        assert!(needs_estimate(&json!({"!": {"some": [{"var": "a"}, true]}})));
        assert!(needs_estimate(&json!({"==": [{"cat": ["a", "b"]}, "ab"]})));
    }
}
