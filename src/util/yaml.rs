//! The one YAML reader, shared by config/ and manifests/: a value tree that remembers the
//! line of every node, multi-document splitting that keeps going past a broken document, and
//! the parser limits used against hostile input.

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use serde_saphyr::Spanned;
use std::fmt;

/// A YAML node with the 1-based line it starts on (0 when unknown).
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub line: usize,
    pub value: Tree,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Tree {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Keys in source order, each with its own line.
    Map(Vec<(Node, Node)>),
}

impl Tree {
    /// A word for messages: "a string", "a list", ...
    pub fn kind_name(&self) -> &'static str {
        match self {
            Tree::Null => "null",
            Tree::Bool(_) => "a boolean",
            Tree::Int(_) | Tree::UInt(_) => "an integer",
            Tree::Float(_) => "a number",
            Tree::Str(_) => "a string",
            Tree::Seq(_) => "a list",
            Tree::Map(_) => "a mapping",
        }
    }
}

impl Node {
    /// The key as text (YAML keys may be numbers or booleans: `80: x`).
    pub fn key_text(&self) -> String {
        match &self.value {
            Tree::Str(s) => s.clone(),
            Tree::Int(i) => i.to_string(),
            Tree::UInt(u) => u.to_string(),
            Tree::Float(f) => f.to_string(),
            Tree::Bool(b) => b.to_string(),
            Tree::Null => "null".to_string(),
            Tree::Seq(_) | Tree::Map(_) => String::new(),
        }
    }

    /// The key as written, for messages: `1`, `"1"`, `~`.
    fn source_text(&self) -> String {
        match &self.value {
            Tree::Str(s) => format!("{s:?}"),
            Tree::Null => "null".to_string(),
            _ => self.key_text(),
        }
    }

    /// Converts to JSON, dropping line information.
    pub fn to_json(&self) -> Value {
        match &self.value {
            Tree::Null => Value::Null,
            Tree::Bool(b) => Value::Bool(*b),
            Tree::Int(i) => Value::Number((*i).into()),
            Tree::UInt(u) => Value::Number((*u).into()),
            Tree::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Tree::Str(s) => Value::String(s.clone()),
            Tree::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Tree::Map(entries) => {
                let mut map = Map::new();
                for (k, v) in entries {
                    map.insert(k.key_text(), v.to_json());
                }
                Value::Object(map)
            }
        }
    }

    /// The entry for `key` in a mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Tree::Map(entries) => entries
                .iter()
                .find(|(k, _)| k.key_text() == key)
                .map(|(_, v)| v),
            _ => None,
        }
    }
}

/// A bracketed step of a field path as the API server writes it (structured-merge-diff's
/// form); `.name` steps are matched against the keys directly, since a key may hold dots.
#[derive(Debug, PartialEq)]
enum Step {
    /// `[3]`
    Index(usize),
    /// `[name="web",port=80]`: the list item with these keys.
    Keys(Vec<(String, Value)>),
    /// `[="a"]`: the item of a set with this value.
    SetValue(Value),
}

impl Node {
    /// The line of the node at `path`, a field path as the API server writes it in a refusal
    /// (`.spec.template.spec.containers[name="web"].imagePullPolice`): for a field, the line of
    /// its key, so a misspelt field is named where it is written. None when the path does not
    /// lead through this tree.
    pub fn line_of_path(&self, path: &str) -> Option<usize> {
        let mut node = self;
        let mut line = self.line;
        let mut rest = path;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('.') {
                // The longest key that the rest begins with, so `example.com/x` stays one key.
                let Tree::Map(entries) = &node.value else {
                    return None;
                };
                let (key, value) = entries
                    .iter()
                    .filter(|(k, _)| {
                        let k = k.key_text();
                        after.starts_with(&k)
                            && matches!(after.as_bytes().get(k.len()), None | Some(b'.' | b'['))
                    })
                    .max_by_key(|(k, _)| k.key_text().len())?;
                line = key.line;
                node = value;
                rest = &after[key.key_text().len()..];
            } else if rest.starts_with('[') {
                let (step, after) = parse_bracket(rest)?;
                let Tree::Seq(items) = &node.value else {
                    return None;
                };
                let item = match step {
                    Step::Index(i) => items.get(i)?,
                    Step::Keys(keys) => items.iter().find(|item| {
                        keys.iter()
                            .all(|(k, v)| item.get(k).is_some_and(|n| n.to_json() == *v))
                    })?,
                    Step::SetValue(v) => items.iter().find(|item| item.to_json() == v)?,
                };
                line = item.line;
                node = item;
                rest = after;
            } else {
                return None;
            }
        }
        Some(line)
    }
}

