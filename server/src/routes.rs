//! The routes: parsing a request, decoding its images, queueing them, and formatting the
//! engine's results; and around every route, the API key, the deadline, a panic caught as a
//! 500, and the request counted in the metrics.

use crate::batcher::{Failure, Job, Kind, LabelSet, ReadyImage};
use crate::error::ApiError;
use crate::inputs::{image_string, ImageInput, ImageRequest};
use crate::{AppState, ImagePreparation, ModelInfo};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use futures_util::FutureExt;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use vitrt_engine::memory::{ImageDecoder, PreparedImage};
use vitrt_engine::results::{normalize, Scores};
use vitrt_model::labels::Prediction;
use vitrt_model::preprocess::naflex::{NaflexImage, NaflexProcessor};
use vitrt_model::preprocess::{ImageLimits, PreprocessError};
use vitrt_model::text::labels::{
    check_label_list, check_template, labels_from_list, DEFAULT_TEMPLATE,
};

type Shared = Arc<AppState>;

/// Routes with a name in the metrics; anything else counts as "other".
const ROUTES: [&str; 6] = [
    "/health",
    "/metrics",
    "/v1/models",
    "/v1/embeddings",
    "/v1/classify",
    "/v1/zero-shot",
];

pub fn router(state: Shared) -> Router {
    let routes = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/classify", post(classify))
        .route("/v1/zero-shot", post(zero_shot));
    guarded(routes, state)
}

/// `routes` behind the body limit and [`guard`].
fn guarded(routes: Router<Shared>, state: Shared) -> Router {
    let body_limit = state.options.max_body_bytes;
    routes
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            guard,
        ))
        .with_state(state)
}

/// Around every route: the API key (all but `/health`), the deadline (504), a panic caught
/// and answered 500 (for this request only), and the request counted.
async fn guard(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    state.metrics.started();
    let path = request.uri().path().to_string();
    let route = ROUTES
        .iter()
        .find(|r| **r == path)
        .copied()
        .unwrap_or("other");
    let response = if !authorized(&state, &request, route) {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "this server needs an API key: send Authorization: Bearer KEY",
        )
        .into_response()
    } else {
        let run = AssertUnwindSafe(next.run(request)).catch_unwind();
        match tokio::time::timeout(state.options.request_timeout, run).await {
            Ok(Ok(response)) => response,
            Ok(Err(_panic)) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "vitrt failed inside while answering this request (a bug, please report it)",
            )
            .into_response(),
            Err(_) => ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "the request was not answered within {} ms (--request-timeout-ms)",
                    state.options.request_timeout.as_millis()
                ),
            )
            .into_response(),
        }
    };
    state
        .metrics
        .request(route, response.status().as_u16(), started.elapsed());
    response
}

fn authorized(state: &AppState, request: &Request, route: &str) -> bool {
    let Some(key) = &state.options.api_key else {
        return true;
    };
    if route == "/health" {
        return true;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // Compared in time independent of where the first difference is.
    given.is_some_and(|given| {
        given.len() == key.len()
            && given
                .bytes()
                .zip(key.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    })
}

async fn health(State(state): State<Shared>) -> Response {
    if state.ready.load(Ordering::Acquire) {
        (StatusCode::OK, Json(json!({"status": "ok"}))).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "loading"})),
        )
            .into_response()
    }
}

async fn metrics(State(state): State<Shared>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(state.queue.depth()),
    )
        .into_response()
}

async fn models(State(state): State<Shared>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.options.model.model,
            "object": "model",
            "created": 0,
            "owned_by": "vitrt",
        }],
    }))
}

/// The model's facts, once it is open and warm; 503 before.
fn ready_model(state: &AppState) -> Result<Arc<ModelInfo>, ApiError> {
    match state.info.get() {
        Some(info) if state.ready.load(Ordering::Acquire) => Ok(Arc::clone(info)),
        _ => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the model is still loading: GET /health answers 200 once it is ready",
        )),
    }
}

async fn classify(
    State(state): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let info = ready_model(&state)?;
    let Some(config) = &info.classifier else {
        return Err(ApiError::bad_request(format!(
            "{} has no classification head: use /v1/embeddings, or /v1/zero-shot for a CLIP or \
             SigLIP checkpoint",
            info.name
        )));
    };
    let read = ImageRequest::read(request, query, state.sources()).await?;
    read.check_fields(&["top_k"])?;
    let top_k = read.top_k()?;
    let rows = run_images(&state, &info, Kind::Classify, read.images).await?;
    let scores = Scores::Logits(config);
    Ok(Json(predictions(&info, &rows, |row| {
        scores.top_k(row, top_k)
    })?))
}

