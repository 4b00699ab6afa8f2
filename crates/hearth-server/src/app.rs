//! The HTTP application: routes of both APIs, health and metrics, API-key check, request
//! counting, and the server's start-up and shut-down.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::models::{LoadOptions, ModelManager, ModelSpec};

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub models: Arc<ModelManager>,
    pub metrics: Arc<Metrics>,
    /// False until the models named at start-up are loaded.
    pub ready: Arc<AtomicBool>,
    pub started: SystemTime,
}

/// Everything `hearth serve` was asked for.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub addr: SocketAddr,
    /// Bearer token clients must send; required when binding beyond loopback.
    pub api_key: Option<String>,
    pub models: Vec<ModelSpec>,
    pub load: LoadOptions,
    /// Load every model at start (otherwise on first use).
    pub preload: bool,
}

/// The application's routes over `state`.
pub fn router(state: AppState, api_key: Option<String>) -> Router {
    let api_key = api_key.map(Arc::new);
    Router::new()
        .merge(crate::openai::routes())
        .merge(crate::ollama::routes())
        .route("/metrics", get(metrics))
        .fallback(no_route)
        .layer(middleware::from_fn_with_state(api_key, require_api_key))
        // NOTE: health stays reachable without the key, for load balancers and probes.
        .route("/health", get(health))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .with_state(state)
}

async fn health(State(state): State<AppState>) -> Response {
    if state.ready.load(Ordering::Acquire) {
        (StatusCode::OK, Json(serde_json::json!({"status": "ok"}))).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "loading model"})),
        )
            .into_response()
    }
}

/// 404 for paths no route serves, in the shape of the API the path belongs to.
async fn no_route(req: Request) -> Response {
    let err = ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no route for {} {}", req.method(), req.uri().path()),
    );
    if req.uri().path().starts_with("/api/") {
        err.into_ollama()
    } else {
        err.into_openai()
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

/// Counts every answered request by route and status.
async fn count_requests(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let endpoint = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let response = next.run(req).await;
    state
        .metrics
        .count_request(&endpoint, response.status().as_u16());
    response
}

/// With an API key set, every route but `/health` and `/` needs `Authorization: Bearer <key>`.
async fn require_api_key(
    State(key): State<Option<Arc<String>>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(key) = key else {
        return next.run(req).await;
    };
    if req.uri().path() == "/" {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if bool::from(given.as_bytes().ct_eq(key.as_bytes())) {
        return next.run(req).await;
    }
    let err = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "missing or wrong API key: send the header 'Authorization: Bearer <key>'",
    );
    if req.uri().path().starts_with("/api/") {
        err.into_ollama()
    } else {
        err.into_openai()
    }
}

/// Runs the server until Ctrl-C / SIGTERM.
pub async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    if !config.addr.ip().is_loopback() && config.api_key.is_none() {
        anyhow::bail!(
            "binding to {} exposes the server beyond this machine: set --api-key (clients send it as a Bearer token)",
            config.addr
        );
    }
    if config.models.is_empty() {
        anyhow::bail!(
            "no model to serve: pass --model path.gguf or a Hugging Face folder (or name=path)"
        );
    }
    for m in &config.models {
        if !m.path.exists() {
            anyhow::bail!("--model {}: no such file: {}", m.name, m.path.display());
        }
    }
    let metrics = Arc::new(Metrics::default());
    let models = ModelManager::new(config.models.clone(), config.load.clone(), metrics.clone())
        .map_err(anyhow::Error::msg)?;
    let state = AppState {
        models: Arc::new(models),
        metrics,
        ready: Arc::new(AtomicBool::new(!config.preload)),
        started: SystemTime::now(),
    };
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.addr))?;
    let local = listener.local_addr().unwrap_or(config.addr);
    // NOTE: a plain line, so scripts (and the tests) can find the port `--port 0` chose.
    tracing::info!("listening on http://{local}");
    if config.preload {
        let state = state.clone();
        tokio::spawn(async move {
            match state.models.load_all().await {
                Ok(()) => state.ready.store(true, Ordering::Release),
                Err(e) => tracing::error!(error = %e.message, "loading the models failed"),
            }
        });
    }
    let reaper = state.models.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            reaper.unload_expired().await;
        }
    });
    let app = router(state, config.api_key.clone());
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}
