//! Large values left out of documents that would otherwise grow with a run: the run document
//! (`GET /runs/{id}`) and the LangGraph `values`. A value left out is replaced by a marker,
//! `{"$elided": {"bytes": <its JSON size>, "href": <where to read it whole>}}`, so a reader knows
//! what is missing and where it is, and a document's size is bounded by its number of values,
//! not by what a capability or a model returned.

use std::io;

use serde_json::{Value, json};

/// Values larger than this (as JSON, bytes) are left out of a bounded document.
pub const INLINE_BYTES: usize = 64 * 1024;

/// The key of the marker that stands for a value left out.
pub const MARKER: &str = "$elided";

/// The size of `value` as JSON text, without writing it anywhere.
pub fn json_size(value: &Value) -> usize {
    let mut counter = Counter(0);
    // Writing to a counter cannot fail, and a `Value` always serialises.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

struct Counter(usize);

impl io::Write for Counter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The marker for a value of `bytes` left out, readable whole at `href` (if anywhere).
pub fn marker(bytes: usize, href: Option<String>) -> Value {
    let mut about = json!({"bytes": bytes});
    if let Some(href) = href {
        about["href"] = Value::String(href);
    }
    json!({ MARKER: about })
}

/// Replaces `value` with a marker if it is larger than `limit` bytes; says whether it did.
pub fn if_larger(value: &mut Value, limit: usize, href: impl FnOnce() -> Option<String>) -> bool {
    let bytes = json_size(value);
    if bytes <= limit {
        return false;
    }
    *value = marker(bytes, href());
    true
}

/// Bounds `document`: each value at one of `slots` (JSON Pointers) larger than
/// [`INLINE_BYTES`] is left out, then the largest remaining ones until the slots together take
/// at most `budget` bytes. `href` says where the value at a slot can be read whole.
pub fn bound(document: &mut Value, slots: &[String], budget: usize, href: impl Fn(&str) -> Option<String>) {
    let sizes: Vec<(usize, &String)> =
        slots.iter().filter_map(|slot| document.pointer(slot).map(|value| (json_size(value), slot))).collect();
    let out = left_out(&sizes.iter().map(|(size, _)| *size).collect::<Vec<_>>(), budget);
    for ((size, slot), out) in sizes.into_iter().zip(out) {
        if let Some(value) = document.pointer_mut(slot).filter(|_| out) {
            *value = marker(size, href(slot));
        }
    }
}

/// Which of values of `sizes` a bounded document leaves out: each larger than [`INLINE_BYTES`],
/// then the largest remaining (the first of equals first) until the rest take at most `budget`.
pub fn left_out(sizes: &[usize], budget: usize) -> Vec<bool> {
    let mut largest: Vec<(usize, usize)> = sizes.iter().copied().zip(0..).collect();
    largest.sort_by_key(|&(size, _)| std::cmp::Reverse(size));
    let mut total: usize = sizes.iter().sum();
    let mut out = vec![false; sizes.len()];
    for (size, i) in largest {
        if size <= INLINE_BYTES && total <= budget {
            break;
        }
        if let Some(out) = out.get_mut(i) {
            *out = true;
        }
        total -= size;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_the_json_texts() {
        for value in [json!(null), json!({"a": [1, "é", {"b": true}]}), json!("x".repeat(1000))] {
            assert_eq!(json_size(&value), value.to_string().len());
        }
    }

    #[test]
    fn large_values_are_left_out_then_the_largest_until_within_the_budget() {
        let big = "x".repeat(INLINE_BYTES);
        let mut document = json!({"a": big, "b": "y".repeat(40_000), "c": "z".repeat(30_000), "d": "small"});
        let slots: Vec<String> = ["/a", "/b", "/c", "/d", "/missing"].iter().map(|s| s.to_string()).collect();
        bound(&mut document, &slots, 50_000, |slot| Some(format!("/value?pointer={slot}")));
        assert_eq!(document["a"][MARKER]["bytes"], INLINE_BYTES + 2);
        assert_eq!(document["a"][MARKER]["href"], "/value?pointer=/a");
        assert_eq!(document["b"][MARKER]["bytes"], 40_002, "the largest left goes until the rest fits");
        assert_eq!(document["c"].as_str().map(str::len), Some(30_000));
        assert_eq!(document["d"], "small");
    }

    #[test]
    fn a_small_value_stays() {
        let mut value = json!({"ok": true});
        assert!(!if_larger(&mut value, INLINE_BYTES, || None));
        let mut large = json!("x".repeat(INLINE_BYTES + 1));
        assert!(if_larger(&mut large, INLINE_BYTES, || None));
        assert_eq!(large, json!({MARKER: {"bytes": INLINE_BYTES + 3}}));
    }
}
