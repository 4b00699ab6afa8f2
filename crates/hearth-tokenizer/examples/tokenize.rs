//! Tokenizes JSON-encoded strings, one per input line, with a GGUF file's tokenizer and prints
//! the ids of each as a JSON array; reports build and encode times on stderr.
//!
//! `cargo run --release -p hearth-tokenizer --example tokenize -- MODEL.gguf [--no-special] < texts.jsonl`
//!
//! `--no-special` treats control tokens written in the text as plain text (`parse_special = false`).

use hearth_tokenizer::Tokenizer;
use std::io::{BufRead, Write};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: tokenize MODEL.gguf [--no-special] < texts.jsonl")?;
    let parse_special = std::env::args().nth(2).as_deref() != Some("--no-special");
    let file = hearth_gguf::GgufFile::open(&path)?;
    let start = Instant::now();
    let tokenizer = Tokenizer::from_gguf(file.metadata())?;
    eprintln!(
        "built tokenizer ({} tokens) in {:.1} ms",
        tokenizer.vocab_size(),
        start.elapsed().as_secs_f64() * 1e3
    );
    let mut out = std::io::stdout().lock();
    let (mut n_bytes, mut n_tokens, mut encode_time) = (0usize, 0usize, 0f64);
    for line in std::io::stdin().lock().lines() {
        let text: String = serde_json::from_str(&line?)?;
        let start = Instant::now();
        let ids = tokenizer.encode(&text, parse_special)?;
        encode_time += start.elapsed().as_secs_f64();
        n_bytes += text.len();
        n_tokens += ids.len();
        writeln!(out, "{}", serde_json::to_string(&ids)?)?;
    }
    eprintln!(
        "encoded {n_bytes} bytes into {n_tokens} tokens in {:.1} ms ({:.1} MB/s)",
        encode_time * 1e3,
        n_bytes as f64 / encode_time.max(1e-9) / 1e6
    );
    Ok(())
}
