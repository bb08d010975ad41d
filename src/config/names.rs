//! Name rules (DNS labels, target names) and suggestions of the nearest known word.

/// Why `s` is not a DNS label (RFC 1123: what Kubernetes names of namespaces need), if it isn't.
pub fn dns_label_problem(s: &str) -> Option<&'static str> {
    if s.is_empty() {
        return Some("must not be empty");
    }
    if s.len() > 63 {
        return Some("is longer than 63 characters");
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Some("must be a DNS label: lowercase letters, digits and '-'");
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Some("must start and end with a letter or digit");
    }
    None
}

/// Target names end up in lock and record names and in reports.
pub(super) fn target_name_problem(s: &str) -> Option<&'static str> {
    if s.trim().is_empty() {
        return Some("must not be empty");
    }
    if s.len() > 63 {
        return Some("is longer than 63 characters");
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Some("may only contain letters, digits, '-', '_' and '.'");
    }
    None
}

/// The candidate closest to `word` by edit distance, if it is close enough to be a typo.
pub fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let word_lower = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (edit_distance(&word_lower, &c.to_ascii_lowercase()), *c))
        .filter(|(d, c)| *d <= (c.chars().count().max(word.chars().count()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
