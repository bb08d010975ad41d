//! `{{target}}`, `{{app}}`, `{{namespace}}`, `{{revision}}`, `{{commit}}`, `{{vars.KEY}}` in a
//! check's query or URL, each value escaped for where it lands. The names were checked when
//! the config was read (`config::template_problem`).

use std::collections::BTreeMap;

use crate::config::template_names;

/// The values of one target's templates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateValues {
    pub target: String,
    pub app: String,
    pub namespace: String,
    /// The release revision on the target ("" when there is none, e.g. a dry run).
    pub revision: String,
    /// The deploy's commit sha ("" when unknown).
    pub commit: String,
    pub vars: BTreeMap<String, String>,
}

impl TemplateValues {
    fn get(&self, name: &str) -> Option<&str> {
        Some(match name {
            "target" => &self.target,
            "app" => &self.app,
            "namespace" => &self.namespace,
            "revision" => &self.revision,
            "commit" => &self.commit,
            _ => {
                return self
                    .vars
                    .get(name.strip_prefix("vars.")?)
                    .map(String::as_str);
            }
        })
    }
}

/// Where a rendered value lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    /// Inside a PromQL double-quoted string: `\` and `"` escaped (and line breaks), so a
    /// value cannot end the string and change the query.
    PromQl,
    /// In a URL: percent-encoded, all but RFC 3986's unreserved characters.
    Url,
}

/// `text` with every template replaced by its escaped value. A name without a value (never
/// after the config's check) is left as written.
pub fn render(text: &str, values: &TemplateValues, escape: Escape) -> String {
    if template_names(text).is_err() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        let whole = &rest[start..start + 2 + end + 2];
        match values.get(after[..end].trim()) {
            Some(value) => out.push_str(&escaped(value, escape)),
            None => out.push_str(whole),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

fn escaped(value: &str, escape: Escape) -> String {
    match escape {
        Escape::PromQl => {
            let mut out = String::with_capacity(value.len());
            for c in value.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '"' => out.push_str("\\\""),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    c => out.push(c),
                }
            }
            out
        }
        Escape::Url => percent_encode(value),
    }
}

/// Percent-encodes all but `A-Z a-z 0-9 - . _ ~`.
pub fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `url` with the password of its user info masked (`https://u:***@host`), for output.
pub fn mask_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://***@{host}{path}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> TemplateValues {
        TemplateValues {
            target: "canary".into(),
            app: "shop".into(),
            namespace: "prod".into(),
            revision: "7".into(),
            commit: "abc123".into(),
            vars: [("region".to_string(), "eu \"west\"\\1/&x".to_string())].into(),
        }
    }

    #[test]
    fn templates_render_escaped_for_where_they_land() {
        let table: &[(&str, Escape, &str)] = &[
            (
                r#"up{cluster="{{target}}",app="{{ app }}"}"#,
                Escape::PromQl,
                r#"up{cluster="canary",app="shop"}"#,
            ),
            (
                r#"x{region="{{vars.region}}"}"#,
                Escape::PromQl,
                r#"x{region="eu \"west\"\\1/&x"}"#,
            ),
            (
                "https://{{target}}.example.com/h?r={{vars.region}}&rev={{revision}}&c={{commit}}&ns={{namespace}}",
                Escape::Url,
                "https://canary.example.com/h?r=eu%20%22west%22%5C1%2F%26x&rev=7&c=abc123&ns=prod",
            ),
            ("no templates", Escape::Url, "no templates"),
            ("{{unknown}} stays", Escape::PromQl, "{{unknown}} stays"),
            ("{{vars.none}}", Escape::PromQl, "{{vars.none}}"),
            ("unclosed {{target", Escape::PromQl, "unclosed {{target"),
        ];
        for (text, escape, want) in table {
            assert_eq!(render(text, &values(), *escape), *want, "{text}");
        }
    }

    #[test]
    fn user_info_is_masked() {
        assert_eq!(
            mask_url("https://u:pw@prom.example.com/x@y"),
            "https://***@prom.example.com/x@y"
        );
        assert_eq!(mask_url("http://prom:9090"), "http://prom:9090");
        assert_eq!(mask_url("not a url"), "not a url");
    }
}