async fn zero_shot(
    State(state): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let info = ready_model(&state)?;
    if !info.text_tower {
        return Err(ApiError::bad_request(format!(
            "{} is not a CLIP or SigLIP checkpoint with both towers: zero-shot labels need one",
            info.name
        )));
    }
    let read = ImageRequest::read(request, query, state.sources()).await?;
    read.check_fields(&["top_k", "labels", "template", "templates"])?;
    let top_k = read.top_k()?;
    let labels = match read.values("labels").as_deref() {
        None => {
            return Err(ApiError::bad_request(
                "no labels: give labels (\"cat,dog\" or a list)",
            ))
        }
        Some([one]) => labels_from_list(one),
        Some(many) => check_label_list(many.to_vec()),
    }
    .map_err(|e| ApiError::bad_request(format!("labels: {e}")))?;
    let templates = read
        .values("template")
        .or_else(|| read.values("templates"))
        .unwrap_or_else(|| vec![DEFAULT_TEMPLATE.to_string()]);
    for template in &templates {
        check_template(template).map_err(|e| ApiError::bad_request(format!("template: {e}")))?;
    }
    let set = Arc::new(LabelSet { labels, templates });
    let rows = run_images(&state, &info, Kind::ZeroShot(Arc::clone(&set)), read.images).await?;
    let scores = Scores::Probabilities(&set.labels);
    Ok(Json(predictions(&info, &rows, |row| {
        scores.top_k(row, top_k)
    })?))
}

/// Each image's top labels, `{"model", "results": [{"index", "predictions": [...]}]}`; an
/// image whose scores are not finite fails the request (500), naming it.
fn predictions(
    info: &ModelInfo,
    rows: &[Vec<f32>],
    top: impl Fn(&[f32]) -> Vec<Prediction>,
) -> Result<Value, ApiError> {
    let mut results = Vec::with_capacity(rows.len());
    for (index, row) in rows.iter().enumerate() {
        check_finite(index, row)?;
        let predictions: Vec<Value> = top(row)
            .into_iter()
            .map(|p| json!({"index": p.index, "label": p.label, "probability": p.probability}))
            .collect();
        results.push(json!({"index": index, "predictions": predictions}));
    }
    Ok(json!({"model": info.name, "results": results}))
}

fn check_finite(index: usize, row: &[f32]) -> Result<(), ApiError> {
    match row.iter().find(|v| !v.is_finite()) {
        Some(bad) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("input {index}: the model gave a non-finite value ({bad})"),
        )),
        None => Ok(()),
    }
}

