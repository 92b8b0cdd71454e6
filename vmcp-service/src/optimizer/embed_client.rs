//! The client of the embedding endpoint (`optimizer.embeddingService`): Hugging Face
//! text-embeddings-inference (`POST /embed {inputs}` → `[[f32]]`) or an
//! OpenAI-compatible `POST /v1/embeddings {model, input}` → `{data: [{embedding}]}`,
//! each request bounded by `embeddingServiceTimeout`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::config::{EmbeddingProvider, OptimizerConfig};

/// The default bound on one embedding request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The most texts sent in one request (TEI's default `max_client_batch_size` is 32).
const BATCH: usize = 32;

/// Why an embedding request failed. The endpoint's body is never quoted: it may
/// echo the texts or a key.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// No answer within the timeout.
    #[error("the embedding service did not answer within {0:?}")]
    Timeout(Duration),
    /// No connection, or the request failed.
    #[error("the embedding service is unreachable: {0}")]
    Unreachable(String),
    /// A non-success HTTP status.
    #[error("the embedding service answered HTTP {0}")]
    Status(u16),
    /// An answer of another shape.
    #[error("the embedding service's answer is not {0}")]
    Shape(&'static str),
    /// An `embeddingHeaders` entry that is not a valid header.
    #[error("optimizer.embeddingHeaders has an invalid header: {0}")]
    Header(String),
}

/// One embedding endpoint.
#[derive(Debug, Clone)]
pub struct EmbedClient {
    http: reqwest::Client,
    url: String,
    provider: EmbeddingProvider,
    model: Option<String>,
    headers: http::HeaderMap,
    timeout: Duration,
    /// The model's dimension, learnt from its first answer (0: none yet): a vector
    /// of another length is an error, not a silently wrong cosine.
    dimension: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl EmbedClient {
    /// The client `config` describes, or `None` when it sets no `embeddingService`.
    pub fn from_config(config: &OptimizerConfig) -> Result<Option<Self>, EmbedError> {
        let Some(base) = &config.embedding_service else {
            return Ok(None);
        };
        let provider = config.embedding_provider.unwrap_or(EmbeddingProvider::Tei);
        let mut headers = http::HeaderMap::new();
        for (name, value) in &config.embedding_headers {
            let name = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| EmbedError::Header(name.clone()))?;
            let mut value = http::HeaderValue::from_str(value)
                .map_err(|_| EmbedError::Header(name.to_string()))?;
            // Keys often travel here: keep them out of any debug output.
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        Ok(Some(Self::new(
            base,
            provider,
            config.embedding_model.clone(),
            headers,
            config.embedding_service_timeout.unwrap_or(DEFAULT_TIMEOUT),
        )))
    }

    /// A client of the endpoint at `base` (the service's base URL; the provider's path
    /// is appended).
    pub fn new(
        base: &str,
        provider: EmbeddingProvider,
        model: Option<String>,
        headers: http::HeaderMap,
        timeout: Duration,
    ) -> Self {
        let path = match provider {
            EmbeddingProvider::Tei => "/embed",
            EmbeddingProvider::Openai => "/v1/embeddings",
        };
        let base = base.trim_end_matches('/');
        // A base that already names the path (…/v1/embeddings) is used as it is.
        let url = if base.ends_with(path) {
            base.to_owned()
        } else {
            format!("{base}{path}")
        };
        Self {
            http: reqwest::Client::new(),
            url,
            provider,
            model,
            headers,
            timeout,
            dimension: std::sync::Arc::default(),
        }
    }

    /// A short, stable name of what produces the vectors (endpoint and model), part
    /// of each cached vector's key so a changed model re-embeds everything.
    pub fn identity(&self) -> String {
        format!("{}|{}", self.url, self.model.as_deref().unwrap_or(""))
    }

    /// The vectors of `texts`, in order, L2-normalised (so a dot product is the
    /// cosine similarity).
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(BATCH) {
            out.extend(self.embed_batch(batch).await?);
        }
        Ok(out)
    }

    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let body = match self.provider {
            EmbeddingProvider::Tei => json!({"inputs": texts, "truncate": true}),
            EmbeddingProvider::Openai => json!({
                "model": self.model.as_deref().unwrap_or_default(),
                "input": texts,
            }),
        };
        let request = self
            .http
            .post(&self.url)
            .headers(self.headers.clone())
            .json(&body)
            .send();
        let answer = async {
            let response = request
                .await
                // Without its URL: the base URL may carry credentials.
                .map_err(|e| EmbedError::Unreachable(e.without_url().to_string()))?;
            let status = response.status();
            if !status.is_success() {
                return Err(EmbedError::Status(status.as_u16()));
            }
            response
                .json::<Value>()
                .await
                .map_err(|_| EmbedError::Shape("JSON"))
        };
        let value = tokio::time::timeout(self.timeout, answer)
            .await
            .map_err(|_| EmbedError::Timeout(self.timeout))??;
        let vectors = match self.provider {
            EmbeddingProvider::Tei => tei_vectors(value)?,
            EmbeddingProvider::Openai => openai_vectors(value)?,
        };
        if vectors.len() != texts.len() {
            return Err(EmbedError::Shape("one vector per input"));
        }
        self.check_dimension(&vectors)?;
        Ok(vectors.into_iter().map(normalised).collect())
    }

    /// Every vector has the model's dimension (the first answer's).
    fn check_dimension(&self, vectors: &[Vec<f32>]) -> Result<(), EmbedError> {
        use std::sync::atomic::Ordering;
        let Some(first) = vectors.first().map(Vec::len) else {
            return Ok(());
        };
        let known =
            match self
                .dimension
                .compare_exchange(0, first, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => first,
                Err(known) => known,
            };
        if first == 0 || vectors.iter().any(|v| v.len() != known) {
            return Err(EmbedError::Shape("vectors of the model's one dimension"));
        }
        Ok(())
    }
}

