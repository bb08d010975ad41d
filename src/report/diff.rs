//! Unified diffs of two texts (`git diff` style, 3 lines of context), and how they are shown:
//! coloured green/red on a terminal, plain in CI or with `NO_COLOR`, cut per object past a
//! number of lines with a note that says so (never silently).

use similar::{ChangeTag, TextDiff};

/// Lines of one object's diff shown on a terminal or in a comment before it is cut.
pub const MAX_DIFF_LINES: usize = 200;

/// The unified diff from `before` to `after`, with `---`/`+++` headers named by the labels;
/// empty when the texts are equal.
pub fn unified(before: &str, after: &str, before_label: &str, after_label: &str) -> String {
    if before == after {
        return String::new();
    }
    let diff = TextDiff::from_lines(before, after);
    let mut out = diff
        .unified_diff()
        .context_radius(3)
        .header(before_label, after_label)
        .to_string();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// How many lines a diff adds and removes (headers not counted).
pub fn stats(before: &str, after: &str) -> (usize, usize) {
    let diff = TextDiff::from_lines(before, after);
    diff.iter_all_changes()
        .fold((0, 0), |(add, del), c| match c.tag() {
            ChangeTag::Insert => (add + 1, del),
            ChangeTag::Delete => (add, del + 1),
            ChangeTag::Equal => (add, del),
        })
}

/// How to show a diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiffStyle {
    /// ANSI colours (terminal, no NO_COLOR).
    pub color: bool,
    /// Lines shown per object before the cut.
    pub max_lines: usize,
}

impl DiffStyle {
    pub fn plain() -> DiffStyle {
        DiffStyle {
            color: false,
            max_lines: MAX_DIFF_LINES,
        }
    }
}

const RED: &str = "\u{1b}[31m";
const GREEN: &str = "\u{1b}[32m";
const CYAN: &str = "\u{1b}[36m";
const BOLD: &str = "\u{1b}[1m";
const RESET: &str = "\u{1b}[0m";

/// A unified diff as shown: every line indented by `indent`, coloured if asked, cut after
/// `max_lines` lines with a note naming how many were left out and where the rest is.
pub fn render(diff: &str, style: DiffStyle, indent: &str) -> String {
    let lines: Vec<&str> = diff.lines().collect();
    let shown = lines.len().min(style.max_lines.max(1));
    let mut out = String::new();
    for line in &lines[..shown] {
        out.push_str(indent);
        if style.color {
            let color = if line.starts_with("+++") || line.starts_with("---") {
                BOLD
            } else if line.starts_with('+') {
                GREEN
            } else if line.starts_with('-') {
                RED
            } else if line.starts_with("@@") {
                CYAN
            } else {
                ""
            };
            if color.is_empty() {
                out.push_str(line);
            } else {
                out.push_str(color);
                out.push_str(line);
                out.push_str(RESET);
            }
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    if shown < lines.len() {
        out.push_str(indent);
        out.push_str(&cut_note(lines.len() - shown));
        out.push('\n');
    }
    out
}

/// The note at the end of a cut diff.
pub fn cut_note(left_out: usize) -> String {
    format!(
        "… diff cut here: {left_out} more line(s) of this object not shown; `-o json` has the whole diff"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unified_table() {
        let cases = [
            ("a: 1\n", "a: 1\n", ""),
            (
                "a: 1\nb: 2\n",
                "a: 1\nb: 3\n",
                "--- live\n+++ dry run\n@@ -1,2 +1,2 @@\n a: 1\n-b: 2\n+b: 3\n",
            ),
            (
                "",
                "a: 1\n",
                "--- live\n+++ dry run\n@@ -0,0 +1 @@\n+a: 1\n",
            ),
        ];
        for (before, after, want) in cases {
            assert_eq!(
                unified(before, after, "live", "dry run"),
                want,
                "{before:?}"
            );
        }
        assert_eq!(stats("a\nb\n", "a\nc\nd\n"), (2, 1));
    }

    #[test]
    fn render_plain_colour_and_cut() {
        let diff = unified("a: 1\nb: 2\n", "a: 1\nb: 3\n", "live", "dry run");
        let plain = render(&diff, DiffStyle::plain(), "  ");
        assert_eq!(
            plain,
            "  --- live\n  +++ dry run\n  @@ -1,2 +1,2 @@\n   a: 1\n  -b: 2\n  +b: 3\n"
        );
        assert!(!plain.contains('\u{1b}'));
        let colored = render(
            &diff,
            DiffStyle {
                color: true,
                max_lines: 100,
            },
            "",
        );
        assert!(colored.contains("\u{1b}[31m-b: 2\u{1b}[0m"), "{colored:?}");
        assert!(colored.contains("\u{1b}[32m+b: 3\u{1b}[0m"), "{colored:?}");
        let cut = render(
            &diff,
            DiffStyle {
                color: false,
                max_lines: 4,
            },
            "",
        );
        assert_eq!(cut.lines().count(), 5, "{cut}");
        assert!(cut.ends_with(&format!("{}\n", cut_note(2))), "{cut}");
    }
}