/// `[...]` at the start of `text`: the step and what follows it.
fn parse_bracket(text: &str) -> Option<(Step, &str)> {
    let inner = text.strip_prefix('[')?;
    if let Some(value) = inner.strip_prefix('=') {
        let (value, after) = json_prefix(value)?;
        return Some((Step::SetValue(value), after.strip_prefix(']')?));
    }
    let digits = inner.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && inner.as_bytes().get(digits) == Some(&b']') {
        return Some((
            Step::Index(inner[..digits].parse().ok()?),
            &inner[digits + 1..],
        ));
    }
    let mut keys = Vec::new();
    let mut rest = inner;
    loop {
        let eq = rest.find('=')?;
        let key = rest[..eq].to_string();
        let (value, after) = json_prefix(&rest[eq + 1..])?;
        keys.push((key, value));
        if let Some(after) = after.strip_prefix(']') {
            return Some((Step::Keys(keys), after));
        }
        rest = after.strip_prefix(',')?;
    }
}

/// One JSON value at the start of `text`, and the text after it.
fn json_prefix(text: &str) -> Option<(Value, &str)> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let value = stream.next()?.ok()?;
    Some((value, &text[stream.byte_offset()..]))
}

/// Deserialized through serde-saphyr's `Spanned` so each child gets its location.
struct Raw(Tree);

impl<'de> de::Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RawVisitor)
    }
}