/// The body of `POST /v1/embeddings`, as OpenAI's API has it.
async fn embeddings(State(state): State<Shared>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let info = ready_model(&state)?;
    let document: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))?;
    let inputs: Vec<String> = match document.get("input") {
        Some(Value::String(one)) => vec![one.clone()],
        Some(Value::Array(many)) if !many.is_empty() => many
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                _ => Err(ApiError::bad_request(format!(
                    "input[{i}] is not a string: give texts or images as data URIs (token ids \
                     are not taken)"
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(Value::Array(_)) => return Err(ApiError::bad_request("input is an empty list")),
        _ => {
            return Err(ApiError::bad_request(
                "input must be a string or a list of strings (texts, or images as data URIs)",
            ))
        }
    };
    let base64_out = match document.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "encoding_format {other:?}: use \"float\" or \"base64\""
            )))
        }
    };
    // Images are data URIs (or file:NAME where --allow-local-files allows it, http(s) URLs
    // where --allow-url-fetch does); everything else is text.
    let mut images = Vec::new();
    let mut texts = Vec::new();
    let mut order = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        let start = input.trim_start();
        let sources = state.sources();
        if start.starts_with("data:")
            || (sources.local.is_some() && start.starts_with("file:"))
            || (sources.urls && crate::fetch::is_url(start))
        {
            let image = image_string(input, sources)
                .map_err(|why| ApiError::bad_request(format!("input {i}: {why}")))?;
            order.push((true, images.len()));
            images.push(image);
        } else {
            order.push((false, texts.len()));
            texts.push(input.clone());
        }
    }
    if !texts.is_empty() && !info.text_tower {
        return Err(ApiError::bad_request(format!(
            "{} has no text tower: give images as data URIs (data:image/jpeg;base64,...)",
            info.name
        )));
    }
    let mut image_rows = Vec::new();
    if !images.is_empty() {
        let Some(pool) = info.pool else {
            return Err(ApiError::bad_request(format!(
                "{} has no vector to embed images as",
                info.name
            )));
        };
        image_rows = run_images(&state, &info, Kind::Embed(pool), images).await?;
        for (i, row) in image_rows.iter_mut().enumerate() {
            check_finite(i, row)?;
            normalize(row);
        }
    }
    let (text_rows, tokens) = if texts.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        run_texts(&state, texts).await?
    };
    let data: Vec<Value> = order
        .iter()
        .enumerate()
        .map(|(index, &(is_image, k))| {
            let row = if is_image {
                &image_rows[k]
            } else {
                &text_rows[k]
            };
            let embedding = if base64_out {
                let bytes: Vec<u8> = row.iter().flat_map(|v| v.to_le_bytes()).collect();
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(row)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    // OpenAI's `dimensions` shortens its own models' vectors; these have the width they have.
    if let Some(asked) = document.get("dimensions").filter(|v| !v.is_null()) {
        let width = image_rows.first().or(text_rows.first()).map_or(0, Vec::len);
        if asked.as_u64() != Some(width as u64) {
            return Err(ApiError::bad_request(format!(
                "dimensions {asked}: {}'s embeddings have {width} values, and are not shortened",
                info.name
            )));
        }
    }
    let prompt_tokens: usize = tokens.iter().sum();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": info.name,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    })))
}

/// Admits `images` to the queue (429 when full), decodes them (400 naming the first that
/// fails, by index, and why), runs them in the batches of `kind`, and returns a row each.
async fn run_images(
    state: &Shared,
    info: &Arc<ModelInfo>,
    kind: Kind,
    images: Vec<ImageInput>,
) -> Result<Vec<Vec<f32>>, ApiError> {
    if images.is_empty() {
        return Err(ApiError::bad_request(
            "no images: send them as multipart files (-F file=@image.jpg), as base64 in JSON \
             ({\"images\": [...]}) or as the raw body",
        ));
    }
    let admission = state.queue.admit(images.len()).map_err(|_| {
        let mut error = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "the queue is full ({} images waiting, --max-queue): try again shortly",
                state.queue.depth()
            ),
        );
        error.retry_after = Some(1);
        error
    })?;
    let decoded = decode_all(state, info, images).await?;
    let (reply, answer) = tokio::sync::oneshot::channel();
    let deadline = Instant::now() + state.options.request_timeout;
    state
        .queue
        .submit(
            Job::Images {
                kind,
                images: decoded,
                deadline,
                reply,
            },
            admission,
        )
        .map_err(|()| stopping())?;
    match answer.await {
        Ok(Ok(rows)) => Ok(rows),
        Ok(Err(failure)) => Err(failure_error(failure, state)),
        Err(_) => Err(stopping()),
    }
}

async fn run_texts(
    state: &Shared,
    texts: Vec<String>,
) -> Result<(Vec<Vec<f32>>, Vec<usize>), ApiError> {
    let admission = state.queue.admit(0).map_err(|_| stopping())?;
    let (reply, answer) = tokio::sync::oneshot::channel();
    state
        .queue
        .submit(Job::Texts { texts, reply }, admission)
        .map_err(|()| stopping())?;
    match answer.await {
        Ok(Ok(rows)) => Ok(rows),
        Ok(Err(failure)) => Err(failure_error(failure, state)),
        Err(_) => Err(stopping()),
    }
}

fn stopping() -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping")
}

fn failure_error(failure: Failure, state: &AppState) -> ApiError {
    match failure {
        Failure::Expired => ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "the request was not run within {} ms (--request-timeout-ms)",
                state.options.request_timeout.as_millis()
            ),
        ),
        Failure::Refused(why) => ApiError::bad_request(why),
        Failure::Failed(why) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, why),
    }
}

thread_local! {
    /// Each decoding thread's decoder, its buffers kept from image to image.
    static DECODER: RefCell<Option<ImageDecoder>> = const { RefCell::new(None) };
}

