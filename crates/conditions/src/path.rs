//! The `path` of a goal condition: a JSON Pointer (RFC 6901) into a facet's value.

use std::fmt;

use jsonptr::PointerBuf;
use serde::{Serialize, Serializer};
use serde_json::Value;

/// A validated path into a facet value. Keeps the caller's spelling for display and the
/// normalised pointer for resolution.
#[derive(Clone, PartialEq, Eq)]
pub struct FacetPath {
    written: String,
    pointer: PointerBuf,
}

impl FacetPath {
    /// Parses a path as written by a caller.
    ///
    /// `""`, `"#"` and `"#/"` mean the whole value; a leading `#` (URI fragment form) is dropped;
    /// the index form `/variants[0]` is accepted too and read as `/variants/0`. Anything else must
    /// be an RFC 6901 pointer; the error says what is wrong.
    pub fn parse(written: &str) -> Result<Self, String> {
        let trimmed = written.strip_prefix('#').unwrap_or(written);
        let normalised =
            if trimmed == "/" && written.starts_with('#') { String::new() } else { rewrite_indexes(trimmed)? };
        let pointer = PointerBuf::parse(normalised).map_err(|e| match e.original() {
            jsonptr::ParseError::NoLeadingSlash => {
                format!("`{written}` is not a JSON Pointer: it must be empty or start with `/`")
            }
            jsonptr::ParseError::InvalidEncoding { .. } => {
                format!("`{written}` is not a JSON Pointer: `~` must be followed by `0` (for ~) or `1` (for /)")
            }
        })?;
        Ok(Self { written: written.to_string(), pointer })
    }

    /// The path as the caller wrote it.
    pub fn as_written(&self) -> &str {
        &self.written
    }

    /// The value at this path inside `value`, if it exists (`null` counts as existing).
    pub fn resolve<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        self.pointer.resolve(value).ok()
    }

    /// The segments, decoded.
    pub fn segments(&self) -> Vec<String> {
        self.pointer.tokens().map(|t| t.decoded().into_owned()).collect()
    }

    /// The last segment, decoded: the name a scalar value is known by in a condition.
    pub fn last_segment(&self) -> Option<String> {
        self.pointer.last().map(|t| t.decoded().into_owned())
    }
}

/// `a[0][1]` → `a/0/1`, rejecting unbalanced or non-numeric brackets.
fn rewrite_indexes(path: &str) -> Result<String, String> {
    if !path.contains('[') && !path.contains(']') {
        return Ok(path.to_string());
    }
    let mut out = String::with_capacity(path.len() + 4);
    let mut rest = path;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find(']').map(|i| open + i).ok_or_else(|| bad_index(path))?;
        let index = &rest[open + 1..close];
        if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad_index(path));
        }
        out.push('/');
        out.push_str(index);
        rest = &rest[close + 1..];
    }
    if rest.contains(']') {
        return Err(bad_index(path));
    }
    out.push_str(rest);
    Ok(out)
}

fn bad_index(path: &str) -> String {
    format!("`{path}` has a malformed index: write `/items/0` or `/items[0]`")
}

impl fmt::Debug for FacetPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.written)
    }
}

impl fmt::Display for FacetPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written)
    }
}

impl Serialize for FacetPath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_value_forms() {
        let v = json!({"a": 1});
        for p in ["", "#", "#/"] {
            assert_eq!(FacetPath::parse(p).unwrap().resolve(&v), Some(&v), "{p}");
        }
    }

    #[test]
    fn index_form_and_escapes() {
        let v = json!({"variants": [{"score": 0.9}], "a/b": {"~": true}});
        assert_eq!(FacetPath::parse("/variants[0]/score").unwrap().resolve(&v), Some(&json!(0.9)));
        assert_eq!(FacetPath::parse("/variants/0/score").unwrap().resolve(&v), Some(&json!(0.9)));
        assert_eq!(FacetPath::parse("/a~1b/~0").unwrap().resolve(&v), Some(&json!(true)));
        assert_eq!(FacetPath::parse("#/variants/0").unwrap().last_segment().as_deref(), Some("0"));
    }

    #[test]
    fn null_resolves_missing_does_not() {
        let v = json!({"a": null});
        assert_eq!(FacetPath::parse("/a").unwrap().resolve(&v), Some(&Value::Null));
        assert_eq!(FacetPath::parse("/b").unwrap().resolve(&v), None);
        assert_eq!(FacetPath::parse("/a/x").unwrap().resolve(&v), None);
    }

    #[test]
    fn rejects_malformed_paths() {
        for bad in ["status", "/a~2", "/a[x]", "/a[0", "/a]"] {
            let err = FacetPath::parse(bad).unwrap_err();
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }
}
