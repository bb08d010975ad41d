//! Test support: documents under docs/ that are generated from code (the JSON Schemas) must
//! match the code; `UPDATE_SCHEMAS=1 cargo test --lib schema` rewrites them.

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
