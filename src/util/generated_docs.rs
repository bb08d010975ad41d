//! Test support: documents generated from code must match the code. The JSON Schemas under
//! docs/ (`UPDATE_SCHEMAS=1 cargo test --lib schema` rewrites them) and sections of the README
//! and the docs/ pages between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->`
//! (`UPDATE_README=1 cargo test --lib readme` rewrites them; `--test layers` for the layer
//! order of docs/architecture.md).

use std::path::Path;

/// Asserts that `docs/<name>` holds `value` pretty-printed, rewriting it first when
/// UPDATE_SCHEMAS is set.
pub fn assert_current(name: &str, value: &serde_json::Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs")
        .join(name);
    let text = format!("{}\n", serde_json::to_string_pretty(value).unwrap());
    if std::env::var_os("UPDATE_SCHEMAS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == text,
        "{} is stale: run UPDATE_SCHEMAS=1 cargo test --lib schema",
        path.display()
    );
}

/// Asserts that the README's section `name` (between its markers) is `text`, rewriting it
/// first when UPDATE_README is set.
pub fn assert_readme_section(name: &str, text: &str) {
    assert_doc_section("README.md", name, text);
}

/// Asserts that the section `name` of `page` (a path from the repository's root, e.g.
/// `docs/configuration.md`), between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->`,
/// is `text`; with UPDATE_README set it rewrites the section first. Also used by
/// tests/layers.rs, which includes this file by path.
pub fn assert_doc_section(page: &str, name: &str, text: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(page);
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{page}: {e}"));
    let (open, close) = (
        format!("<!-- generated:{name} -->\n"),
        format!("<!-- /generated:{name} -->"),
    );
    let start = doc
        .find(&open)
        .unwrap_or_else(|| panic!("{page} has no {open:?} marker"))
        + open.len();
    let end = doc[start..]
        .find(&close)
        .unwrap_or_else(|| panic!("{page} has no {close:?} marker after {open:?}"))
        + start;
    if std::env::var_os("UPDATE_README").is_some() {
        let updated = format!("{}{text}{}", &doc[..start], &doc[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert!(
        doc[start..end] == *text,
        "{page}'s {name} section differs from the code:\n--- {page}\n{}\n--- code\n{text}\nrun UPDATE_README=1 cargo test --lib readme (and UPDATE_README=1 cargo test --test layers for the layer order)",
        &doc[start..end]
    );
}
