//! `hearth`: run, inspect and benchmark local LLMs.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "hearth", version, about = "Fast local LLM inference")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Chat with a model, or complete a prompt with --raw
    Run(cmd::run::RunArgs),
    /// Print one embedding vector (a JSON array) per text, one per line
    Embed(cmd::embed::EmbedArgs),
    /// Print the token ids of a text
    Tokenize(cmd::tokenize::TokenizeArgs),
    /// Describe a model file: architecture, size, quantization, template, memory
    Show(cmd::show::ShowArgs),
    /// Measure load time, prompt processing and generation speed
    Bench(cmd::bench::BenchArgs),
    /// Serve models over OpenAI- and Ollama-compatible HTTP APIs
    Serve(cmd::serve::ServeArgs),
    /// Quantize a GGUF model with one of llama.cpp's presets (Q4_K_M, Q8_0, ...)
    Quantize(cmd::quantize::QuantizeArgs),
    /// Convert a Hugging Face model folder to GGUF (f16, bf16, q8_0)
    Convert(cmd::convert::ConvertArgs),
}

fn main() -> ExitCode {
    // NOTE: a panic is a bug, but the user still gets one line rather than a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("hearth: internal error: {info}");
    }));
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(a) => cmd::run::run(a),
        Command::Embed(a) => cmd::embed::run(a),
        Command::Tokenize(a) => cmd::tokenize::run(a),
        Command::Show(a) => cmd::show::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Quantize(a) => cmd::quantize::run(a),
        Command::Convert(a) => cmd::convert::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hearth: {e:#}");
            ExitCode::FAILURE
        }
    }
}
