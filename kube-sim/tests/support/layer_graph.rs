//! The import graph of a crate, read from its sources: every `crate::`, `super::` and
//! child-module path, module by module. Shared by the layer tests of rollguard
//! (`tests/layers.rs`) and kube-sim (`kube-sim/tests/layers.rs`), so that both crates are held
//! to their module maps by the same reader.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path such as `storage::store`, from a file below `src/`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("file below src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().map(String::as_str) == Some("mod") {
        parts.pop();
    }
    parts.join("::")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read src dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source without comments and string literals, which name paths without importing them.
pub fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == '/' && bytes.get(i + 1) == Some(&'/') {
            while i < bytes.len() && bytes[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && bytes.get(i + 1) == Some(&'*') {
            i += 2;
            while i + 1 < bytes.len() && !(bytes[i] == '*' && bytes[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == '"' {
            i += 1;
            while i < bytes.len() && bytes[i] != '"' {
                if bytes[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && bytes.get(i + 2) == Some(&'\'') {
            // A char literal such as '"' or '{'.
            i += 3;
        } else if c == '\'' && bytes.get(i + 1) == Some(&'\\') {
            while i < bytes.len() && !(bytes[i] == '\'' && i > 0 && bytes[i - 1] != '\\') {
                i += 1;
            }
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path that follows `prefix::` (`crate`, `super`, a child module), with `{a, b::c}`
/// groups expanded: `crate::a::{b, c::d}` gives `a::b` and `a::c::d`.
pub fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let needle: Vec<char> = format!("{prefix}::").chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i + needle.len() <= chars.len() {
        let starts_here = chars[i..i + needle.len()] == needle[..]
            && (i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':'));
        if starts_here {
            let mut j = i + needle.len();
            expand(&chars, &mut j, Vec::new(), &mut out);
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

fn expand(chars: &[char], j: &mut usize, mut base: Vec<String>, out: &mut Vec<Vec<String>>) {
    loop {
        while *j < chars.len() && chars[*j].is_whitespace() {
            *j += 1;
        }
        if chars.get(*j) == Some(&'{') {
            *j += 1;
            loop {
                expand(chars, j, base.clone(), out);
                while *j < chars.len() && chars[*j].is_whitespace() {
                    *j += 1;
                }
                match chars.get(*j) {
                    Some(',') => *j += 1,
                    Some('}') => {
                        *j += 1;
                        return;
                    }
                    _ => return,
                }
                while *j < chars.len() && chars[*j].is_whitespace() {
                    *j += 1;
                }
                if chars.get(*j) == Some(&'}') {
                    *j += 1;
                    return;
                }
            }
        }
        let start = *j;
        while *j < chars.len() && is_ident(chars[*j]) {
            *j += 1;
        }
        if *j == start {
            if !base.is_empty() {
                out.push(base);
            }
            return;
        }
        base.push(chars[start..*j].iter().collect());
        if chars.get(*j) == Some(&':') && chars.get(*j + 1) == Some(&':') {
            *j += 2;
        } else {
            out.push(base);
            return;
        }
    }
}

/// The longest prefix of `path` (below `root`) that is a module; None for items of lib.rs.
fn target_module(modules: &BTreeSet<String>, path: &[String]) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| modules.contains(m))
}

fn layer_of(layers: &[&str], module: &str) -> Option<usize> {
    let top = module.split("::").next()?;
    layers.iter().position(|l| *l == top)
}

pub struct Graph {
    pub edges: BTreeMap<String, BTreeSet<String>>,
    /// Paths that name no module of the crate.
    pub problems: Vec<String>,
}

/// The imports between the modules of the crate whose sources are in `src`; `root_items` are
/// items of lib.rs itself, which any module may use.
pub fn read_graph(src: &Path, root_items: &[&str]) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| module_of(src, f))
        .filter(|m| !m.is_empty() && m != "main" && m != "lib")
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    for file in &files {
        let module = module_of(src, file);
        if module.is_empty() || module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read source file");
        let code = code_only(&text);
        let is_mod_rs = file.file_name().is_some_and(|n| n == "mod.rs");
        // `super::` in a.rs or a/mod.rs means the parent of `a`.
        let parent: Vec<String> = {
            let mut p: Vec<String> = module.split("::").map(str::to_string).collect();
            p.pop();
            p
        };
        let mut targets: Vec<(Vec<String>, String)> = Vec::new();
        for path in paths_after(&code, "crate") {
            targets.push((path.clone(), format!("crate::{}", path.join("::"))));
        }
        for path in paths_after(&code, "super") {
            let mut full = parent.clone();
            full.extend(path.iter().cloned());
            targets.push((full, format!("super::{}", path.join("::"))));
        }
        // A parent naming its own child modules by relative path (`deployment::Note`).
        let children: Vec<String> = modules
            .iter()
            .filter_map(|m| m.strip_prefix(&format!("{module}::")))
            .filter(|rest| !rest.contains("::"))
            .map(str::to_string)
            .collect();
        let _ = is_mod_rs;
        for child in &children {
            for path in paths_after(&code, child) {
                let mut full: Vec<String> = module.split("::").map(str::to_string).collect();
                full.push(child.clone());
                full.extend(path.iter().cloned());
                targets.push((full, format!("{child}::{}", path.join("::"))));
            }
        }
        let own_tests = format!("{module}::tests");
        for (path, written) in targets {
            if path.len() == 1 && root_items.contains(&path[0].as_str()) {
                continue;
            }
            let Some(target) = target_module(&modules, &path) else {
                problems.push(format!(
                    "{module}: `{written}` names no module of the crate (name the module the \
                     item lives in, not a re-export of lib.rs)"
                ));
                continue;
            };
            // A module's own test file (`mod tests;` in a folder) is part of it.
            if target == module || target == own_tests || module == format!("{target}::tests") {
                continue;
            }
            edges.entry(module.clone()).or_default().insert(target);
        }
    }
    Graph { edges, problems }
}

/// Every cycle, as the strongly connected components of more than one module.
pub fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan's algorithm, iteratively small enough to write recursively here.
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(targets) = s.edges.get(v) {
            for w in targets {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let low = s.low[v].min(s.low[w]);
                    s.low.insert(v, low);
                } else if s.on_stack.contains(w) {
                    let low = s.low[v].min(s.index[w]);
                    s.low.insert(v, low);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    let nodes: Vec<&str> = edges.keys().map(String::as_str).collect();
    for v in nodes {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// Every cycle, said with the imports that make it; empty when there is none.
pub fn cycle_problems(graph: &Graph) -> Vec<String> {
    cycles(&graph.edges)
        .iter()
        .map(|c| {
            let inside: Vec<String> = c
                .iter()
                .flat_map(|from| {
                    graph.edges[from]
                        .iter()
                        .filter(|to| c.contains(to))
                        .map(move |to| format!("{from} -> {to}"))
                })
                .collect();
            format!("cycle among {}: {}", c.join(", "), inside.join("; "))
        })
        .collect()
}

/// Every import of a higher layer by a lower one (`layers` lowest first; a module's layer is
/// its top folder or file), and every module outside the layers.
pub fn layer_problems(graph: &Graph, layers: &[&str]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (from, targets) in &graph.edges {
        let Some(from_layer) = layer_of(layers, from) else {
            wrong.push(format!(
                "{from}: not in a layer folder ({})",
                layers.join(", ")
            ));
            continue;
        };
        for to in targets {
            match layer_of(layers, to) {
                Some(to_layer) if to_layer <= from_layer => {}
                Some(to_layer) => wrong.push(format!(
                    "{from} (layer {}) imports {to} (layer {}): a lower layer must not know a \
                     higher one; move the item down or pass it in",
                    layers[from_layer], layers[to_layer]
                )),
                None => wrong.push(format!("{to}: not in a layer folder")),
            }
        }
    }
    wrong
}
