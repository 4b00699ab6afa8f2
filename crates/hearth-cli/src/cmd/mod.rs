pub mod bench;
pub mod convert;
pub mod embed;
pub mod quantize;
pub mod run;
pub mod serve;
pub mod show;
pub mod tokenize;

use std::path::Path;

use anyhow::Context;
use hearth_gguf::GgufFile;
use hearth_tokenizer::Tokenizer;

/// Open a GGUF file and build its tokenizer, without loading the weights.
pub fn open_tokenizer(path: &Path) -> anyhow::Result<(GgufFile, Tokenizer)> {
    let file = GgufFile::open(path).with_context(|| path.display().to_string())?;
    let tok = Tokenizer::from_gguf(file.metadata())
        .with_context(|| format!("{}: tokenizer", path.display()))?;
    Ok((file, tok))
}

/// One line per event on standard error at `default_level` and above; `RUST_LOG` (e.g.
/// `debug`) overrides it.
pub fn init_logging(default_level: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // wgpu's driver notes ("VK_EXT_memory_budget is not available") are not the user's
        // concern; its errors reach the user as hearth's own.
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(format!(
                "{default_level},wgpu_hal=error,wgpu_core=error,naga=error"
            ))
        });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