fn vector(value: Value) -> Result<Vec<f32>, EmbedError> {
    let Value::Array(items) = value else {
        return Err(EmbedError::Shape("an array of numbers"));
    };
    items
        .into_iter()
        .map(|v| {
            #[allow(clippy::cast_possible_truncation)] // embeddings are f32 by nature
            v.as_f64()
                .map(|f| f as f32)
                .ok_or(EmbedError::Shape("an array of numbers"))
        })
        .collect()
}

fn tei_vectors(value: Value) -> Result<Vec<Vec<f32>>, EmbedError> {
    let Value::Array(rows) = value else {
        return Err(EmbedError::Shape("an array of vectors"));
    };
    rows.into_iter().map(vector).collect()
}

fn openai_vectors(mut value: Value) -> Result<Vec<Vec<f32>>, EmbedError> {
    let Some(Value::Array(data)) = value.get_mut("data").map(Value::take) else {
        return Err(EmbedError::Shape("{data: [...]}"));
    };
    let mut rows: Vec<(u64, Vec<f32>)> = Vec::with_capacity(data.len());
    for (position, mut item) in data.into_iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(position as u64);
        let embedding = item
            .get_mut("embedding")
            .map(Value::take)
            .ok_or(EmbedError::Shape("{data: [{embedding}]}"))?;
        rows.push((index, vector(embedding)?));
    }
    // OpenAI documents the order by `index`; sort rather than trust it.
    rows.sort_by_key(|(index, _)| *index);
    Ok(rows.into_iter().map(|(_, v)| v).collect())
}

