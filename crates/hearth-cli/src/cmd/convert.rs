//! `hearth convert`: a Hugging Face model folder to a GGUF file (F32, F16, BF16 or Q8_0) with
//! llama.cpp's tensor names and metadata, streamed tensor by tensor.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use hearth_models::hf::convert::convert_folder;
use hearth_quant::GgmlType;

#[derive(Args)]
pub struct ConvertArgs {
    /// Hugging Face model folder (config.json, *.safetensors, tokenizer.json)
    input: PathBuf,
    /// Output GGUF file
    #[arg(short, long)]
    output: PathBuf,
    /// Type of the matrices: f32, f16, bf16 or q8_0 (vectors stay f32)
    #[arg(long = "type", default_value = "f16")]
    ty: String,
    /// Worker threads (default: one per core)
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

pub fn run(a: ConvertArgs) -> anyhow::Result<()> {
    let ty = match a.ty.to_ascii_lowercase().as_str() {
        "f32" => GgmlType::F32,
        "f16" => GgmlType::F16,
        "bf16" => GgmlType::BF16,
        "q8_0" => GgmlType::Q8_0,
        other => bail!("--type {other}: expected one of f32, f16, bf16, q8_0"),
    };
    if !a.input.join("config.json").is_file() {
        bail!(
            "{}: not a Hugging Face model folder (config.json is missing)",
            a.input.display()
        );
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(a.threads)
        .build()
        .context("cannot start worker threads")?;
    let start = Instant::now();
    let result = pool.install(|| convert_folder(&a.input, &a.output, ty));
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&a.output);
            return Err(e).with_context(|| format!("converting {}", a.input.display()));
        }
    };
    println!(
        "wrote {} ({} {}, {} tensors, {:.1} MiB) in {:.2} s",
        a.output.display(),
        summary.arch,
        ty,
        summary.n_tensors,
        summary.n_bytes as f64 / (1024.0 * 1024.0),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