/// Makes every image ready on the blocking pool, at most `--workers` at once (decoded, or a
/// JPEG read for the device: `ImageDecoder::prepare`; files named `file:NAME` are decoded on
/// the host; for SigLIP 2 NaFlex, resized to its own patch grid by the processor); the first
/// failure in input order is a 400 naming the input's index and the reason.
async fn decode_all(
    state: &Shared,
    info: &Arc<ModelInfo>,
    images: Vec<ImageInput>,
) -> Result<Vec<ReadyImage>, ApiError> {
    let tasks: Vec<_> = images
        .into_iter()
        .enumerate()
        .map(|(index, image)| {
            let state = Arc::clone(state);
            let info = Arc::clone(info);
            tokio::spawn(async move {
                // A URL is fetched first, holding no decoding permit while it waits.
                let image = match image {
                    ImageInput::Url(url) => {
                        let Some(fetcher) = state.fetcher.clone() else {
                            return Err(ApiError::bad_request(format!(
                                "input {index}: URLs are not fetched (--allow-url-fetch)"
                            )));
                        };
                        let fetched = tokio::task::spawn_blocking(move || fetcher.fetch(&url))
                            .await
                            .map_err(|_| {
                                ApiError::new(
                                    StatusCode::INTERNAL_SERVER_ERROR,
                                    format!(
                                        "input {index}: fetching failed inside (a bug, please \
                                         report it)"
                                    ),
                                )
                            })?;
                        let bytes = fetched.map_err(|why| {
                            ApiError::bad_request(format!("input {index}: {why}"))
                        })?;
                        ImageInput::Bytes(Bytes::from(bytes))
                    }
                    other => other,
                };
                let _permit = state.decoders.acquire().await.map_err(|_| stopping())?;
                let limits = state.options.limits;
                tokio::task::spawn_blocking(move || {
                    let ready = match &info.images {
                        ImagePreparation::Naflex(processor) => {
                            naflex_image(processor, image, index, &limits).map(ReadyImage::Naflex)
                        }
                        ImagePreparation::Fixed { .. } => {
                            decode_image(&info, image, index, limits).map(ReadyImage::Fixed)
                        }
                    };
                    ready.map_err(ApiError::bad_request)
                })
                .await
                .map_err(|_| {
                    ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("input {index}: decoding failed inside (a bug, please report it)"),
                    )
                })?
            })
        })
        .collect();
    let mut decoded = Vec::with_capacity(tasks.len());
    let mut first_error = None;
    for task in tasks {
        match task.await {
            Ok(Ok(pixels)) => decoded.push(pixels),
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(_) => {
                first_error.get_or_insert(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "decoding failed inside (a bug, please report it)",
                ));
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(decoded),
    }
}

/// A fixed-resolution model's image decoded (or read for the device) by this thread's
/// decoder; an error names the input.
fn decode_image(
    info: &ModelInfo,
    image: ImageInput,
    index: usize,
    limits: ImageLimits,
) -> Result<PreparedImage, String> {
    DECODER.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = Some(info.decoder(limits).map_err(|e| format!("{e:#}"))?);
        }
        let decoder = cell.as_mut().expect("set above");
        // The decoder's messages name the image: "input N" for bytes, the path for a file
        // (then prefixed with its index).
        match image {
            ImageInput::Bytes(bytes) => decoder
                .prepare(Vec::from(bytes), &format!("input {index}"))
                .map_err(|e| e.to_string()),
            ImageInput::File(path) => decoder
                .decode_file(&path)
                .map(PreparedImage::Pixels)
                .map_err(|e| format!("input {index}: {e}")),
            ImageInput::Url(_) => Err(format!("input {index}: a URL not fetched (a bug)")),
        }
    })
}

