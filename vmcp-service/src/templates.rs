//! The templates of composite tools: minijinja, sandboxed, with the reference's
//! Go-template forms translated at load time.
//!
//! The environment has no loader, no I/O and no globals besides the context, a fuel
//! budget bounds the work of one rendering, undefined values are errors, and a
//! rendering longer than [`MAX_OUTPUT`] fails. The filters are `json`, `fromJson`
//! and `quote`, plus minijinja's builtins.
//!
//! A Go form is a `{{ … }}` whose words name fields with a leading dot:
//! `{{.params.x}}`, `{{json .x}}`, `{{fromJson .x}}`, `{{quote .x}}`, and the
//! comparisons `{{eq .a "b"}}`, `{{ne .a .b}}`, `{{not .x}}`. Anything else with a
//! leading-dot field (`{{if .x}}`, `{{range …}}`, pipelines) is refused with its text.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior, Value};

/// The longest rendering of one template.
pub(crate) const MAX_OUTPUT: usize = 1024 * 1024;
/// The work one rendering may do (minijinja fuel: roughly one unit per instruction).
const FUEL: u64 = 200_000;
/// How deeply templates may nest (loops, calls).
const RECURSION: usize = 100;

/// Why a template cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TemplateError {
    /// A Go-template form this engine does not take.
    #[error(
        "the Go-template form {0:?} is not supported (use jinja syntax: {{{{ params.x }}}}, filters json, fromJson, quote)"
    )]
    UnsupportedGoForm(String),
    /// The template does not parse.
    #[error("template syntax error: {0}")]
    Syntax(String),
    /// Rendering failed (an undefined value, a bad filter argument, fuel).
    #[error("template failed: {0}")]
    Render(String),
    /// The rendering is longer than [`MAX_OUTPUT`].
    #[error("template output is longer than {MAX_OUTPUT} bytes")]
    TooLong,
}

fn environment() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_fuel(Some(FUEL));
        env.set_recursion_limit(RECURSION);
        env.add_filter("json", json);
        env.add_filter("fromJson", from_json);
        env.add_filter("quote", quote);
        env
    })
}

fn json(value: &Value) -> Result<String, Error> {
    serde_json::to_string(value).map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))
}

fn from_json(text: &str) -> Result<Value, Error> {
    serde_json::from_str::<serde_json::Value>(text)
        .map(|v| Value::from(minijinja::value::Serde(v)))
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("fromJson: {e}")))
}

fn quote(value: &Value) -> Result<String, Error> {
    let text = match value.as_str() {
        Some(s) => s.to_owned(),
        None => value.to_string(),
    };
    serde_json::to_string(&text).map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))
}

/// A template ready to render: its jinja source (translated from Go forms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    source: String,
}

impl Template {
    /// Translate and compile `text`.
    pub(crate) fn parse(text: &str) -> Result<Self, TemplateError> {
        let source = translate(text)?;
        environment()
            .template_from_str(&source)
            .map_err(|e| TemplateError::Syntax(describe(&e)))?;
        Ok(Self { source })
    }

    /// Whether this is plain text (no template markup), which renders to itself.
    pub(crate) fn is_literal(&self) -> bool {
        !self.source.contains("{{") && !self.source.contains("{%")
    }

    /// The step ids this template reads through `steps.<id>`.
    pub(crate) fn step_refs(&self) -> BTreeSet<String> {
        let Ok(template) = environment().template_from_str(&self.source) else {
            return BTreeSet::new();
        };
        template
            .undeclared_variables(true)
            .into_iter()
            .filter_map(|path| {
                let mut parts = path.split('.');
                (parts.next() == Some("steps"))
                    .then(|| parts.next().map(str::to_owned))
                    .flatten()
            })
            .collect()
    }

    /// Render against `context` (a JSON object).
    pub(crate) fn render(&self, context: &serde_json::Value) -> Result<String, TemplateError> {
        if self.is_literal() {
            return Ok(self.source.clone());
        }
        let template = environment()
            .template_from_str(&self.source)
            .map_err(|e| TemplateError::Syntax(describe(&e)))?;
        let out = template
            .render(Value::from(minijinja::value::Serde(context)))
            .map_err(|e| TemplateError::Render(describe(&e)))?;
        if out.len() > MAX_OUTPUT {
            return Err(TemplateError::TooLong);
        }
        Ok(out)
    }
}

