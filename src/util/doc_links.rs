//! Test: every relative link of README.md and docs/*.md points to a file of the repository,
//! and a link with `#anchor` to a heading of that page (GitHub's slugs), so that moving a
//! section between pages cannot leave a link behind.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The pages checked: README.md and every docs/*.md.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The lines of `text` outside fenced code blocks, with inline code spans removed.
fn prose_lines(text: &str) -> Vec<String> {
    raw_prose_lines(text)
        .iter()
        .map(|l| without_code_spans(l))
        .collect()
}

/// The lines of `text` outside fenced code blocks (a fence line itself becomes empty, so
/// paragraphs stay apart).
fn raw_prose_lines(text: &str) -> Vec<String> {
    let mut fence: Option<String> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let marks: String = trimmed
            .chars()
            .take_while(|c| *c == '`' || *c == '~')
            .collect();
        if marks.len() >= 3 {
            match &fence {
                None => fence = Some(marks),
                Some(open) if marks.starts_with(open.as_str()) && trimmed.trim() == marks => {
                    fence = None
                }
                Some(_) => {}
            }
            out.push(String::new());
            continue;
        }
        out.push(if fence.is_none() {
            line.to_string()
        } else {
            String::new()
        });
    }
    out
}

fn without_code_spans(line: &str) -> String {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, part)| part)
        .collect::<Vec<_>>()
        .join("")
}

/// The targets of `[text](target)` links in `line`.
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.to_string());
        rest = &after[end..];
    }
    out
}

