//! Name rules (DNS labels, target names), suggestions of the nearest known word, and the
//! names of enumerated settings (one list for the flags, the environment and the file).

use clap::ValueEnum;

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

/// The candidate closest to `word` by edit distance (Levenshtein, `strsim`), if it is close
/// enough to be a typo: at most a third of the longer word's length, at least 1.
pub fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let word_lower = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| {
            (
                strsim::levenshtein(&word_lower, &c.to_ascii_lowercase()),
                *c,
            )
        })
        .filter(|(d, c)| *d <= (c.chars().count().max(word.chars().count()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// A value that is none of an enumerated setting's names (config file, environment, flag).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{got:?} is not one of {}{}", choices.join(", "), suggestion(near.as_deref()))]
pub struct NotOneOf {
    pub got: String,
    /// The accepted names, in their declared order (aliases left out).
    pub choices: Vec<String>,
    /// The nearest name, when `got` looks like a typo of it.
    pub near: Option<String>,
}

fn suggestion(near: Option<&str>) -> String {
    near.map(|n| format!("; did you mean {n:?}?"))
        .unwrap_or_default()
}

/// The names clap shows for `T` (its `ValueEnum` list, aliases left out).
pub fn choice_names<T: ValueEnum>() -> Vec<String> {
    T::value_variants()
        .iter()
        .filter_map(T::to_possible_value)
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_string())
        .collect()
}

/// Parses `s` (trimmed, any case, an alias too) as one of `T`'s names: the same list clap
/// checks the flag against, so the config file, the environment and the flag agree.
pub fn parse_choice<T: ValueEnum>(s: &str) -> Result<T, NotOneOf> {
    T::from_str(s.trim(), true).map_err(|_| {
        let choices = choice_names::<T>();
        let refs: Vec<&str> = choices.iter().map(String::as_str).collect();
        let near = nearest(s, &refs).map(str::to_string);
        NotOneOf {
            got: s.to_string(),
            choices,
            near,
        }
    })
}

/// One table per enumerated setting: its variants with their names (and other accepted
/// spellings). From it come `ALL`, `as_str`, `Display`, clap's `ValueEnum` (the flags) and
/// `FromStr` (the file and the environment, with [`NotOneOf`]'s message): one list for all.
macro_rules! named_choices {
    ($ty:ident { $($variant:ident => $name:literal $(| $alias:literal)*),+ $(,)? }) => {
        impl $ty {
            pub const ALL: [$ty; [$($name),+].len()] = [$($ty::$variant),+];
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }
        }
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl clap::ValueEnum for $ty {
            fn value_variants<'a>() -> &'a [Self] {
                &Self::ALL
            }
            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                Some(match self {
                    $($ty::$variant => clap::builder::PossibleValue::new($name)$(.alias($alias))*),+
                })
            }
        }
        impl std::str::FromStr for $ty {
            type Err = $crate::config::names::NotOneOf;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $crate::config::names::parse_choice(s)
            }
        }
    };
}
pub(crate) use named_choices;
