pub mod bench;
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