/// A SigLIP 2 NaFlex image resized to its own patch grid by `processor`, within `limits` as
/// a fixed model's decoder reads one (files no larger than `max_file_bytes`); an error names
/// the input.
fn naflex_image(
    processor: &NaflexProcessor,
    image: ImageInput,
    index: usize,
    limits: &ImageLimits,
) -> Result<NaflexImage, String> {
    match image {
        ImageInput::Bytes(bytes) => {
            let name = format!("input {index}");
            if bytes.len() as u64 > limits.max_file_bytes {
                let refused = PreprocessError::UnsupportedImage {
                    image: name,
                    reason: format!(
                        "the image is {} bytes, more than the limit of {}",
                        bytes.len(),
                        limits.max_file_bytes
                    ),
                };
                return Err(refused.to_string());
            }
            processor
                .preprocess_bytes(&bytes, &name, limits)
                .map_err(|e| e.to_string())
        }
        ImageInput::File(path) => processor
            .preprocess_file(&path, limits)
            .map_err(|e| format!("input {index}: {e}")),
        ImageInput::Url(_) => Err(format!("input {index}: a URL not fetched (a bug)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::ServeOptions;
    use axum::body::Body;
    use std::sync::atomic::AtomicBool;
    use std::sync::OnceLock;
    use std::time::Duration;
    use tokio::sync::Semaphore;
    use tower::ServiceExt;

    fn state(api_key: Option<&str>) -> Shared {
        let (queue, _receiver, _) = crate::batcher::queue(8);
        Arc::new(AppState {
            options: ServeOptions {
                model: vitrt_engine::ModelOptions::new("test"),
                host: "127.0.0.1".to_string(),
                port: 0,
                max_batch_size: 4,
                max_delay: Duration::from_millis(1),
                max_queue: 8,
                max_body_bytes: 1 << 20,
                api_key: api_key.map(str::to_string),
                request_timeout: Duration::from_millis(200),
                limits: Default::default(),
                workers: Some(1),
                allow_local_files: None,
                decode: None,
                allow_url_fetch: None,
            },
            queue,
            metrics: Arc::new(Metrics::new(4)),
            info: OnceLock::new(),
            ready: Arc::new(AtomicBool::new(false)),
            decoders: Semaphore::new(1),
            local: None,
            fetcher: None,
        })
    }

    /// The real routes, and three more behind the same guard: one that panics, one slower
    /// than the deadline, one that answers.
    fn app(state: &Shared) -> Router {
        let routes = Router::new()
            .route("/health", get(health))
            .route("/v1/classify", post(classify))
            .route("/v1/models", get(models))
            .route(
                "/panics",
                get(|| async {
                    if std::hint::black_box(true) {
                        panic!("a bug in a request");
                    }
                    "unreachable"
                }),
            )
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }),
            )
            .route("/fine", get(|| async { "fine" }));
        guarded(routes, Arc::clone(state))
    }

    async fn status(app: &Router, method: &str, path: &str, key: Option<&str>) -> u16 {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(key) = key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        let response = app
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        response.status().as_u16()
    }

    #[tokio::test]
    async fn a_panic_is_a_500_for_its_request_only_and_a_slow_one_a_504() {
        let state = state(None);
        let app = app(&state);
        assert_eq!(status(&app, "GET", "/panics", None).await, 500);
        assert_eq!(status(&app, "GET", "/fine", None).await, 200);
        assert_eq!(status(&app, "GET", "/slow", None).await, 504);
        assert_eq!(status(&app, "GET", "/fine", None).await, 200);
        let text = state.metrics.render(0);
        assert!(
            text.contains("vitrt_requests_total{route=\"other\",status=\"500\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("vitrt_requests_total{route=\"other\",status=\"504\"} 1"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn health_and_requests_are_503_until_the_model_is_ready() {
        let state = state(None);
        let app = app(&state);
        assert_eq!(status(&app, "GET", "/health", None).await, 503);
        assert_eq!(status(&app, "POST", "/v1/classify", None).await, 503);
        state.ready.store(true, Ordering::Release);
        assert_eq!(status(&app, "GET", "/health", None).await, 200);
    }

    #[tokio::test]
    async fn the_api_key_is_required_everywhere_but_health() {
        let state = state(Some("secret"));
        let app = app(&state);
        assert_eq!(status(&app, "GET", "/v1/models", None).await, 401);
        assert_eq!(status(&app, "GET", "/v1/models", Some("secreT")).await, 401);
        assert_eq!(
            status(&app, "GET", "/v1/models", Some("secret2")).await,
            401
        );
        assert_eq!(status(&app, "GET", "/v1/models", Some("secret")).await, 200);
        assert_eq!(status(&app, "GET", "/health", None).await, 503);
    }

    #[test]
    fn the_queue_admits_up_to_its_bound_and_takes_back_what_is_dropped() {
        let state = state(None);
        let five = state.queue.admit(5).unwrap();
        assert!(state.queue.admit(4).is_err());
        let three = state.queue.admit(3).unwrap();
        assert_eq!(state.queue.depth(), 8);
        drop(five);
        assert_eq!(state.queue.depth(), 3);
        drop(three);
        assert_eq!(state.queue.depth(), 0);
    }
}
