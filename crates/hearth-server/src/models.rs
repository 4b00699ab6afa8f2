//! The models a server offers: their names and files, which are loaded, and unloading them
//! after their keep-alive.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use hearth_engine::embed::{is_embedding_model, EmbeddingModel};
use hearth_engine::{Engine, EngineOptions};
use tokio::sync::Mutex;

use crate::embedding::EmbeddingHandle;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::runner::{RunnerConfig, RunnerHandle};

/// A model the server can serve: `name` is what requests put in `model`.
#[derive(Clone, Debug)]
pub struct ModelSpec {
    pub name: String,
    pub path: PathBuf,
}

impl ModelSpec {
    /// Parses `--model` values: `path` (name = file stem) or `name=path`.
    pub fn parse(arg: &str) -> Result<Self, String> {
        let (name, path) = match arg.split_once('=') {
            Some((name, path)) if !name.is_empty() => (name.to_string(), PathBuf::from(path)),
            _ => {
                let path = PathBuf::from(arg);
                let stem = path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .ok_or_else(|| {
                        format!(
                            "--model {arg}: cannot take a model name from this path; use name=path"
                        )
                    })?
                    .to_string();
                (stem, path)
            }
        };
        if name.contains(char::is_whitespace) {
            return Err(format!(
                "--model {arg}: the model name must not contain spaces"
            ));
        }
        Ok(Self { name, path })
    }
}

/// How long a model stays loaded after its last request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepAlive {
    For(Duration),
    Forever,
}

impl KeepAlive {
    /// Parses a keep-alive as Ollama takes it: a duration string in Go's syntax (`"5m"`,
    /// `"1h30m"`, `"90s"`, `"250ms"`), or a bare number of seconds. Negative = forever.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if let Ok(secs) = t.parse::<f64>() {
            return Self::from_seconds(secs);
        }
        let (negative, mut rest) = match t.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, t),
        };
        let bad = || {
            format!(
                "keep_alive '{text}' is not a duration (e.g. \"5m\", \"1h30m\", \"90s\", 0, -1)"
            )
        };
        if rest.is_empty() {
            return Err(bad());
        }
        let mut total = 0.0f64;
        while !rest.is_empty() {
            let n_end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .ok_or_else(bad)?;
            let value: f64 = rest[..n_end].parse().map_err(|_| bad())?;
            rest = &rest[n_end..];
            let u_end = rest
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(rest.len());
            let unit = match &rest[..u_end] {
                "h" => 3600.0,
                "m" => 60.0,
                "s" => 1.0,
                "ms" => 1e-3,
                "us" | "µs" => 1e-6,
                "ns" => 1e-9,
                _ => return Err(bad()),
            };
            total += value * unit;
            rest = &rest[u_end..];
        }
        Self::from_seconds(if negative { -total } else { total })
    }

    /// A keep-alive of `secs` seconds; negative = forever.
    pub fn from_seconds(secs: f64) -> Result<Self, String> {
        if secs.is_nan() {
            return Err("keep_alive is not a number".into());
        }
        if secs < 0.0 {
            return Ok(KeepAlive::Forever);
        }
        Duration::try_from_secs_f64(secs)
            .map(KeepAlive::For)
            .map_err(|_| format!("keep_alive {secs} s is too long"))
    }
}

/// Facts about a served model for listings (`/v1/models`, `/api/tags`, `/api/ps`).
#[derive(Clone, Debug)]
pub struct ModelListing {
    pub name: String,
    pub path: PathBuf,
    /// File size in bytes.
    pub size: u64,
    pub modified: SystemTime,
    /// When it is loaded: when it will unload (`None` = never).
    pub loaded: Option<Option<Instant>>,
    /// When it is loaded: its context size in tokens.
    pub context_length: Option<usize>,
}

struct Slot {
    spec: ModelSpec,
    state: Mutex<Option<Loaded>>,
}