/// GitHub's anchor of a heading: its text lower-cased, punctuation but `-` and `_` dropped,
/// spaces as `-` (github-slugger); links and emphasis count by their text.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // A link in a heading counts by its text only.
    while let Some(i) = rest.find("](") {
        text.push_str(&rest[..i]);
        rest = rest[i + 2..].split_once(')').map_or("", |(_, r)| r);
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor of a page: its headings' slugs, a repeated one with `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    // A `#` line inside a fenced block is code, not a heading.
    for line in raw_prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// Every broken relative link of the pages under `root`, as `page: [target]: why`.
fn broken_links(root: &Path) -> Vec<String> {
    let mut broken = Vec::new();
    for page in pages(root) {
        let text = std::fs::read_to_string(&page).expect("page");
        let name = page
            .strip_prefix(root)
            .unwrap_or(&page)
            .display()
            .to_string();
        for target in prose_lines(&text).iter().flat_map(|l| links(l)) {
            if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                page.parent().expect("a page's folder").join(file)
            };
            if !path.exists() {
                broken.push(format!("{name}: ({target}): no file {}", path.display()));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            let is_markdown = path.extension().is_some_and(|e| e == "md");
            let headings = std::fs::read_to_string(&path)
                .map(|t| anchors(&t))
                .unwrap_or_default();
            if !is_markdown || !headings.contains(anchor) {
                broken.push(format!(
                    "{name}: ({target}): no heading #{anchor} there; its anchors: {headings:?}"
                ));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_of_the_readme_and_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let broken = broken_links(root);
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The Rust sources under `dir`, read.
fn rust_sources(dir: &Path, out: &mut String) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("entry").path();
        if path.is_dir() && !path.ends_with("target") {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push_str(&std::fs::read_to_string(&path).expect("source"));
        }
    }
}

/// The test names the pages cite (a code span of a lower-case identifier with at least four
/// underscores, which config keys do not have) that no `fn` of the sources defines, and the
/// source paths they cite that do not exist.
fn missing_tests(root: &Path) -> Vec<String> {
    let mut sources = String::new();
    for dir in ["src", "tests", "kube-sim/src", "kube-sim/tests", "benches"] {
        rust_sources(&root.join(dir), &mut sources);
    }
    let mut missing = Vec::new();
    for page in pages(root) {
        let text = std::fs::read_to_string(&page).expect("page");
        let name = page
            .strip_prefix(root)
            .unwrap_or(&page)
            .display()
            .to_string();
        let prose = raw_prose_lines(&text).join("\n");
        // Code spans, paragraph by paragraph, outside fenced blocks.
        let spans = prose.split("\n\n").flat_map(|paragraph| {
            paragraph
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        });
        for span in spans {
            let span = span.as_str();
            let is_test_name = span.starts_with(|c: char| c.is_ascii_lowercase())
                && span
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && span.matches('_').count() >= 4;
            if is_test_name && !sources.contains(&format!("fn {span}(")) {
                missing.push(format!("{name}: no fn {span} in the sources"));
            }
            let is_path = ["src/", "tests/", "kube-sim/"]
                .iter()
                .any(|p| span.starts_with(p))
                && !span.contains(char::is_whitespace);
            if is_path && !root.join(span).exists() {
                missing.push(format!("{name}: no file {span}"));
            }
        }
    }
    missing
}

#[test]
fn every_test_and_source_file_the_readme_and_docs_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let missing = missing_tests(root);
    assert!(
        missing.is_empty(),
        "the pages name tests or files that do not exist (renamed? update the page):\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_link_reader_sees_links_and_skips_code() {
    let text =
        "see [a](a.md) and [b](b.md#x \"title\")\n```md\n[c](c.md)\n```\n`[d](d.md)` [e](#e)\n";
    let found: Vec<String> = prose_lines(text).iter().flat_map(|l| links(l)).collect();
    assert_eq!(found, ["a.md", "b.md#x", "#e"]);
    // A five-backtick fence holds three-backtick ones.
    let nested = "`````md\n```\n[x](x.md)\n```\n`````\n[y](y.md)\n";
    let found: Vec<String> = prose_lines(nested).iter().flat_map(|l| links(l)).collect();
    assert_eq!(found, ["y.md"]);
}

#[test]
fn slugs_follow_github() {
    for (heading, slug_) in [
        (
            " `rollguard status`: what runs where",
            "rollguard-status-what-runs-where",
        ),
        (
            " GitHub: the PR comment, step summary, outputs, annotations, Deployments",
            "github-the-pr-comment-step-summary-outputs-annotations-deployments",
        ),
        (
            " JSON report (`--report PATH`, schema version 1)",
            "json-report---report-path-schema-version-1",
        ),
        (
            " Why serde-saphyr, not serde_yaml",
            "why-serde-saphyr-not-serde_yaml",
        ),
        (" A [link](x.md) here", "a-link-here"),
    ] {
        assert_eq!(slug(heading), slug_, "{heading}");
    }
    let page = "# A\n## A\n```\n# A\n```\n## B\n";
    let found = anchors(page);
    assert!(found.contains("a") && found.contains("a-1") && found.contains("b"));
    assert!(!found.contains("a-2"), "{found:?}");
}

#[test]
fn a_missing_file_or_heading_is_found() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("docs")).unwrap();
    std::fs::write(
        dir.path().join("README.md"),
        "[ok](docs/a.md#two) [gone](docs/b.md) [bad](docs/a.md#three)\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("docs/a.md"),
        "# One\n## Two\n[up](../README.md)\n",
    )
    .unwrap();
    let broken = broken_links(dir.path());
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(broken[0].contains("docs/b.md"), "{broken:?}");
    assert!(broken[1].contains("#three"), "{broken:?}");
}

#[test]
fn a_missing_test_name_or_file_is_found() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("docs")).unwrap();
    std::fs::create_dir_all(dir.path().join("tests")).unwrap();
    std::fs::write(
        dir.path().join("tests/a.rs"),
        "#[test]\nfn a_test_that_is_really_there() {}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("README.md"),
        "Tests: `tests/a.rs` (`a_test_that_is_really_there`,\n`a_test_that_was_renamed_away`), `tests/b.rs`.\n\n```\n`not_a_citation_in_a_code_block`\n```\nA key: `kill_grace`.\n",
    )
    .unwrap();
    let missing = missing_tests(dir.path());
    assert_eq!(
        missing,
        [
            "README.md: no fn a_test_that_was_renamed_away in the sources",
            "README.md: no file tests/b.rs"
        ]
    );
}
