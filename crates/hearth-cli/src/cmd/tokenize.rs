use std::path::PathBuf;

use clap::Args;

#[derive(Args)]
pub struct TokenizeArgs {
    /// GGUF model file
    model: PathBuf,
    /// Text to tokenize (special tokens such as <|im_start|> are recognized)
    text: String,
    /// Print each id with the text of its token, one per line
    #[arg(long)]
    detok: bool,
    /// Treat special-token text as plain text
    #[arg(long)]
    no_parse_special: bool,
}

pub fn run(a: TokenizeArgs) -> anyhow::Result<()> {
    let (_, tok) = super::open_tokenizer(&a.model)?;
    let ids = tok.encode(&a.text, !a.no_parse_special)?;
    if a.detok {
        for id in ids {
            // Control tokens decode to nothing; show them as they are written.
            let piece = match tok.token_bytes(id) {
                [] => tok.token_text(id).unwrap_or_default().to_string(),
                bytes => String::from_utf8_lossy(bytes).into_owned(),
            };
            println!("{id}\t{piece:?}");
        }
    } else {
        let line: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        println!("{}", line.join(" "));
    }
    Ok(())
}