/// A loaded model: a generative one with its runner, or an embedding model.
#[derive(Clone)]
enum Served {
    Generate(Arc<RunnerHandle>),
    Embed(Arc<EmbeddingHandle>),
}

impl Served {
    /// Whether a request handler holds it (a request is in flight).
    fn in_use(&self) -> bool {
        match self {
            Served::Generate(h) => Arc::strong_count(h) > 1,
            Served::Embed(h) => Arc::strong_count(h) > 1,
        }
    }

    fn context_length(&self) -> usize {
        match self {
            Served::Generate(h) => h.info().n_ctx,
            Served::Embed(h) => h.info().max_tokens,
        }
    }
}

struct Loaded {
    handle: Served,
    keep_alive: KeepAlive,
    last_used: Instant,
}

impl Loaded {
    fn expires(&self) -> Option<Instant> {
        match self.keep_alive {
            KeepAlive::For(d) => Some(self.last_used + d),
            KeepAlive::Forever => None,
        }
    }
}

/// Options every model is loaded with.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub engine: EngineOptions,
    pub runner: RunnerConfig,
    pub default_keep_alive: KeepAlive,
}

/// The server's models, loaded on first use (or at start) and unloaded when idle.
pub struct ModelManager {
    slots: Vec<Slot>,
    options: LoadOptions,
    metrics: Arc<Metrics>,
}

impl ModelManager {
    /// Fails when two models share a name.
    pub fn new(
        specs: Vec<ModelSpec>,
        options: LoadOptions,
        metrics: Arc<Metrics>,
    ) -> Result<Self, String> {
        let mut seen = HashMap::new();
        for s in &specs {
            if let Some(other) = seen.insert(s.name.clone(), s.path.clone()) {
                return Err(format!(
                    "two models are named '{}' ({} and {}); name them with --model name=path",
                    s.name,
                    other.display(),
                    s.path.display()
                ));
            }
        }
        let slots = specs
            .into_iter()
            .map(|spec| Slot {
                spec,
                state: Mutex::new(None),
            })
            .collect();
        Ok(Self {
            slots,
            options,
            metrics,
        })
    }

    pub fn default_keep_alive(&self) -> KeepAlive {
        self.options.default_keep_alive
    }

    /// The model a request's `model` field names: its exact name, or Ollama style
    /// `name:latest`. A server with one model also answers to an empty name.
    fn slot(&self, requested: &str) -> Option<&Slot> {
        let name = requested.strip_suffix(":latest").unwrap_or(requested);
        if name.is_empty() && self.slots.len() == 1 {
            return self.slots.first();
        }
        self.slots
            .iter()
            .find(|s| s.spec.name == name || s.spec.name == requested)
    }

    /// The canonical name for `requested`, when such a model exists.
    pub fn resolve(&self, requested: &str) -> Option<&ModelSpec> {
        self.slot(requested).map(|s| &s.spec)
    }

    /// The runner for `requested`, loading the model first if needed. `keep_alive` (when
    /// given) replaces the model's keep-alive from now on. An embedding model is a 400 that
    /// says so (Ollama's words: `"name" does not support generate`).
    pub async fn get(
        &self,
        requested: &str,
        keep_alive: Option<KeepAlive>,
    ) -> Result<Arc<RunnerHandle>, ApiError> {
        match self.get_served(requested, keep_alive).await? {
            Served::Generate(h) => Ok(h),
            Served::Embed(_) => Err(ApiError::bad_field(
                "model",
                format!("\"{requested}\" does not support generate: it is an embedding model (use /v1/embeddings or /api/embed)"),
            )),
        }
    }

    /// The embedding model `requested`, loading it first if needed. A generative model is a
    /// 400 (as Ollama answers: `"name" does not support embeddings`): hearth does not pool a
    /// chat model's hidden states into vectors it was not trained to give.
    pub async fn get_embedder(
        &self,
        requested: &str,
        keep_alive: Option<KeepAlive>,
    ) -> Result<Arc<EmbeddingHandle>, ApiError> {
        match self.get_served(requested, keep_alive).await? {
            Served::Embed(h) => Ok(h),
            Served::Generate(_) => Err(ApiError::bad_field(
                "model",
                format!("\"{requested}\" does not support embeddings: it is a generative model"),
            )),
        }
    }

