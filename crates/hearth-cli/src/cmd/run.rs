use std::io::{self, BufRead, IsTerminal, Read, Write};
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use hearth_engine::{Device, Engine, EngineOptions, GenerationReport, KvType, Sequence};
use hearth_sampler::{Sampler, SamplingParams};
use hearth_tokenizer::ChatMessage;

#[derive(Args)]
pub struct RunArgs {
    /// GGUF model file, or a Hugging Face folder (config.json, safetensors, tokenizer.json)
    pub model: PathBuf,
    /// The prompt; without one, an interactive chat (or the whole of standard input, when it is
    /// not a terminal)
    pub prompt: Option<String>,
    /// System message for the chat
    #[arg(long)]
    pub system: Option<String>,
    /// Complete the prompt as it is: no chat template, BOS as the model's metadata says
    #[arg(long)]
    pub raw: bool,
    /// Use a built-in chat template instead of the model's: chatml, llama3, gemma, mistral
    #[arg(long)]
    pub template: Option<String>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Most tokens to generate (default: until the model stops or the context is full)
    #[arg(short = 'n', long = "max-tokens")]
    pub max_tokens: Option<usize>,
    #[command(flatten)]
    pub load: LoadArgs,
    /// Print timings to standard error after each reply
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

/// Flags that decide how a model is loaded.
#[derive(Args, Clone)]
pub struct LoadArgs {
    /// Context size in tokens (default: the model's, at most 4096)
    #[arg(short = 'c', long = "ctx-size", default_value_t = 0)]
    pub ctx_size: usize,
    /// CPU threads (default: all cores)
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
    /// Most prompt tokens per forward step
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    pub batch_size: usize,
    /// Where the model runs: auto (a CUDA GPU when one is usable, the Metal GPU on macOS, else
    /// the CPU), cpu, cuda, cuda:N, wgpu (Metal on macOS, Vulkan elsewhere)
    #[arg(long, default_value = "auto")]
    pub device: Device,
    /// How the KV cache stores keys and values: f16, or f32 (twice the memory, no rounding in
    /// attention; CPU only)
    #[arg(long = "kv-type", default_value = "f16")]
    pub kv_type: KvType,
}

impl LoadArgs {
    pub fn options(&self, template: Option<String>) -> EngineOptions {
        EngineOptions {
            n_ctx: self.ctx_size,
            n_kv_tokens: 0,
            n_threads: self.threads,
            n_batch: self.batch_size,
            template,
            device: self.device,
            kv_type: self.kv_type,
        }
    }
}

/// Sampling flags, named as llama.cpp names them.
#[derive(Args, Clone)]
pub struct SamplingArgs {
    /// Temperature (0 = greedy)
    #[arg(long = "temp", default_value_t = SamplingParams::default().temperature)]
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = all)
    #[arg(long, default_value_t = SamplingParams::default().top_k)]
    pub top_k: usize,
    /// Keep the most likely tokens up to this probability mass (1 = all)
    #[arg(long, default_value_t = SamplingParams::default().top_p)]
    pub top_p: f32,
    /// Drop tokens less likely than this fraction of the most likely one (0 = off)
    #[arg(long, default_value_t = SamplingParams::default().min_p)]
    pub min_p: f32,
    /// Penalize repeating any of the last --repeat-last-n tokens (1 = off)
    #[arg(long, default_value_t = SamplingParams::default().repeat_penalty)]
    pub repeat_penalty: f32,
    #[arg(long, default_value_t = SamplingParams::default().repeat_last_n)]
    pub repeat_last_n: usize,
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// Random seed (default: a new one each run)
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            seed: self.seed,
        }
    }
}

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    let params = a.sampling.params();
    params.validate()?;
    if a.raw && a.system.is_some() {
        bail!("--system has no effect with --raw (there is no chat template to put it in)");
    }
    let mut engine = Engine::load(&a.model, &a.load.options(a.template.clone()))?;
    if let Some(note) = &engine.info().device_note {
        eprintln!("note: {note}");
    }
    let mut sampler = Sampler::new(params)?;
    let max_tokens = a.max_tokens.unwrap_or(usize::MAX);
    let prompt = match a.prompt.clone() {
        Some(p) => Some(p),
        None if !io::stdin().is_terminal() => {
            let mut s = String::new();
            io::stdin()
                .read_to_string(&mut s)
                .context("reading the prompt from standard input")?;
            Some(s)
        }
        None => None,
    };
    match prompt {
        Some(p) if a.raw => {
            let ids = engine.tokenizer.encode_prompt(&p, true)?;
            let mut seq = Sequence::new();
            let report = generate(&mut engine, &mut seq, &ids, &mut sampler, max_tokens)?;
            finish(&a, &report);
        }
        Some(p) => {
            let messages = conversation(&a, p);
            let ids = engine.chat_prompt(&messages)?;
            let mut seq = Sequence::new();
            let report = generate(&mut engine, &mut seq, &ids, &mut sampler, max_tokens)?;
            finish(&a, &report);
        }
        None if a.raw => bail!("--raw needs a prompt"),
        None => chat(&a, &mut engine, &mut sampler, max_tokens)?,
    }
    Ok(())
}

