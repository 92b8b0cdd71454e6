//! The keyword tier: an in-memory SQLite FTS5 table over the catalog's tools,
//! ranked with BM25, English words reduced to their stems (porter) so "files"
//! finds "file" and "creating" finds "create".
//!
//! Each tool is one row of three columns: its name split into words (`_`, `-`,
//! `.`, `/` and camelCase boundaries) next to the name itself, its description
//! (title included), and its parameters' names, split the same way. A name match
//! weighs most.

use std::sync::Mutex;

use rmcp::model::Tool;
use rusqlite::Connection;

/// BM25 column weights: name, description, parameters.
const WEIGHTS: (f64, f64, f64) = (4.0, 1.0, 1.5);
/// The most query terms used (the rest of a long description adds little and costs).
const MAX_TERMS: usize = 64;

/// Why the index could not be built or searched.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IndexError {
    #[error("tool index: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("tool index: {0}")]
    Build(String),
}

/// One catalog version's tools and their search table.
pub(crate) struct Index {
    /// The indexed tools; a row's id is its position here.
    tools: Vec<Tool>,
    /// Each tool's tokens as `tools/list` sends it.
    tokens: Vec<usize>,
    db: Mutex<Connection>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

/// One match: the tool's position in the index and its score (higher is better).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Hit {
    pub(crate) position: usize,
    pub(crate) score: f64,
}

/// `name` split into lower-case words at separators and camelCase boundaries
/// (`getHTTPResponse` → `get http response`).
pub(crate) fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            continue;
        }
        let prev = i.checked_sub(1).map(|p| chars[p]);
        let next = chars.get(i + 1).copied();
        let boundary = c.is_uppercase()
            && prev.is_some_and(|p| {
                p.is_lowercase()
                    || p.is_numeric()
                    || (p.is_uppercase() && next.is_some_and(char::is_lowercase))
            });
        if boundary && !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

fn name_column(name: &str) -> String {
    let mut text = words(name).join(" ");
    text.push(' ');
    text.push_str(name);
    text
}

fn description_column(tool: &Tool) -> String {
    let mut text = tool.title.clone().unwrap_or_default();
    if let Some(description) = &tool.description {
        text.push(' ');
        text.push_str(description);
    }
    if let Some(title) = tool.annotations.as_ref().and_then(|a| a.title.as_ref()) {
        text.push(' ');
        text.push_str(title);
    }
    text
}

fn parameters_column(tool: &Tool) -> String {
    let Some(serde_json::Value::Object(properties)) = tool.input_schema.get("properties") else {
        return String::new();
    };
    properties
        .keys()
        .map(|name| name_column(name))
        .collect::<Vec<_>>()
        .join(" ")
}

/// English words too common to tell tools apart: a query's "the" would match
/// nearly every description.
const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "for", "from", "i", "in", "into",
    "is", "it", "me", "my", "of", "on", "or", "please", "some", "that", "the", "this", "to",
    "tool", "tools", "want", "with",
];

/// The FTS5 query for free text: its words (split as names are) but stopwords,
/// each quoted as a string so no FTS5 operator or column filter can be injected,
/// any of them matching. `None` when it has no word.
pub(crate) fn query(texts: &[&str]) -> Option<String> {
    let mut terms: Vec<String> = Vec::new();
    let mut common: Vec<String> = Vec::new();
    for text in texts {
        for word in words(text) {
            let list = if STOPWORDS.contains(&word.as_str()) {
                &mut common
            } else {
                &mut terms
            };
            if list.len() < MAX_TERMS && !list.contains(&word) {
                list.push(word);
            }
        }
    }
    // Only stopwords ("the tool"): search with them rather than not at all.
    if terms.is_empty() {
        terms = common;
    }
    // Words are alphanumeric only: no quote to escape.
    (!terms.is_empty()).then(|| {
        terms
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(" OR ")
    })
}

impl Index {
    /// Index `tools`.
    pub(crate) fn build(tools: &[Tool]) -> Result<Self, IndexError> {
        let mut db = Connection::open_in_memory()?;
        db.execute_batch(
            "CREATE VIRTUAL TABLE tools USING fts5(name, description, parameters, \
             tokenize = 'porter unicode61 remove_diacritics 2');",
        )?;
        let transaction = db.transaction()?;
        {
            let mut insert = transaction.prepare(
                "INSERT INTO tools (rowid, name, description, parameters) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for (position, tool) in tools.iter().enumerate() {
                let rowid = i64::try_from(position)
                    .map_err(|_| IndexError::Build("too many tools".into()))?;
                insert.execute((
                    rowid,
                    name_column(&tool.name),
                    description_column(tool),
                    parameters_column(tool),
                ))?;
            }
        }
        transaction.commit()?;
        Ok(Self {
            tokens: tools.iter().map(super::tokens::tool).collect(),
            tools: tools.to_vec(),
            db: Mutex::new(db),
        })
    }

    /// The indexed tools.
    pub(crate) fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// The tokens of the tool at `position`.
    pub(crate) fn tokens(&self, position: usize) -> usize {
        self.tokens.get(position).copied().unwrap_or(0)
    }

