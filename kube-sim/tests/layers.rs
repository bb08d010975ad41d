//! The module map holds: no module imports a module that imports it (directly or around a
//! circle), and no layer imports a higher one. Read from the source, so a new import that
//! breaks the map fails here instead of waiting for a reviewer.
//!
//! Layers, lowest first (a module may import its own folder and the folders below it):
//!
//! 1. `model`: the words every layer speaks (resource types, API errors, simulated time)
//! 2. `semantics`: what the server does to an object on a write, as functions of values
//! 3. `storage`: the table of served resources and the object store
//! 4. `controllers`: the controllers and the kubelet stand-in, acting on the store
//! 5. `http`: the server, request handlers, watch streams, tables, faults and counters
//! 6. `sim`: clusters put together (store + controllers + server), kubeconfig, certificates
//!
//! Items defined in `lib.rs` itself (`shared_dir`, `shared_for_test`) sit below every layer;
//! the re-exports in `lib.rs` are for users of the crate, and code inside it names the real
//! module.

#[path = "support/layer_graph.rs"]
mod layer_graph;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use layer_graph::{code_only, cycle_problems, cycles, layer_problems, paths_after, read_graph};

const LAYERS: [&str; 6] = [
    "model",
    "semantics",
    "storage",
    "controllers",
    "http",
    "sim",
];
/// Items of lib.rs itself that modules may use.
const ROOT_ITEMS: [&str; 2] = ["shared_dir", "shared_for_test"];

fn graph() -> layer_graph::Graph {
    read_graph(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &ROOT_ITEMS,
    )
}

#[test]
fn the_reader_sees_imports_in_every_form() {
    let code = code_only(
        "use crate::a::{b, c::{d, e}};\n// crate::comment::x\nlet s = \"crate::string\";\nsuper::f::g();\n",
    );
    let paths = paths_after(&code, "crate");
    assert_eq!(
        paths,
        vec![
            vec!["a".to_string(), "b".to_string()],
            vec!["a".into(), "c".into(), "d".into()],
            vec!["a".into(), "c".into(), "e".into()],
        ]
    );
    assert_eq!(
        paths_after(&code, "super"),
        vec![vec!["f".to_string(), "g".to_string()]]
    );
}

#[test]
fn cycles_are_found() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("c".into());
    edges.entry("c".into()).or_default().insert("a".into());
    edges.entry("c".into()).or_default().insert("d".into());
    assert_eq!(
        cycles(&edges),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
}

#[test]
fn the_graph_is_read() {
    // The reader must see the imports that exist, or the checks below pass vacuously.
    let graph = graph();
    let store = graph
        .edges
        .get("storage::store")
        .expect("storage::store imports something");
    assert!(store.contains("model::error"), "{store:?}");
    assert!(
        graph
            .edges
            .get("sim::cluster")
            .is_some_and(|t| t.contains("storage::store"))
    );
}

#[test]
fn no_module_imports_a_module_that_imports_it() {
    let graph = graph();
    assert!(graph.problems.is_empty(), "{}", graph.problems.join("\n"));
    let found = cycle_problems(&graph);
    assert!(
        found.is_empty(),
        "modules import each other; move what both need into the lower one:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_layer_imports_a_higher_one() {
    let wrong = layer_problems(&graph(), &LAYERS);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