fn conversation(a: &RunArgs, user: String) -> Vec<ChatMessage> {
    let mut m = Vec::new();
    if let Some(s) = &a.system {
        m.push(ChatMessage {
            role: "system".into(),
            content: s.clone(),
        });
    }
    m.push(ChatMessage {
        role: "user".into(),
        content: user,
    });
    m
}

fn generate(
    engine: &mut Engine,
    seq: &mut Sequence,
    ids: &[u32],
    sampler: &mut Sampler,
    max_tokens: usize,
) -> anyhow::Result<(GenerationReport, String)> {
    let mut out = io::stdout().lock();
    let mut text = String::new();
    let report = engine.generate(seq, ids, sampler, max_tokens, |piece| {
        text.push_str(piece);
        // A closed pipe (`hearth run ... | head`) ends generation quietly.
        out.write_all(piece.as_bytes()).is_ok() && out.flush().is_ok()
    })?;
    Ok((report, text))
}

fn finish(a: &RunArgs, (report, _): &(GenerationReport, String)) {
    // With --raw, stdout carries exactly the generated text.
    if !a.raw {
        println!();
    }
    if a.verbose {
        print_timings(report);
    }
}

fn print_timings(r: &GenerationReport) {
    let rate = |n: usize, t: std::time::Duration| n as f64 / t.as_secs_f64().max(1e-9);
    eprintln!(
        "prompt: {} tokens ({} cached) in {:.2} s ({:.1} tok/s); generated: {} tokens in {:.2} s ({:.1} tok/s); stop: {}",
        r.n_prompt,
        r.n_cached,
        r.prompt_time.as_secs_f64(),
        rate(r.n_prompt - r.n_cached, r.prompt_time),
        r.n_generated,
        r.gen_time.as_secs_f64(),
        rate(r.n_generated, r.gen_time),
        r.finish.as_str()
    );
}

/// The interactive multi-turn chat: the conversation is re-rendered each turn and the engine
/// reuses the cached prefix, so each turn only pays for its new tokens.
fn chat(
    a: &RunArgs,
    engine: &mut Engine,
    sampler: &mut Sampler,
    max_tokens: usize,
) -> anyhow::Result<()> {
    let mut messages: Vec<ChatMessage> = Vec::new();
    if let Some(s) = &a.system {
        messages.push(ChatMessage {
            role: "system".into(),
            content: s.clone(),
        });
    }
    let mut seq = Sequence::new();
    eprintln!(
        "Chatting with {} (/bye or Ctrl-D to quit).",
        a.model.display()
    );
    let stdin = io::stdin();
    loop {
        eprint!(">>> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            eprintln!();
            break;
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "/bye" || line == "/exit" {
            break;
        }
        messages.push(ChatMessage {
            role: "user".into(),
            content: line.to_string(),
        });
        let ids = match engine.chat_prompt(&messages) {
            Ok(ids) => ids,
            Err(e) => {
                messages.pop();
                eprintln!("hearth: {e}");
                continue;
            }
        };
        match generate(engine, &mut seq, &ids, sampler, max_tokens) {
            Ok((report, text)) => {
                println!();
                if a.verbose {
                    print_timings(&report);
                }
                messages.push(ChatMessage {
                    role: "assistant".into(),
                    content: text.trim().to_string(),
                });
            }
            Err(e) => {
                // The turn is dropped; the conversation goes on without it.
                messages.pop();
                eprintln!("\nhearth: {e}");
            }
        }
    }
    Ok(())
}