fn located(s: Spanned<Raw>) -> Node {
    Node {
        line: usize::try_from(s.referenced.line()).unwrap_or(0),
        value: s.value.0,
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Raw, E> {
        Ok(Raw(Tree::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Raw, E> {
        Ok(Raw(Tree::Int(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Raw, E> {
        Ok(Raw(Tree::UInt(v)))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Raw, E> {
        i64::try_from(v)
            .map(|i| Raw(Tree::Int(i)))
            .map_err(|_| E::custom("integer out of range"))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Raw, E> {
        u64::try_from(v)
            .map(|u| Raw(Tree::UInt(u)))
            .map_err(|_| E::custom("integer out of range"))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Raw, E> {
        Ok(Raw(Tree::Float(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Raw, E> {
        Ok(Raw(Tree::Str(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Raw, E> {
        Ok(Raw(Tree::Str(v)))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Raw, E> {
        String::from_utf8(v.to_vec())
            .map(|s| Raw(Tree::Str(s)))
            .map_err(|_| E::custom("binary value is not UTF-8"))
    }
    fn visit_none<E>(self) -> Result<Raw, E> {
        Ok(Raw(Tree::Null))
    }
    fn visit_unit<E>(self) -> Result<Raw, E> {
        Ok(Raw(Tree::Null))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Raw, D::Error> {
        d.deserialize_any(RawVisitor)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Raw>>()? {
            items.push(located(item));
        }
        Ok(Raw(Tree::Seq(items)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<Raw>>()? {
            let value = map.next_value::<Spanned<Raw>>()?;
            entries.push((located(key), located(value)));
        }
        Ok(Raw(Tree::Map(entries)))
    }
}

/// Parser options with explicit limits, so a hostile file (alias bombs, deep nesting,
/// document storms) fails with a message instead of eating memory.
pub fn options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_DEPTH;
    budget.flow_nesting_limit = MAX_DEPTH;
    budget.max_merge_keys = 10_000;
    budget.max_documents = 10_000;
    budget.max_aliases = 10_000;
    budget.max_nodes = 2_000_000;
    budget.max_events = 4_000_000;
    let mut opts = serde_saphyr::Options::default();
    opts.budget = Some(budget);
    opts.alias_limits.max_total_replayed_events = 200_000;
    opts.with_snippet = false;
    // YAML 1.2 booleans: `n`, `y`, `on`, `no` stay strings (keys and values alike).
    opts.strict_booleans = true;
    // `defaultMode: 0644` means octal to kubectl (YAML 1.1); file modes are the common case.
    opts.legacy_octal_numbers = true;
    opts
}

/// Nesting deeper than this is refused (real manifests nest about 15 deep).
pub const MAX_DEPTH: usize = 100;

/// Documents in one file or output; past it the file is refused before any is parsed.
pub const MAX_DOCUMENTS: usize = 10_000;

/// One document of a multi-document stream, with the 1-based line its text starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocText {
    pub first_line: usize,
    pub text: String,
}

/// Splits a YAML stream on `---` / `...` markers at column 0 (YAML forbids those lines inside
/// a document, so this is exact), so that every document is parsed on its own: one broken
/// document does not hide the errors or objects of the others. Marker lines become blank so
/// line numbers inside each document stay those of the file.
/// More than [`MAX_DOCUMENTS`] is an error at the line of the first one past the cap.
pub fn split_documents(text: &str) -> Result<Vec<DocText>, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut first_line = 1;
    for (index, raw_line) in text.split('\n').enumerate() {
        let line = raw_line.strip_suffix('\r').unwrap_or(raw_line);
        let is_start = line == "---" || line.starts_with("--- ") || line.starts_with("---\t");
        let is_end = line == "..." || line.starts_with("... ") || line.starts_with("...\t");
        if is_start || is_end {
            let text = std::mem::take(&mut current);
            if !is_blank_yaml(&text) {
                if docs.len() == MAX_DOCUMENTS {
                    return Err(ParseError {
                        line: first_line,
                        message: format!(
                            "more than {MAX_DOCUMENTS} YAML documents in one file (the cap); split the file"
                        ),
                    });
                }
                docs.push(DocText { first_line, text });
            }
            first_line = index + 1;
            // Content after `--- ` (e.g. `--- {a: 1}`) belongs to the new document.
            let rest = if is_start { &line[3..] } else { "" };
            current.push_str(&" ".repeat(3));
            current.push_str(rest);
            current.push('\n');
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    if !is_blank_yaml(&current) {
        if docs.len() == MAX_DOCUMENTS {
            return Err(ParseError {
                line: first_line,
                message: format!(
                    "more than {MAX_DOCUMENTS} YAML documents in one file (the cap); split the file"
                ),
            });
        }
        docs.push(DocText {
            first_line,
            text: current,
        });
    }
    Ok(docs)
}

/// True when a document holds only whitespace, comments or directives.
fn is_blank_yaml(text: &str) -> bool {
    text.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || l.starts_with('%')
    })
}

/// A parse failure with its absolute line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

/// Parses one document (as cut by `split_documents`) into a located tree. An empty document
/// gives `Tree::Null`. Lines are absolute within the file.
pub fn parse_document(doc: &DocText) -> Result<Node, ParseError> {
    let offset = doc.first_line.saturating_sub(1);
    match serde_saphyr::from_str_with_options::<Option<Spanned<Raw>>>(&doc.text, options()) {
        Ok(Some(node)) => {
            let mut node = located(node);
            shift_lines(&mut node, offset);
            check_tree(&node)?;
            Ok(node)
        }
        Ok(None) => Ok(Node {
            line: doc.first_line,
            value: Tree::Null,
        }),
        Err(e) => {
            let line = e
                .location()
                .and_then(|l| usize::try_from(l.line()).ok())
                .filter(|l| *l > 0)
                .map_or(doc.first_line, |l| l + offset);
            Err(ParseError {
                line,
                message: shift_message_lines(&clean_message(&e.to_string()), offset),
            })
        }
    }
}

/// What serde-saphyr accepts but Kubernetes (JSON) cannot hold: keys that become the same
/// JSON key (`1` and `"1"`, `~` and `null`), lists or mappings as keys, and integers past
/// i64 (serde-saphyr reads them as floats: `1e+23` would be sent). The first one found.
fn check_tree(node: &Node) -> Result<(), ParseError> {
    match &node.value {
        Tree::Seq(items) => items.iter().try_for_each(check_tree),
        Tree::Map(entries) => {
            let mut seen: std::collections::HashMap<String, &Node> =
                std::collections::HashMap::new();
            for (key, value) in entries {
                if matches!(key.value, Tree::Seq(_) | Tree::Map(_)) {
                    return Err(ParseError {
                        line: key.line,
                        message: format!(
                            "{} used as a mapping key: Kubernetes keys are strings",
                            key.value.kind_name()
                        ),
                    });
                }
                let text = key.key_text();
                // serde-saphyr refused keys written alike and skipped merged keys the mapping
                // sets itself: two keys left with one text are written differently (`~`,
                // `null`), and JSON would keep only one.
                if let Some(first) = seen.get(&text) {
                    return Err(ParseError {
                        line: key.line,
                        message: format!(
                            "key {} collides with key {} at line {}: both are the key {text:?}; keep one",
                            key.source_text(),
                            first.source_text(),
                            first.line
                        ),
                    });
                }
                seen.insert(text, key);
                check_tree(key)?;
                check_tree(value)?;
            }
            Ok(())
        }
        Tree::Float(f) if f.is_finite() && f.fract() == 0.0 && f.abs() >= I64_BOUND => {
            Err(out_of_range(node.line, &format!("{f:e}")))
        }
        Tree::UInt(u) if i64::try_from(*u).is_err() => Err(out_of_range(node.line, &u.to_string())),
        _ => Ok(()),
    }
}

/// 2^63: integral floats this large were integers too big for i64 in the file (or floats
/// with no fraction that no Kubernetes field takes).
const I64_BOUND: f64 = 9_223_372_036_854_775_808.0;

fn out_of_range(line: usize, shown: &str) -> ParseError {
    ParseError {
        line,
        message: format!(
            "number {shown} does not fit in a 64-bit integer (the widest Kubernetes has); quote it if it is text"
        ),
    }
}

/// The first number of a JSON value (read by serde_json, which also turns integers past
/// u64 into floats) that does not fit in an i64, said as for YAML.
pub fn json_number_problem(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) => {
            let too_big = match (n.as_u64(), n.as_f64()) {
                (Some(u), _) => i64::try_from(u).is_err(),
                (None, Some(f)) if n.as_i64().is_none() => {
                    f.is_finite() && f.fract() == 0.0 && f.abs() >= I64_BOUND
                }
                _ => false,
            };
            let shown = match n.as_u64() {
                Some(u) => u.to_string(),
                None => format!("{:e}", n.as_f64().unwrap_or_default()),
            };
            too_big.then(|| out_of_range(0, &shown).message)
        }
        Value::Array(items) => items.iter().find_map(json_number_problem),
        Value::Object(map) => map.values().find_map(json_number_problem),
        _ => None,
    }
}

/// Line numbers inside a message (`... at line 3 ...`) made the file's, like `line` itself.
fn shift_message_lines(message: &str, offset: usize) -> String {
    if offset == 0 {
        return message.to_string();
    }
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(pos) = rest.find("line ") {
        let (head, tail) = rest.split_at(pos + "line ".len());
        out.push_str(head);
        let digits = tail.len() - tail.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        match tail[..digits].parse::<usize>() {
            Ok(n) => out.push_str(&(n + offset).to_string()),
            Err(_) => out.push_str(&tail[..digits]),
        }
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

/// Makes lines relative to a document absolute within its file.
fn shift_lines(node: &mut Node, offset: usize) {
    if node.line > 0 {
        node.line += offset;
    }
    match &mut node.value {
        Tree::Seq(items) => items.iter_mut().for_each(|n| shift_lines(n, offset)),
        Tree::Map(entries) => entries.iter_mut().for_each(|(k, v)| {
            shift_lines(k, offset);
            shift_lines(v, offset);
        }),
        _ => {}
    }
}

/// Stack of the thread YAML is parsed on. serde-saphyr deserializes recursively: a document
/// at the depth cap takes about 2 MiB of stack in a debug build (a 2 MiB runtime thread
/// overflowed at 99 levels); the stack is reserved, not used, so a generous one costs little.
const PARSER_STACK: usize = 64 * 1024 * 1024;

/// The parser's thread did not start (the system is out of threads or memory).
#[derive(Debug, thiserror::Error)]
#[error("cannot start the YAML parser's thread: {0}")]
pub struct ParserThreadError(#[source] pub std::io::Error);

/// Runs `f` (a parse) on a thread with [`PARSER_STACK`], so that no nesting within the caps
/// overflows the caller's stack. Err when the thread cannot start.
pub fn on_parser_stack<T: Send>(f: impl FnOnce() -> T + Send) -> Result<T, ParserThreadError> {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("yaml-parser".into())
            .stack_size(PARSER_STACK)
            .spawn_scoped(scope, f)
            .map_err(ParserThreadError)?;
        // A panic in the parse stays a panic (the caller's hook reports it).
        Ok(handle
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}

/// Parses a whole single-document text (a config file).
pub fn parse_single(text: &str) -> Result<Node, ParseError> {
    on_parser_stack(|| parse_single_here(text)).unwrap_or_else(|e| {
        Err(ParseError {
            line: 0,
            message: e.to_string(),
        })
    })
}

fn parse_single_here(text: &str) -> Result<Node, ParseError> {
    let docs = split_documents(text)?;
    match docs.len() {
        0 => Ok(Node {
            line: 1,
            value: Tree::Null,
        }),
        1 => parse_document(&docs[0]),
        _ => Err(ParseError {
            line: docs[1].first_line,
            message: "expected one YAML document, found several (remove the `---` line)".into(),
        }),
    }
}

/// serde-saphyr says a breached limit in Rust's Debug form (`budget breached: Depth { depth:
/// 101 }`) and a replay limit with its counters: said here in words, with the cap.
fn budget_message(first: &str) -> Option<String> {
    if first.starts_with("recursion limit exceeded") {
        return Some(format!("nested deeper than {MAX_DEPTH} levels (the cap)"));
    }
    if first.starts_with("alias replay limit exceeded") || first.contains("alias expansion") {
        return Some(
            "its aliases (`*name`) expand past the cap of 200,000 replayed nodes (an alias bomb?); write the values out or use fewer aliases".to_string(),
        );
    }
    let rest = first.strip_prefix("budget breached: ")?;
    let kind: String = rest
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    let said = match kind.as_str() {
        "Depth" => format!("nested deeper than {MAX_DEPTH} levels (the cap)"),
        "Aliases" | "AliasAnchorRatio" => {
            "more aliases (`*name`) than the cap of 10,000, or too many per anchor (an alias bomb?)"
                .to_string()
        }
        "Anchors" => "more anchors (`&name`) than the parser's cap".to_string(),
        "Documents" => format!("more than {MAX_DOCUMENTS} YAML documents (the cap)"),
        "Events" | "Nodes" => {
            "more YAML nodes than the cap of 2,000,000 in one document".to_string()
        }
        "ScalarBytes" => "more text in values than the parser's cap of 64 MiB".to_string(),
        "MergeKeys" => "more merge keys (`<<`) than the cap of 10,000".to_string(),
        _ => format!("past a limit of the YAML parser ({kind})"),
    };
    Some(said)
}

/// serde-saphyr messages end with " at line X column Y"; we print file:line ourselves, drop
/// advice meant for programmers, and add a hint for the classic indentation mistakes.
fn clean_message(message: &str) -> String {
    let first = message.lines().next().unwrap_or(message).trim();
    if let Some(said) = budget_message(first) {
        return said;
    }
    let mut text = match first.rfind(" at line ") {
        Some(pos) => &first[..pos],
        None => first,
    };
    if let Some(pos) = text.find(", set DuplicateKeyPolicy") {
        text = &text[..pos];
    }
    let hint = if text.contains("mapping values are not allowed")
        || text.contains("illegal placement of ':'")
    {
        " (check the indentation, or quote a value that contains \": \")"
    } else {
        ""
    };
    format!("{text}{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_documents_with_lines() {
        let text = "a: 1\n---\n# only a comment\n---\nb: 2\r\n\r\nc: 3\n--- {d: 4}\n...\n";
        let docs = split_documents(text).unwrap();
        let firsts: Vec<usize> = docs.iter().map(|d| d.first_line).collect();
        assert_eq!(firsts, vec![1, 4, 8]);
        let node = parse_document(&docs[1]).unwrap();
        assert_eq!(node.line, 5);
        assert_eq!(node.get("c").unwrap().line, 7);
        assert_eq!(node.to_json(), serde_json::json!({"b": 2, "c": 3}));
        let node = parse_document(&docs[2]).unwrap();
        assert_eq!(node.to_json(), serde_json::json!({"d": 4}));
    }

    #[test]
    fn lines_of_nested_nodes() {
        let docs =
            split_documents("kind: List\nitems:\n  - a: 1\n  - b:\n      c: [1, 2]\n").unwrap();
        let node = parse_document(&docs[0]).unwrap();
        let Tree::Seq(items) = &node.get("items").unwrap().value else {
            panic!()
        };
        assert_eq!(items[0].line, 3);
        assert_eq!(items[1].line, 4);
        assert_eq!(items[1].get("b").unwrap().get("c").unwrap().line, 5);
    }

    #[test]
    fn lines_of_field_paths_as_the_server_writes_them() {
        let text = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations:
    example.com/team: shop
spec:
  template:
    spec:
      containers:
        - name: sidecar
          image: busybox
        - name: web
          image: nginx
          imagePullPolicyy: Always
          ports:
            - containerPort: 80
              protocol: TCP
      finalizers: [a, b]
";
        let node = parse_single(text).unwrap();
        let cases: [(&str, Option<usize>); 12] = [
            ("", Some(1)),
            (".kind", Some(2)),
            (".metadata.annotations.example.com/team", Some(6)),
            (
                ".spec.template.spec.containers[name=\"web\"].imagePullPolicyy",
                Some(15),
            ),
            (
                ".spec.template.spec.containers[name=\"sidecar\"].image",
                Some(12),
            ),
            (".spec.template.spec.containers[1].image", Some(14)),
            (
                ".spec.template.spec.containers[name=\"web\"].ports[containerPort=80,protocol=\"TCP\"].protocol",
                Some(18),
            ),
            (".spec.template.spec.finalizers[=\"b\"]", Some(19)),
            // Paths that do not lead through the tree.
            (".spec.template.spec.containers[name=\"db\"].image", None),
            (".spec.replicas", None),
            (".metadata.name.first", None),
            (".spec.template.spec.containers[name=\"web\"", None),
        ];
        for (path, want) in cases {
            assert_eq!(node.line_of_path(path), want, "{path}");
        }
    }

    #[test]
    fn scalar_types() {
        let node = parse_single(
            "s: \"5\"\ni: 5\nf: 1.5\nb: true\nn: ~\nbig: 9223372036854775807\nneg: -3\nmode: 0644\ny: yes\n",
        )
        .unwrap();
        assert_eq!(
            node.to_json(),
            serde_json::json!({"s": "5", "i": 5, "f": 1.5, "b": true, "n": null,
                "big": 9223372036854775807i64, "neg": -3, "mode": 420, "y": "yes"})
        );
    }

    #[test]
    fn errors_carry_file_lines() {
        let docs = split_documents("a: 1\n---\nb: 2\nc: [1, 2\nd: 3\n").unwrap();
        assert!(parse_document(&docs[0]).is_ok());
        let err = parse_document(&docs[1]).unwrap_err();
        assert!(err.line >= 4, "{err:?}");
        assert!(!err.message.contains(" at line "), "{err:?}");
    }

    #[test]
    fn alias_bomb_is_refused() {
        let text = crate::util::yaml_fixtures::alias_bomb(12);
        assert!(parse_single(&text).is_err());
    }

    #[test]
    fn anchors_and_merge_keys() {
        let node = parse_single(
            "base: &base {image: web, port: 80}\nweb:\n  <<: *base\n  port: 8080\nlist: [*base]\n",
        )
        .unwrap();
        assert_eq!(
            node.to_json()["web"],
            serde_json::json!({"image": "web", "port": 8080})
        );
        assert_eq!(node.to_json()["list"][0]["image"], "web");
    }

    #[test]
    fn duplicate_keys_are_errors() {
        let err = parse_single("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(err.line, 3, "{err:?}");
        assert_eq!(err.message, "duplicate mapping key: a");
    }

    #[test]
    fn syntax_messages_are_for_users() {
        let cases = [
            ("app: shop\n  bad: [\n", 2, "check the indentation"),
            ("key: value: other\n", 1, "quote a value that contains"),
            ("a: \"unterminated\nb: 2\n", 1, "unclosed quote"),
            ("a: *nope\n", 1, "unknown anchor"),
        ];
        for (text, line, part) in cases {
            let err = parse_single(text).unwrap_err();
            assert_eq!(err.line, line, "{text:?}: {err:?}");
            assert!(err.message.contains(part), "{text:?}: {err:?}");
        }
    }

    #[test]
    fn several_documents_refused_for_single() {
        let err = parse_single("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(err.line, 2);
    }

    /// Each hostile input: an error with the file's line and a whole message, quickly.
    #[test]
    fn hostile_inputs_are_errors_with_lines() {
        let bomb = {
            let mut t = String::from("kind: x\n\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
            for i in 1..12 {
                let prev = format!("*a{}", i - 1);
                t.push_str(&format!(
                    "a{i}: &a{i} [{}]\n",
                    [prev.as_str(); 10].join(", ")
                ));
            }
            t
        };
        let deep_flow = format!("a: {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
        // (10,000 lines of growing indentation would be 50 MB: 1,000 show the same.)
        let deep_block = (0..1_000)
            .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
            .collect::<String>();
        let cases: Vec<(&str, String, usize, &str)> = vec![
            (
                "alias bomb",
                bomb,
                8,
                "expand past the cap of 200,000 replayed nodes (an alias bomb?); write the values out",
            ),
            (
                "nesting 10,000 deep (flow)",
                deep_flow,
                1,
                "nested deeper than 100 levels (the cap)",
            ),
            (
                "nesting 10,000 deep (block)",
                deep_block,
                101,
                "nested deeper than 100 levels (the cap)",
            ),
            (
                "nesting 10,000 deep (compact)",
                format!("{}x\n", "- ".repeat(10_000)),
                1,
                "nested deeper than 100 levels (the cap)",
            ),
            (
                "colliding keys 1 and \"1\"",
                "a: 1\n1: x\n\"1\": y\n".into(),
                3,
                "collides with key 1 at line 2",
            ),
            (
                "colliding keys ~ and null",
                "~: x\nnull: y\n".into(),
                2,
                "collides",
            ),
            (
                "complex key",
                "? [a, b]\n: x\n".into(),
                1,
                "a list used as a mapping key",
            ),
            (
                "duplicate key",
                "a: 1\nb: 2\na: 3\n".into(),
                3,
                "duplicate mapping key: a",
            ),
            (
                "merge collision",
                "b: &b {x: 1}\nc:\n  <<: *b\n  1: y\n  \"1\": z\n".into(),
                5,
                "collides",
            ),
            (
                "integer past u64",
                "a: 1\nreplicas: 99999999999999999999999\n".into(),
                2,
                "number 1e23 does not fit in a 64-bit integer",
            ),
            (
                "integer past i64",
                "replicas: 9223372036854775808\n".into(),
                1,
                "does not fit in a 64-bit integer",
            ),
            (
                "negative past i64",
                "x: 1\n\nreplicas: -99999999999999999999\n".into(),
                3,
                "does not fit in a 64-bit integer",
            ),
        ];
        // How fast each is refused is the bench's fuzz section's to measure, not a test's.
        for (what, text, line, part) in cases {
            let err = parse_single(&text).unwrap_err();
            if line > 0 {
                assert_eq!(err.line, line, "{what}: {err:?}");
            }
            assert!(err.message.contains(part), "{what}: {err:?}");
            assert!(!err.message.ends_with(' '), "{what}: cut message {err:?}");
        }
    }

    #[test]
    fn json_numbers_past_i64_are_found() {
        let cases = [
            (
                r#"{"a": [1, {"b": 99999999999999999999999}]}"#,
                Some("number 1e23 does not fit"),
            ),
            (
                r#"{"a": 9223372036854775808}"#,
                Some("number 9223372036854775808 does not fit"),
            ),
            (
                r#"{"a": 9223372036854775807, "b": -9223372036854775808, "c": 1.5, "d": -2.5e10}"#,
                None,
            ),
        ];
        for (text, want) in cases {
            let value: Value = serde_json::from_str(text).unwrap();
            let got = json_number_problem(&value);
            match want {
                Some(part) => assert!(
                    got.as_deref().is_some_and(|g| g.contains(part)),
                    "{text}: {got:?}"
                ),
                None => assert_eq!(got, None, "{text}"),
            }
        }
    }

    #[test]
    fn error_lines_inside_messages_are_the_files() {
        assert_eq!(
            shift_message_lines("a at line 3, and line 10 b", 5),
            "a at line 8, and line 15 b"
        );
        assert_eq!(shift_message_lines("the line x", 5), "the line x");
        assert_eq!(shift_message_lines("line 2", 0), "line 2");
    }

    #[test]
    fn documents_past_the_cap_are_refused_before_parsing() {
        let text = "a: 1\n---\n".repeat(100_000);
        let err = split_documents(&text).unwrap_err();
        assert_eq!(err.line, 2 * MAX_DOCUMENTS, "{err:?}");
        assert!(
            err.message.contains("more than 10000 YAML documents"),
            "{err:?}"
        );
        let text = "a: 1\n---\n".repeat(MAX_DOCUMENTS);
        assert_eq!(split_documents(&text).unwrap().len(), MAX_DOCUMENTS);
    }
}