    /// Every tool matching `fts_query` (from [`query`]), best first.
    #[cfg(test)]
    pub(crate) fn search(&self, fts_query: &str) -> Result<Vec<Hit>, IndexError> {
        self.search_page(fts_query, i64::MAX, 0)
    }

    /// At most `limit` tools matching `fts_query`, best first, after the first
    /// `offset`: the caller pages until it has enough hits it may show, so a search
    /// matching thousands of tools does not rank them all into memory. Blocking
    /// (SQLite): call it off the async runtime ([`Self::search_blocking`]).
    pub(crate) fn search_page(
        &self,
        fts_query: &str,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<Hit>, IndexError> {
        let db = self.db.lock().unwrap_or_else(|e| e.into_inner());
        let mut statement = db.prepare_cached(
            "SELECT rowid, bm25(tools, ?2, ?3, ?4) AS rank FROM tools \
             WHERE tools MATCH ?1 ORDER BY rank, rowid LIMIT ?5 OFFSET ?6",
        )?;
        let rows = statement.query_map(
            (fts_query, WEIGHTS.0, WEIGHTS.1, WEIGHTS.2, limit, offset),
            |row| Ok((row.get::<_, i64>(0)?, row.get::<_, f64>(1)?)),
        )?;
        let mut hits = Vec::new();
        for row in rows {
            let (rowid, rank) = row?;
            if let Ok(position) = usize::try_from(rowid) {
                // bm25() is lower for better matches; reported the other way round.
                hits.push(Hit {
                    position,
                    score: -rank,
                });
            }
        }
        Ok(hits)
    }

    /// [`Self::search_page`] on the blocking pool: an FTS query over thousands of
    /// tools must not hold an async worker (nor the index's lock on one).
    pub(crate) async fn search_blocking(
        self: &std::sync::Arc<Self>,
        fts_query: std::sync::Arc<str>,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<Hit>, IndexError> {
        let index = self.clone();
        tokio::task::spawn_blocking(move || index.search_page(&fts_query, limit, offset))
            .await
            .map_err(|_| IndexError::Build("the search was cancelled".into()))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, description: &str, parameters: &[&str]) -> Tool {
        let properties: serde_json::Map<_, _> = parameters
            .iter()
            .map(|p| ((*p).to_owned(), json!({"type": "string"})))
            .collect();
        let schema = json!({"type": "object", "properties": properties});
        let serde_json::Value::Object(schema) = schema else {
            unreachable!()
        };
        Tool::new(
            name.to_owned(),
            description.to_owned(),
            std::sync::Arc::new(schema),
        )
    }

    #[test]
    fn names_split_at_separators_and_case() {
        assert_eq!(words("github_create_issue"), ["github", "create", "issue"]);
        assert_eq!(words("getHTTPResponse"), ["get", "http", "response"]);
        assert_eq!(words("list-files.v2"), ["list", "files", "v2"]);
        assert!(words("___").is_empty());
    }

    #[test]
    fn queries_cannot_inject_operators() {
        assert_eq!(
            query(&["name:x OR \"y\" NEAR(z)*"]).as_deref(),
            Some("\"name\" OR \"x\" OR \"y\" OR \"near\" OR \"z\"")
        );
        assert_eq!(query(&["", "!!"]), None);
        assert_eq!(query(&["the tool"]).as_deref(), Some("\"the\" OR \"tool\""));
    }

    #[test]
    fn stems_names_descriptions_and_parameters() {
        let index = Index::build(&[
            tool("fs_readFile", "Read a file from disk", &["path"]),
            tool(
                "gh_create_issue",
                "Open an issue in a repository",
                &["repo", "title"],
            ),
            tool("weather_forecast", "Tomorrow's weather", &["cityName"]),
        ])
        .unwrap();
        let best = |q: &str| {
            let hits = index.search(&query(&[q]).unwrap()).unwrap();
            hits.first()
                .map(|h| index.tools()[h.position].name.to_string())
        };
        // Stemming: "creating issues" → create, issu.
        assert_eq!(best("creating issues").as_deref(), Some("gh_create_issue"));
        // camelCase name split; "files" stems to "file".
        assert_eq!(best("reading files").as_deref(), Some("fs_readFile"));
        // A parameter name, split.
        assert_eq!(best("city").as_deref(), Some("weather_forecast"));
        assert_eq!(best("kubernetes"), None);
        assert!(index.tokens(0) > 0);
    }

    #[tokio::test]
    async fn pages_of_hits_are_the_ranking_in_slices() {
        let tools: Vec<Tool> = (0..20)
            .map(|i| tool(&format!("t{i}"), &"file ".repeat(i + 1), &[]))
            .collect();
        let index = std::sync::Arc::new(Index::build(&tools).unwrap());
        let q: std::sync::Arc<str> = query(&["file"]).unwrap().into();
        let all: Vec<usize> = index
            .search(&q)
            .unwrap()
            .iter()
            .map(|h| h.position)
            .collect();
        assert_eq!(all.len(), 20);
        let mut paged = Vec::new();
        for offset in (0..25).step_by(6) {
            let page = index.search_blocking(q.clone(), 6, offset).await.unwrap();
            assert!(page.len() <= 6);
            paged.extend(page.iter().map(|h| h.position));
        }
        assert_eq!(paged, all);
    }
}
