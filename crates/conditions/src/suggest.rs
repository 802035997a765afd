//! "Did you mean": the known name closest to a misspelt one. Pure, no I/O; used for unknown
//! fields of request bodies, unknown condition variables and unknown JSON-Logic operators.

/// The candidate closest to `word`, if one is close enough to be a plausible typo: at most one
/// edit per three characters (at least one). Case and `_`/`-` are ignored, so `goalConditions`
/// finds `goal_condition`.
///
/// Why that threshold: the distance is Damerau-Levenshtein, so a slipped, missing, extra or
/// swapped character is one edit. A name of a few characters with two such edits is mostly a
/// different name, so suggesting one would mislead more than it helps; a longer name stays
/// recognisable through more slips, so the allowance grows with its length. At least one edit is
/// always allowed, so a single slip in a short name is still caught. Case and separators are
/// spelling conventions (`camelCase` against `snake_case`), not typos, so they cost nothing.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let normalise = |s: &str| s.to_lowercase().replace(['_', '-'], "");
    let target = normalise(word);
    let allowed = (target.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|candidate| (candidate, strsim::damerau_levenshtein(&target, &normalise(candidate))))
        .filter(|(_, distance)| *distance <= allowed)
        .min_by_key(|(_, distance)| *distance)
        .map(|(candidate, _)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_ignores_far_candidates() {
        assert_eq!(closest("zzz", ["objective", "inputs"]), None);
        assert_eq!(closest("objectve", ["objective", "inputs"]), Some("objective"));
    }
}
