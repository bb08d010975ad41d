//! Making text from clusters, manifests, scripts and git inert in GitHub markdown.
//!
//! Such text is untrusted: an event message or a commit subject must not become a heading,
//! a link, an image, raw HTML, a math block, an `@mention` that pings someone, a `#123`
//! reference, a Mermaid statement or the end of a code block. Backslash escapes stop markdown
//! syntax; a zero-width space after `@` and `#` stops mentions and references (GitHub finds
//! those in the rendered text, where backslashes are already gone), and after the scheme of a
//! bare URL it stops autolinks.

/// U+200B ZERO WIDTH SPACE: invisible, but breaks `@name`, `#123` and `https://` patterns.
const ZWSP: char = '\u{200B}';

/// Text for a GitHub Actions log (stdout or stderr of a step): the runner reads every line
/// whose first non-blank characters are `::` as a workflow command (and `##[` anywhere as the
/// old form), so in untrusted text those get a zero-width space between their two marks. A
/// line break is `\n`, `\r\n` or a lone `\r` (the runner splits on each).
pub fn actions_log(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains("::") && !s.contains("##[") {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    let mut line_start = true;
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if line_start {
            let blank = rest.len() - rest.trim_start_matches([' ', '\t']).len();
            out.push_str(&rest[..blank]);
            rest = &rest[blank..];
            line_start = false;
            if rest.starts_with("::") {
                out.push(':');
                out.push(ZWSP);
                out.push(':');
                rest = &rest[2..];
            }
            continue;
        }
        if rest.starts_with("##[") {
            out.push('#');
            out.push(ZWSP);
            out.push_str("#[");
            rest = &rest[3..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
        line_start = matches!(c, '\n' | '\r');
    }
    std::borrow::Cow::Owned(out)
}

/// Plain text on one line: no markdown, HTML, links, mentions or references; safe in a table
/// cell (pipes are escaped) and after a list bullet.
pub fn text(s: &str) -> String {
    let one_line = s.replace("\r\n", " ").replace(['\r', '\n'], " ");
    let mut out = String::with_capacity(one_line.len() + 8);
    for (i, c) in one_line.char_indices() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '(' | ')' | '!' | '|' | '~' | '$' | '{' | '}' => {
                out.push('\\');
                out.push(c);
            }
            '@' | '#' => {
                out.push(c);
                out.push(ZWSP);
            }
            ':' if one_line[i..].starts_with("://") => {
                out.push(ZWSP);
                out.push(':');
            }
            '.' if ends_with_www(&out) => {
                out.push(ZWSP);
                out.push('.');
            }
            // Leading list, heading, quote and setext markers.
            '-' | '+' | '=' if out.is_empty() => {
                out.push('\\');
                out.push(c);
            }
            // "1." at the start would begin an ordered list (")" is always escaped).
            '.' if !out.is_empty() && out.chars().all(|d| d.is_ascii_digit()) => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Text inside raw HTML (a `<summary>`): there markdown is not interpreted, so no
/// backslashes, but HTML, mentions, references and autolinks are.
pub fn html_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for (i, c) in s.char_indices() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '@' | '#' => {
                out.push(c);
                out.push(ZWSP);
            }
            ':' if s[i..].starts_with("://") => {
                out.push(ZWSP);
                out.push(':');
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The content of an inline code span, outside a table: a backtick would end the span, and
/// a line break would end the line. Inside a code span markdown, HTML, mentions and
/// references are not interpreted.
pub fn code(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| match c {
            '`' => '\'',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    // A span cannot start or end with a space that would be stripped; an empty one is invisible.
    if out.trim().is_empty() {
        out = "\u{00A0}".to_string();
    }
    out
}

/// A fenced code block around `lines`, with a fence longer than any backtick run inside them,
/// so that no line can close it early.
pub fn code_block(lines: &[String]) -> String {
    let longest = lines.iter().map(|l| longest_run(l, '`')).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let mut out = format!("{fence}text\n");
    for line in lines {
        let clean: String = line
            .chars()
            .map(|c| if c.is_control() && c != '\t' { ' ' } else { c })
            .collect();
        out.push_str(&clean);
        out.push('\n');
    }
    out.push_str(&fence);
    out.push('\n');
    out
}

fn ends_with_www(s: &str) -> bool {
    let tail = s.as_bytes();
    tail.len() >= 3 && tail[tail.len() - 3..].eq_ignore_ascii_case(b"www")
}

fn longest_run(s: &str, ch: char) -> usize {
    let (mut best, mut run) = (0, 0);
    for c in s.chars() {
        if c == ch {
            run += 1;
            best = best.max(run);
        } else {
            run = 0;
        }
    }
    best
}

/// A name inside a Mermaid gantt chart (a section or task title): letters, digits and
/// `. _ / -` survive, anything else (`:` `;` `#` `%` quotes, backticks, line breaks) becomes
/// a space; a word that Mermaid reads as a keyword (`end`, `section`, ...) gets a suffix.
pub fn mermaid(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '.' | '_' | '/' | '-') {
                c
            } else {
                ' '
            }
        })
        .collect();
    let words: Vec<String> = cleaned
        .split_whitespace()
        .map(|w| {
            const KEYWORDS: [&str; 12] = [
                "end",
                "section",
                "title",
                "gantt",
                "dateformat",
                "axisformat",
                "excludes",
                "includes",
                "todaymarker",
                "tickinterval",
                "weekday",
                "click",
            ];
            if KEYWORDS.contains(&w.to_ascii_lowercase().as_str()) {
                format!("{w}_")
            } else {
                w.to_string()
            }
        })
        .collect();
    if words.is_empty() {
        "_".to_string()
    } else {
        words.join(" ")
    }
}

/// Text for the marker comment and other HTML comments: only `[A-Za-z0-9._-]`, so that
/// `-->` can never close the comment.
pub fn comment_word(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_') {
                c
            } else {
                '-'
            }
        })
        .collect::<String>()
        .replace("--", "-_")
}

