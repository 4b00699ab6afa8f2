use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use hearth_gguf::GgufFile;

#[derive(Args)]
pub struct ShowArgs {
    /// GGUF model file, or a Hugging Face folder (config.json, safetensors, tokenizer.json)
    model: PathBuf,
    /// Context size to estimate the KV cache for (default: the model's, at most 4096)
    #[arg(short = 'c', long = "ctx-size", default_value_t = 0)]
    ctx_size: usize,
    /// Also print every metadata key
    #[arg(long)]
    metadata: bool,
    /// Print the chat template in full
    #[arg(long)]
    template: bool,
}

const MIB: f64 = 1024.0 * 1024.0;

pub fn run(a: ShowArgs) -> anyhow::Result<()> {
    if a.model.is_dir() {
        return show_folder(&a);
    }
    let file = GgufFile::open(&a.model).with_context(|| a.model.display().to_string())?;
    let meta = file.metadata();
    let config =
        hearth_models::registry::config(&file).with_context(|| a.model.display().to_string())?;
    let n_params: u64 = file.tensors().iter().map(|t| t.n_elements()).sum();
    let weight_bytes: u64 = file.tensors().iter().map(|t| t.n_bytes).sum();
    let n_ctx = match a.ctx_size {
        0 => config.n_ctx_train.min(4096),
        n => n,
    };
    let kv_bytes = 2 * 2 * (config.n_layers * n_ctx * config.kv_dim()) as u64;
    if let Some(name) = meta.get_str("general.name")? {
        println!("  name              {name}");
    }
    println!("  architecture      {}", config.arch);
    println!("  parameters        {}", human_count(n_params));
    println!("  layers            {}", config.n_layers);
    println!("  embedding         {}", config.n_embd);
    println!(
        "  heads             {} query, {} key/value, head size {}",
        config.n_heads, config.n_kv_heads, config.head_dim
    );
    println!("  feed-forward      {}", config.n_ff);
    if let Some(m) = &config.moe {
        println!(
            "  experts           {} per layer, {} per token, {} wide",
            m.n_expert, m.n_expert_used, m.n_ff_expert
        );
    }
    println!("  vocabulary        {}", config.n_vocab);
    println!("  context length    {} (trained)", config.n_ctx_train);
    if let Some(w) = config.sliding_window {
        let n_sliding = config
            .layer_kinds
            .iter()
            .filter(|k| **k == hearth_models::LayerKind::Sliding)
            .count();
        println!(
            "  sliding window    {w} tokens on {n_sliding} of {} layers",
            config.n_layers
        );
    }
    println!("  quantization      {}", quant_mix(&file));
    match meta.get_str("tokenizer.chat_template")? {
        Some(t) if a.template => println!("  chat template\n{t}"),
        Some(t) => println!(
            "  chat template     yes ({} bytes; --template prints it)",
            t.len()
        ),
        None => println!("  chat template     none (use --template chatml|llama3|gemma|mistral)"),
    }
    println!(
        "  memory            {:.1} MiB weights + {:.1} MiB KV cache (f16) at {n_ctx} tokens = {:.1} MiB",
        weight_bytes as f64 / MIB,
        kv_bytes as f64 / MIB,
        (weight_bytes + kv_bytes) as f64 / MIB
    );
    if a.metadata {
        println!("  metadata");
        for (k, v) in meta.iter() {
            println!("    {k} = {v}");
        }
    }
    Ok(())
}

/// "Q4_K 52% (27 tensors), Q6_K 21% ..." by bytes.
fn quant_mix(file: &GgufFile) -> String {
    let mut by_type: BTreeMap<&str, (u64, usize)> = BTreeMap::new();
    for t in file.tensors() {
        let e = by_type.entry(t.ty.name()).or_default();
        e.0 += t.n_bytes;
        e.1 += 1;
    }
    let total: u64 = by_type.values().map(|v| v.0).sum::<u64>().max(1);
    let mut rows: Vec<_> = by_type.into_iter().collect();
    rows.sort_by_key(|(_, (bytes, _))| std::cmp::Reverse(*bytes));
    rows.iter()
        .map(|(ty, (bytes, n))| {
            format!(
                "{ty} {:.0}% ({n} tensors)",
                100.0 * *bytes as f64 / total as f64
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn human_count(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2} B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1} M", n as f64 / 1e6),
        n => format!("{n}"),
    }
}

/// A Hugging Face folder: what loading it reports (weights are mapped, not read).
fn show_folder(a: &ShowArgs) -> anyhow::Result<()> {
    if a.metadata || a.template {
        anyhow::bail!("--metadata and --template read GGUF metadata; a folder has none (see its config.json and tokenizer_config.json)");
    }
    let opts = hearth_engine::EngineOptions {
        n_ctx: a.ctx_size,
        n_threads: 1,
        device: hearth_engine::Device::Cpu,
        ..hearth_engine::EngineOptions::default()
    };
    let engine = hearth_engine::Engine::load(&a.model, &opts)?;
    let info = engine.info();
    println!("  architecture      {}", info.arch);
    println!("  parameters        {}", human_count(info.n_params));
    println!(
        "  weights           {:.1} MiB",
        info.weight_bytes as f64 / MIB
    );
    println!("  vocabulary        {}", engine.n_vocab());
    println!("  context length    {} (trained)", info.n_ctx_train);
    println!(
        "  KV cache          {:.1} MiB at {} tokens (f16)",
        info.kv_bytes as f64 / MIB,
        info.n_ctx
    );
    Ok(())
}
