//! Prompt text in `### TITLE` sections, each within a budget of characters.
//!
//! What goes into a prompt comes from callers (objective, inputs), models (earlier outputs, plan
//! drafts) and operators. Every section is cut at its budget, with a visible marker saying how
//! much was left out, so a prompt stays bounded (in size and in what each call costs) whatever a
//! run carries: a megabyte objective or ten thousand diagnostics make a prompt of tens of KiB.

use std::fmt::{Display, Write as _};

use crate::excerpt::{Excerpt, excerpt};

/// Characters of one section.
pub const SECTION_CHARS: usize = 16_000;

/// Characters of the objective.
pub const OBJECTIVE_CHARS: usize = 8_000;

/// Characters of one value (an input, an output) within a section.
pub const VALUE_CHARS: usize = 2_000;

/// Appends `### title` and `body`, cut to `budget` characters.
pub fn section_within(out: &mut String, title: &str, body: &str, budget: usize) {
    let _ = write!(out, "### {title}\n{}\n\n", excerpt(body.trim_end(), budget));
}

/// Appends a section within [`SECTION_CHARS`].
pub fn section(out: &mut String, title: &str, body: &str) {
    section_within(out, title, body, SECTION_CHARS);
}

/// `value` in at most [`VALUE_CHARS`] characters (JSON is rendered only as far as it is shown).
pub fn value(value: impl Display) -> String {
    Excerpt(value, VALUE_CHARS).to_string()
}

/// The lines `lines` makes, one after another, until `budget` characters are spent; then one
/// line saying how many were left out. Lines past the budget are not even made.
pub fn lines_within<I>(lines: I, budget: usize) -> String
where
    I: IntoIterator<Item = String>,
    I::IntoIter: ExactSizeIterator,
{
    let mut lines = lines.into_iter();
    let total = lines.len();
    let (mut out, mut spent, mut shown) = (String::new(), 0, 0);
    for line in lines.by_ref() {
        let length = line.chars().count();
        if spent + length > budget && shown > 0 {
            break;
        }
        out.push_str(&excerpt(&line, budget));
        out.push('\n');
        spent += length;
        shown += 1;
    }
    if shown < total {
        let _ = writeln!(out, "… ({} more entries not shown)", total - shown);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_section_is_cut_at_its_budget_with_a_marker() {
        let mut out = String::new();
        section_within(&mut out, "OBJECTIVE", &"x".repeat(1_000_000), 100);
        assert!(out.starts_with("### OBJECTIVE\nxxx"));
        assert!(out.contains("… (999900 more characters)"), "{out}");
        assert!(out.len() < 200);
        let long = json!({"text": "y".repeat(10_000)});
        let shown = value(&long);
        assert!(shown.starts_with("{\"text\":\"yyy") && shown.ends_with("more characters)"), "{shown}");
    }

    #[test]
    fn a_list_stops_at_its_budget_and_counts_the_rest() {
        let lines = (0..10_000).map(|i| format!("- problem {i}"));
        let out = lines_within(lines, 100);
        assert!(out.starts_with("- problem 0\n- problem 1\n"));
        assert!(out.len() < 200, "{out}");
        assert!(out.trim_end().ends_with("more entries not shown)"), "{out}");
        assert_eq!(lines_within(["a".to_string()], 100), "a\n");
        // One line longer than the budget is shown cut, not dropped.
        let out = lines_within(["z".repeat(500)], 100);
        assert!(out.starts_with("zzz") && out.contains("400 more characters"), "{out}");
    }
}
