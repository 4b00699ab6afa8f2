use std::net::{IpAddr, SocketAddr};

use anyhow::Context;
use clap::Args;
use hearth_engine::{Device, EngineOptions, KvType};
use hearth_server::models::{KeepAlive, LoadOptions, ModelSpec};
use hearth_server::runner::RunnerConfig;
use hearth_server::ServeConfig;

#[derive(Args)]
pub struct ServeArgs {
    /// GGUF model files or Hugging Face folders to serve (same as --model)
    pub models: Vec<String>,
    /// A model to serve: a GGUF file or Hugging Face folder (named after the file stem or folder
    /// name), or name=path; repeat for more
    #[arg(short = 'm', long = "model")]
    pub model: Vec<String>,
    /// Address to listen on; anything but loopback requires --api-key
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port to listen on (Ollama's, so Ollama clients find it without settings)
    #[arg(long, default_value_t = 11434)]
    pub port: u16,
    /// Require `Authorization: Bearer <key>` on every request (also read from HEARTH_API_KEY)
    #[arg(long, env = "HEARTH_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Longest sequence (prompt + generated) in tokens (default: the model's, at most 4096)
    #[arg(short = 'c', long = "ctx-size", default_value_t = 0)]
    pub ctx_size: usize,
    /// KV cache size in tokens, shared by all requests (default: 4 × the context size)
    #[arg(long = "kv-tokens", default_value_t = 0)]
    pub kv_tokens: usize,
    /// Most tokens one engine step runs, over all requests (bounds prefill chunks)
    #[arg(long = "max-batch-tokens", default_value_t = 512)]
    pub max_batch_tokens: usize,
    /// Most requests running at once; the rest wait in line
    #[arg(long = "max-seqs", default_value_t = 32)]
    pub max_seqs: usize,
    /// CPU threads (default: all cores)
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
    /// Where models run: auto (a CUDA GPU when one is usable, else the CPU), cpu, cuda, cuda:N
    #[arg(long, default_value = "auto")]
    pub device: Device,
    /// How the KV cache stores keys and values: f16, or f32 (twice the memory, no rounding in
    /// attention; CPU only)
    #[arg(long = "kv-type", default_value = "f16")]
    pub kv_type: KvType,
    /// Use a built-in chat template instead of the model's: chatml, llama3, gemma, mistral
    #[arg(long)]
    pub template: Option<String>,
    /// How long a model stays loaded after its last request: "5m", "1h", seconds, or -1 for
    /// ever; requests may set their own (Ollama's keep_alive)
    #[arg(long = "keep-alive", default_value = "-1", allow_hyphen_values = true)]
    pub keep_alive: String,
    /// Load models on their first request instead of at start
    #[arg(long)]
    pub lazy: bool,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    super::init_logging("info");
    let models = args
        .models
        .iter()
        .chain(&args.model)
        .map(|m| ModelSpec::parse(m).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let keep_alive =
        KeepAlive::parse(&args.keep_alive).map_err(|e| anyhow::anyhow!("--keep-alive: {e}"))?;
    if args.max_batch_tokens == 0 || args.max_seqs == 0 {
        anyhow::bail!("--max-batch-tokens and --max-seqs must be at least 1");
    }
    let n_kv_tokens = match (args.kv_tokens, args.ctx_size) {
        (0, 0) => 4 * 4096,
        (0, c) => 4 * c,
        (k, _) => k,
    };
    let config = ServeConfig {
        addr: SocketAddr::new(args.host, args.port),
        api_key: args.api_key.filter(|k| !k.is_empty()),
        models,
        load: LoadOptions {
            engine: EngineOptions {
                n_ctx: args.ctx_size,
                n_kv_tokens,
                n_threads: args.threads,
                n_batch: args.max_batch_tokens,
                template: args.template,
                device: args.device,
                kv_type: args.kv_type,
            },
            runner: RunnerConfig {
                max_batch_tokens: args.max_batch_tokens,
                max_seqs: args.max_seqs,
                chain_greedy: None,
            },
            default_keep_alive: keep_alive,
        },
        preload: !args.lazy,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .thread_name("http")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(hearth_server::serve(config))
}
