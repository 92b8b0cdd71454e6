//! Loader messages that point at the text: YAML syntax errors with their line,
//! column and line of text, and a misspelled key named next to the required key it
//! left missing.

use super::schema::suggest_key;

/// If `yaml` is not well-formed YAML, say where and show the line. Checked before the
/// typed parse, which would otherwise report a half-read value as a type error
/// (an unclosed `[` as `invalid type: sequence`).
pub(super) fn syntax_error(yaml: &str) -> Option<String> {
    let error = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(yaml).err()?;
    let location = error.location()?;
    let (line, column) = (location.line(), location.column());
    // libyaml words it "<problem> at line L column C[, while parsing <what> at line
    // L column C]"; the locations are said in our own words below.
    let text = error.to_string();
    let at = regex::Regex::new(r" at line (\d+) column (\d+)").ok()?;
    let problem = at.splitn(&text, 2).next().unwrap_or(&text).to_owned();
    let context = text.split_once(", while parsing ").map(|(_, c)| c);
    let (shown, context) = match context.and_then(|c| at.captures(c).map(|m| (c, m))) {
        // An unclosed `[` or `{` is found at the end: show where it opened.
        Some((c, m)) => {
            let opened: usize = m[1].parse().ok()?;
            let what = at.replace(c, "");
            (
                opened,
                format!(" ({what} that starts at line {opened}, column {})", &m[2]),
            )
        }
        None => (line, String::new()),
    };
    let source = yaml
        .lines()
        .nth(shown.saturating_sub(1))
        .map(str::trim_end)
        .unwrap_or("(end of file)");
    Some(format!(
        "YAML syntax error at line {line}, column {column}: {problem}{context}\n    {shown} | {source}"
    ))
}

/// `backends.0.URL` as the validator writes paths: `backends[0].URL`.
fn bracketed(dotted: &str) -> String {
    let mut out = String::new();
    for segment in dotted.split('.') {
        if segment.parse::<usize>().is_ok() {
            out.push_str(&format!("[{segment}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(segment);
        }
    }
    out
}

/// An ignored key with its suggestion, as the validator would name them:
/// (`backends[0].URL`, `backends[0].url`).
pub(super) fn misspellings(ignored: &[String]) -> Vec<(String, String)> {
    ignored
        .iter()
        .filter_map(|key| {
            let suggestion = suggest_key(key)?;
            let found = bracketed(key);
            let parent = found.rsplit_once('.').map(|(p, _)| p).unwrap_or("");
            let meant = if parent.is_empty() {
                suggestion
            } else {
                format!("{parent}.{suggestion}")
            };
            Some((found, meant))
        })
        .collect()
}

/// Append "(found `URL`, did you mean `url`?)" to each "`x` is required" error whose
/// key was present under another spelling.
pub(super) fn annotate_required(errors: &mut [String], misspelled: &[(String, String)]) {
    for error in errors.iter_mut() {
        for (found, meant) in misspelled {
            if error.starts_with(&format!("{meant} is required")) {
                let short = |path: &str| path.rsplit('.').next().unwrap_or(path).to_owned();
                error.push_str(&format!(
                    " (found `{}`, did you mean `{}`?)",
                    short(found),
                    short(meant)
                ));
            }
        }
    }
}

/// The warning for a key vmcp does not use.
pub fn ignored_key_warning(key: &str) -> String {
    match suggest_key(key) {
        Some(suggestion) => {
            format!("configuration key {key:?} is not used by vmcp (did you mean {suggestion:?}?)")
        }
        None => {
            format!(
                "configuration key {key:?} is not used by vmcp (not implemented, or misspelled)"
            )
        }
    }
}