    async fn get_served(
        &self,
        requested: &str,
        keep_alive: Option<KeepAlive>,
    ) -> Result<Served, ApiError> {
        let slot = self
            .slot(requested)
            .ok_or_else(|| ApiError::model_not_found(requested))?;
        let mut state = slot.state.lock().await;
        if state.is_none() {
            let handle = self.load(&slot.spec).await?;
            *state = Some(Loaded {
                handle,
                keep_alive: self.options.default_keep_alive,
                last_used: Instant::now(),
            });
        }
        let loaded = state
            .as_mut()
            .ok_or_else(|| ApiError::internal("model state lost"))?;
        if let Some(k) = keep_alive {
            loaded.keep_alive = k;
        }
        loaded.last_used = Instant::now();
        Ok(loaded.handle.clone())
    }

    /// Whether `requested` is loaded now (without loading it).
    pub async fn is_loaded(&self, requested: &str) -> bool {
        match self.slot(requested) {
            Some(slot) => slot.state.lock().await.is_some(),
            None => false,
        }
    }

    async fn load(&self, spec: &ModelSpec) -> Result<Served, ApiError> {
        if is_embedding_model(&spec.path) {
            return self.load_embedding(spec).await;
        }
        let spec = spec.clone();
        let options = self.options.clone();
        let metrics = self.metrics.clone();
        tracing::info!(model = %spec.name, path = %spec.path.display(), "loading model");
        let result = tokio::task::spawn_blocking(move || {
            let engine = Engine::load(&spec.path, &options.engine).map_err(|e| e.to_string())?;
            let info = engine.info().clone();
            if let Some(note) = &info.device_note {
                tracing::warn!(model = %spec.name, "{note}");
            }
            let handle = RunnerHandle::spawn(&spec.name, engine, options.runner, metrics)
                .map_err(|e| format!("cannot start the runner thread: {e}"))?;
            tracing::info!(
                model = %spec.name,
                arch = %info.arch,
                backend = %info.backend,
                n_ctx = info.n_ctx,
                kv_tokens = info.n_kv_tokens,
                load_ms = info.load_time.as_millis() as u64,
                "model loaded"
            );
            Ok::<_, String>(handle)
        })
        .await
        .map_err(|e| ApiError::internal(format!("loading the model panicked: {e}")))?;
        result
            .map(|h| Served::Generate(Arc::new(h)))
            .map_err(|e| ApiError::internal(format!("cannot load the model: {e}")))
    }

    async fn load_embedding(&self, spec: &ModelSpec) -> Result<Served, ApiError> {
        let spec = spec.clone();
        let n_threads = self.options.engine.n_threads;
        tracing::info!(model = %spec.name, path = %spec.path.display(), "loading embedding model");
        let result = tokio::task::spawn_blocking(move || {
            let model = EmbeddingModel::load(&spec.path, n_threads).map_err(|e| e.to_string())?;
            let info = model.info().clone();
            let handle = EmbeddingHandle::spawn(&spec.name, model)
                .map_err(|e| format!("cannot start the embedding thread: {e}"))?;
            tracing::info!(
                model = %spec.name,
                arch = %info.arch,
                backend = %info.backend,
                n_embd = info.n_embd,
                load_ms = info.load_time.as_millis() as u64,
                "embedding model loaded"
            );
            Ok::<_, String>(handle)
        })
        .await
        .map_err(|e| ApiError::internal(format!("loading the model panicked: {e}")))?;
        result
            .map(|h| Served::Embed(Arc::new(h)))
            .map_err(|e| ApiError::internal(format!("cannot load the model: {e}")))
    }

