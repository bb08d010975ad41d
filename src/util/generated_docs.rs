//! Test support: documents generated from code must match the code. The JSON Schemas under
//! docs/ (`UPDATE_SCHEMAS=1 cargo test --lib schema` rewrites them) and sections of the README
//! between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->` (`UPDATE_README=1 cargo
//! test --lib readme` rewrites them).

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
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let (open, close) = (
        format!("<!-- generated:{name} -->\n"),
        format!("<!-- /generated:{name} -->"),
    );
    let start = readme
        .find(&open)
        .unwrap_or_else(|| panic!("README.md has no {open:?} marker"))
        + open.len();
    let end = readme[start..]
        .find(&close)
        .unwrap_or_else(|| panic!("README.md has no {close:?} marker after {open:?}"))
        + start;
    if std::env::var_os("UPDATE_README").is_some() {
        let updated = format!("{}{text}{}", &readme[..start], &readme[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert!(
        readme[start..end] == *text,
        "README.md's {name} section differs from the code:\n--- README\n{}\n--- code\n{text}\nrun UPDATE_README=1 cargo test --lib readme",
        &readme[start..end]
    );
}