fn normalised(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut v {
            *x /= norm;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_answer_shapes_are_read_and_normalised() {
        let tei = tei_vectors(json!([[3.0, 4.0], [0.0, 2.0]])).unwrap();
        assert_eq!(
            tei.into_iter().map(normalised).collect::<Vec<_>>(),
            [vec![0.6, 0.8], vec![0.0, 1.0]]
        );
        let openai = openai_vectors(json!({"data": [
            {"index": 1, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}
        ]}))
        .unwrap();
        assert_eq!(openai, [vec![2.0], vec![1.0]]);
        assert!(tei_vectors(json!({"x": 1})).is_err());
        assert!(openai_vectors(json!([[1.0]])).is_err());
        assert!(tei_vectors(json!([["a"]])).is_err());
    }

    /// An endpoint on a free loopback port answering every POST with `status` and
    /// `body` after `delay`.
    async fn endpoint(status: u16, body: &'static str, delay: Duration) -> String {
        let app = axum::Router::new().fallback(axum::routing::post(move || async move {
            tokio::time::sleep(delay).await;
            (
                http::StatusCode::from_u16(status).unwrap(),
                [(http::header::CONTENT_TYPE, "application/json")],
                body,
            )
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    fn tei(url: &str, timeout: Duration) -> EmbedClient {
        EmbedClient::new(
            url,
            EmbeddingProvider::Tei,
            None,
            http::HeaderMap::new(),
            timeout,
        )
    }

    fn texts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("text {i}")).collect()
    }

    #[tokio::test]
    async fn failures_are_errors_not_panics() {
        let second = Duration::from_secs(1);
        let cases: [(u16, &str, Duration, &str); 6] = [
            (
                500,
                r#"{"error":"secret-echo"}"#,
                Duration::ZERO,
                "HTTP 500",
            ),
            (200, "not json at all", Duration::ZERO, "not JSON"),
            (
                200,
                r#"{"vectors": []}"#,
                Duration::ZERO,
                "an array of vectors",
            ),
            (200, "[[1.0, 2.0]]", Duration::ZERO, "one vector per input"),
            (200, "[[1.0], [1.0, 2.0]]", Duration::ZERO, "one dimension"),
            (200, "[[1.0], [2.0]]", 3 * second, "did not answer within"),
        ];
        for (status, body, delay, expected) in cases {
            let client = tei(&endpoint(status, body, delay).await, second);
            let error = client.embed(&texts(2)).await.unwrap_err().to_string();
            assert!(error.contains(expected), "{body}: {error}");
            // The endpoint's body is never quoted.
            assert!(!error.contains("secret-echo"), "{error}");
        }
        let refused = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", listener.local_addr().unwrap())
        };
        let error = tei(&refused, second).embed(&texts(1)).await.unwrap_err();
        assert!(matches!(error, EmbedError::Unreachable(_)), "{error}");
    }

    #[tokio::test]
    async fn a_later_answer_of_another_dimension_is_refused() {
        let url = endpoint(200, "[[3.0, 4.0]]", Duration::ZERO).await;
        let client = tei(&url, DEFAULT_TIMEOUT);
        assert_eq!(client.embed(&texts(1)).await.unwrap(), [vec![0.6, 0.8]]);
        // The same client (its clones share the dimension), another model behind it.
        let mut other = tei(
            &endpoint(200, "[[1.0, 2.0, 3.0]]", Duration::ZERO).await,
            DEFAULT_TIMEOUT,
        );
        other.dimension = client.dimension.clone();
        let error = other.embed(&texts(1)).await.unwrap_err();
        assert!(error.to_string().contains("one dimension"), "{error}");
    }

    #[test]
    fn the_provider_path_is_appended_once() {
        let client = |base: &str, provider| {
            EmbedClient::new(
                base,
                provider,
                None,
                http::HeaderMap::new(),
                DEFAULT_TIMEOUT,
            )
            .url
        };
        assert_eq!(
            client("http://h:1/", EmbeddingProvider::Tei),
            "http://h:1/embed"
        );
        assert_eq!(
            client("http://h:1/v1/embeddings", EmbeddingProvider::Openai),
            "http://h:1/v1/embeddings"
        );
        assert_eq!(
            client("http://h:1", EmbeddingProvider::Openai),
            "http://h:1/v1/embeddings"
        );
    }
}