    /// Unloads `requested` now (its runner finishes the requests it has). Returns whether it
    /// was loaded.
    pub async fn unload(&self, requested: &str) -> bool {
        let Some(slot) = self.slot(requested) else {
            return false;
        };
        let was = slot.state.lock().await.take().is_some();
        if was {
            tracing::info!(model = %slot.spec.name, "model unloaded");
        }
        was
    }

    /// Unloads models whose keep-alive has passed. A model with requests in flight counts as
    /// in use until they finish.
    pub async fn unload_expired(&self) {
        let now = Instant::now();
        for slot in &self.slots {
            let mut state = slot.state.lock().await;
            let Some(loaded) = state.as_mut() else {
                continue;
            };
            // NOTE: handlers hold a clone of the handle while their request runs.
            if loaded.handle.in_use() {
                loaded.last_used = now;
                continue;
            }
            if loaded.expires().is_some_and(|t| t <= now) {
                *state = None;
                tracing::info!(model = %slot.spec.name, "model unloaded after its keep-alive");
            }
        }
    }

    /// Every served model, loaded or not.
    pub async fn list(&self) -> Vec<ModelListing> {
        let mut out = Vec::with_capacity(self.slots.len());
        for slot in &self.slots {
            let meta = std::fs::metadata(&slot.spec.path).ok();
            let state = slot.state.lock().await;
            let loaded = state.as_ref().map(Loaded::expires);
            let context_length = state.as_ref().map(|l| l.handle.context_length());
            drop(state);
            out.push(ModelListing {
                name: slot.spec.name.clone(),
                path: slot.spec.path.clone(),
                size: meta.as_ref().map_or(0, |m| m.len()),
                modified: meta
                    .and_then(|m| m.modified().ok())
                    .unwrap_or(SystemTime::UNIX_EPOCH),
                loaded,
                context_length,
            });
        }
        out
    }

    /// Loads every model now (for `--preload`/start-up).
    pub async fn load_all(&self) -> Result<(), ApiError> {
        for slot in &self.slots {
            self.get_served(&slot.spec.name, None).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_args_take_a_name_or_the_file_stem() {
        let s = ModelSpec::parse("/models/SmolLM2-135M.Q4_1.gguf").unwrap();
        assert_eq!(s.name, "SmolLM2-135M.Q4_1");
        let s = ModelSpec::parse("smol=/models/a.gguf").unwrap();
        assert_eq!(
            (s.name.as_str(), s.path.to_str().unwrap()),
            ("smol", "/models/a.gguf")
        );
        assert!(ModelSpec::parse("my model=/a.gguf").is_err());
    }

    #[test]
    fn keep_alive_reads_go_durations_and_seconds() {
        let f = |s: &str| KeepAlive::parse(s);
        assert_eq!(f("5m"), Ok(KeepAlive::For(Duration::from_secs(300))));
        assert_eq!(f("1h30m"), Ok(KeepAlive::For(Duration::from_secs(5400))));
        assert_eq!(f("250ms"), Ok(KeepAlive::For(Duration::from_millis(250))));
        assert_eq!(f("0"), Ok(KeepAlive::For(Duration::ZERO)));
        assert_eq!(f("-1"), Ok(KeepAlive::Forever));
        assert_eq!(f("-1m"), Ok(KeepAlive::Forever));
        assert_eq!(f("30"), Ok(KeepAlive::For(Duration::from_secs(30))));
        for bad in ["", "5 minutes", "m", "5x", "--1"] {
            assert!(f(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn duplicate_names_are_refused() {
        let specs = vec![
            ModelSpec::parse("/a/m.gguf").unwrap(),
            ModelSpec::parse("/b/m.gguf").unwrap(),
        ];
        let opts = LoadOptions {
            engine: EngineOptions::default(),
            runner: RunnerConfig {
                max_batch_tokens: 512,
                max_seqs: 8,
                chain_greedy: None,
            },
            default_keep_alive: KeepAlive::Forever,
        };
        let err = ModelManager::new(specs, opts, Arc::default())
            .err()
            .unwrap();
        assert!(err.contains("two models are named 'm'"), "{err}");
    }
}