/// minijinja's message without its multi-line debug dump.
fn describe(error: &Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

/// Rewrite every Go form of `text` as jinja; jinja text passes unchanged.
pub(crate) fn translate(text: &str) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            // Unclosed: the compiler reports it.
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let inner = &after[..end];
        match go_expression(inner)? {
            Some(expr) => {
                out.push_str("{{ ");
                out.push_str(&expr);
                out.push_str(" }}");
            }
            None => {
                out.push_str("{{");
                out.push_str(inner);
                out.push_str("}}");
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The words of an expression, keeping quoted strings whole.
fn words(inner: &str) -> Option<Vec<&str>> {
    let mut words = Vec::new();
    let mut rest = inner.trim();
    while !rest.is_empty() {
        let len = if let Some(quoted) = rest.strip_prefix('"') {
            quoted.find('"')? + 2
        } else {
            rest.find(char::is_whitespace).unwrap_or(rest.len())
        };
        words.push(&rest[..len]);
        rest = rest[len..].trim_start();
    }
    Some(words)
}

/// A Go argument as jinja: `.a.b` → `a.b`, `"x"` and numbers unchanged.
fn go_argument(word: &str) -> Option<String> {
    if let Some(path) = word.strip_prefix('.') {
        let ok = !path.is_empty()
            && path
                .split('.')
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'));
        return ok.then(|| {
            // A segment that is not an identifier (`steps.1st`) is indexed.
            let mut parts = path.split('.');
            let mut expr = parts.next().unwrap_or_default().to_owned();
            for part in parts {
                if part.starts_with(|c: char| c.is_ascii_digit()) {
                    expr.push_str(&format!("[{part:?}]"));
                } else {
                    expr.push('.');
                    expr.push_str(part);
                }
            }
            expr
        });
    }
    let literal =
        word.starts_with('"') || word.parse::<f64>().is_ok() || matches!(word, "true" | "false");
    literal.then(|| word.to_owned())
}

/// `Some(jinja)` for a Go form, `None` for jinja, an error for a Go form we refuse.
fn go_expression(inner: &str) -> Result<Option<String>, TemplateError> {
    let trimmed = inner.trim_matches(|c: char| c == '-' || c.is_whitespace());
    let refuse = || TemplateError::UnsupportedGoForm(format!("{{{{{inner}}}}}"));
    let Some(words) = words(trimmed) else {
        return Ok(None);
    };
    if !words.iter().any(|w| w.starts_with('.')) {
        return Ok(None);
    }
    let arg = |i: usize| words.get(i).and_then(|w| go_argument(w)).ok_or_else(refuse);
    let expr = match (words[0], words.len()) {
        (w, 1) if w.starts_with('.') => arg(0)?,
        ("json", 2) => format!("{} | json", arg(1)?),
        ("fromJson", 2) => format!("{} | fromJson", arg(1)?),
        ("quote", 2) => format!("{} | quote", arg(1)?),
        ("not", 2) => format!("not {}", arg(1)?),
        ("eq", 3) => format!("{} == {}", arg(1)?, arg(2)?),
        ("ne", 3) => format!("{} != {}", arg(1)?, arg(2)?),
        _ => return Err(refuse()),
    };
    Ok(Some(expr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn translates_the_documented_go_forms() {
        assert_eq!(translate("{{.params.x}}").unwrap(), "{{ params.x }}");
        assert_eq!(
            translate("a {{json .steps.s.output.list}} b").unwrap(),
            "a {{ steps.s.output.list | json }} b"
        );
        assert_eq!(
            translate(r#"{{eq .steps.c.output.action "accept"}}"#).unwrap(),
            r#"{{ steps.c.output.action == "accept" }}"#
        );
        assert_eq!(translate("{{ params.x }}").unwrap(), "{{ params.x }}");
        assert!(matches!(
            translate("{{if .params.x}}y{{end}}"),
            Err(TemplateError::UnsupportedGoForm(_))
        ));
        assert!(matches!(
            translate("{{.params.x | printf}}"),
            Err(TemplateError::UnsupportedGoForm(_))
        ));
    }

    #[test]
    fn renders_with_filters_and_refuses_undefined() {
        let ctx =
            json!({"params": {"x": "a\"b", "n": 3}, "steps": {"s": {"output": {"list": [1, 2]}}}});
        let t = Template::parse("{{quote .params.x}}").unwrap();
        assert_eq!(t.render(&ctx).unwrap(), r#""a\"b""#);
        let t = Template::parse("{{json .steps.s.output.list}}").unwrap();
        assert_eq!(t.render(&ctx).unwrap(), "[1,2]");
        let t = Template::parse(r#"{{ ('{"k": 5}' | fromJson).k }}"#).unwrap();
        assert_eq!(t.render(&ctx).unwrap(), "5");
        let t = Template::parse("{{ params.missing }}").unwrap();
        assert!(matches!(t.render(&ctx), Err(TemplateError::Render(_))));
        assert!(matches!(
            Template::parse("{{ params.x "),
            Err(TemplateError::Syntax(_))
        ));
    }

    #[test]
    fn names_the_steps_it_reads() {
        let t =
            Template::parse("{{.steps.a.output.x}} {{ steps.b.status }} {{ params.p }}").unwrap();
        assert_eq!(
            t.step_refs().into_iter().collect::<Vec<_>>(),
            vec!["a".to_owned(), "b".to_owned()]
        );
    }

    #[test]
    fn fuel_bounds_runaway_loops() {
        let t = Template::parse(
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
        )
        .unwrap();
        assert!(t.render(&json!({})).is_err());
    }
}
