//! `hearth embed <model> <text>...`: one JSON array of floats per text, one per line, pooled
//! and normalized as the model's own configuration says.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use hearth_engine::embed::{is_embedding_model, EmbeddingModel};

#[derive(Args)]
pub struct EmbedArgs {
    /// Embedding model folder (sentence-transformers / Hugging Face: config.json,
    /// model.safetensors, tokenizer.json, modules.json)
    model: PathBuf,
    /// Texts to embed; `-` reads one text per line from standard input
    #[arg(required = true)]
    texts: Vec<String>,
    /// Refuse texts longer than the model's limit instead of cutting them to it (cutting is
    /// what sentence-transformers does; a note on stderr says which texts were cut)
    #[arg(long)]
    no_truncate: bool,
    /// CPU threads (0 = all cores)
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
}

/// The texts from the arguments, with `-` replaced by the lines of standard input.
fn read_texts(args: &[String]) -> anyhow::Result<Vec<String>> {
    let mut texts = Vec::new();
    for a in args {
        if a == "-" {
            for line in std::io::stdin().lock().lines() {
                texts.push(line.context("reading standard input")?);
            }
        } else {
            texts.push(a.clone());
        }
    }
    Ok(texts)
}

pub fn run(a: EmbedArgs) -> anyhow::Result<()> {
    if !is_embedding_model(&a.model) {
        bail!(
            "{}: not an embedding model (expected a folder with a BERT config.json or a \
             sentence-transformers modules.json)",
            a.model.display()
        );
    }
    let texts = read_texts(&a.texts)?;
    let model = EmbeddingModel::load(&a.model, a.threads)?;
    let mut ids = Vec::with_capacity(texts.len());
    for (i, text) in texts.iter().enumerate() {
        let whole = model.tokenize(text, false);
        ids.push(match whole {
            Ok(t) => t,
            Err(e) if a.no_truncate => return Err(e).with_context(|| format!("text {}", i + 1)),
            Err(_) => {
                eprintln!(
                    "hearth: note: text {} cut to the model's {} tokens",
                    i + 1,
                    model.info().max_tokens
                );
                model
                    .tokenize(text, true)
                    .with_context(|| format!("text {}", i + 1))?
            }
        });
    }
    let vectors = model.embed_tokens(&ids)?;
    let mut out = std::io::stdout().lock();
    for v in vectors {
        writeln!(out, "{}", serde_json::to_string(&v)?)?;
    }
    Ok(())
}