/// A link target rollguard may write: http(s), no whitespace, nothing that could end the
/// markdown link or start HTML. Anything else is refused (None).
pub fn link_url(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let ok = !rest.is_empty()
        && rest.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(
                    c,
                    '-' | '.' | '_' | '~' | '/' | ':' | '?' | '=' | '&' | '%' | '+' | '#'
                )
        });
    ok.then_some(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_table() {
        let z = ZWSP;
        let cases: Vec<(&str, String)> = vec![
            ("plain words", "plain words".into()),
            (
                "<script>alert(1)</script>",
                "&lt;script&gt;alert\\(1\\)&lt;/script&gt;".into(),
            ),
            ("a|b", "a\\|b".into()),
            (
                "**bold** _it_ `code`",
                "\\*\\*bold\\*\\* \\_it\\_ \\`code\\`".into(),
            ),
            (
                "[click](https://evil.example)",
                format!("\\[click\\]\\(https{z}://evil.example\\)"),
            ),
            ("![img](x.png)", "\\!\\[img\\]\\(x.png\\)".into()),
            ("ping @octocat now", format!("ping @{z}octocat now")),
            ("fixes #123", format!("fixes #{z}123")),
            ("see www.evil.example", format!("see www{z}.evil.example")),
            (
                "line one\nline two\r\nthree",
                "line one line two three".into(),
            ),
            ("# heading", format!("#{z} heading")),
            ("- item", "\\- item".into()),
            ("1. first", "1\\. first".into()),
            ("= setext", "\\= setext".into()),
            ("$x^2$", "\\$x^2\\$".into()),
            ("a &amp; b", "a &amp;amp; b".into()),
            ("tab\there", "tab here".into()),
            ("~~strike~~", "\\~\\~strike\\~\\~".into()),
            ("v1.2-3", "v1.2-3".into()),
        ];
        for (input, want) in cases {
            assert_eq!(text(input), want, "{input:?}");
        }
    }

    #[test]
    fn actions_log_table() {
        let z = ZWSP;
        let cases: Vec<(&str, String)> = vec![
            ("plain line", "plain line".into()),
            ("a::b stays", "a::b stays".into()),
            ("::error title=X::y", format!(":{z}:error title=X::y")),
            (
                "event\n::error title=X::y\n  ::stop-commands::t",
                format!("event\n:{z}:error title=X::y\n  :{z}:stop-commands::t"),
            ),
            ("x\r::add-mask::v", format!("x\r:{z}:add-mask::v")),
            ("x\r\n\t::warning::w", format!("x\r\n\t:{z}:warning::w")),
            ("old ##[error]form", format!("old #{z}#[error]form")),
            ("", String::new()),
        ];
        for (input, want) in cases {
            let got = actions_log(input);
            assert_eq!(got, want, "{input:?}");
            // No line of the result is a command.
            assert!(
                got.split(['\n', '\r'])
                    .all(|l| !l.trim_start().starts_with("::") && !l.contains("##[")),
                "{got:?}"
            );
        }
    }

    #[test]
    fn html_text_table() {
        let z = ZWSP;
        let cases: Vec<(&str, String)> = vec![
            ("eu", "eu".into()),
            ("<b>x</b>", "&lt;b&gt;x&lt;/b&gt;".into()),
            (
                "a \"b\" & @c #1\nd",
                format!("a &quot;b&quot; &amp; @{z}c #{z}1 d"),
            ),
            ("http://x", format!("http{z}://x")),
        ];
        for (input, want) in cases {
            assert_eq!(html_text(input), want, "{input:?}");
        }
    }

    #[test]
    fn code_table() {
        let cases = [
            ("Deployment shop/web", "Deployment shop/web"),
            ("a`b", "a'b"),
            ("a\nb", "a b"),
            ("", "\u{00A0}"),
        ];
        for (input, want) in cases {
            assert_eq!(code(input), want, "{input:?}");
        }
    }

    #[test]
    fn code_block_fence_outlives_content() {
        let block = code_block(&["ok".into(), "````md".into()]);
        assert!(block.starts_with("`````text\n"), "{block}");
        assert!(block.ends_with("\n`````\n"), "{block}");
        let plain = code_block(&["x".into()]);
        assert_eq!(plain, "```text\nx\n```\n");
    }

    #[test]
    fn mermaid_table() {
        let cases = [
            ("connect", "connect"),
            ("end", "end_"),
            ("migrate: db; end", "migrate db end_"),
            ("a\nsection x", "a section_ x"),
            ("click here", "click_ here"),
            ("%%{init}%%", "init"),
            ("```", "_"),
            ("eu-west/1", "eu-west/1"),
        ];
        for (input, want) in cases {
            assert_eq!(mermaid(input), want, "{input:?}");
        }
    }

    #[test]
    fn comment_word_cannot_close_a_comment() {
        assert_eq!(comment_word("shop"), "shop");
        assert_eq!(comment_word("a-->b"), "a-_-b");
        assert!(!comment_word("x -- > <!-- -->").contains("--"));
    }

    #[test]
    fn link_url_table() {
        let cases = [
            ("https://github.com/o/r/actions/runs/1", true),
            ("http://127.0.0.1:8080/o/r/actions/runs/1", true),
            ("javascript:alert(1)", false),
            ("https://x/a) [y](z", false),
            ("https://x/a b", false),
            ("https://", false),
            ("https://x/<img>", false),
        ];
        for (url, ok) in cases {
            assert_eq!(link_url(url).is_some(), ok, "{url}");
        }
    }
}
