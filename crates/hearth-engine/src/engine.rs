use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_backend::{KvSpec, KvType};
use hearth_gguf::GgufFile;
use hearth_kv::BlockPool;
use hearth_sampler::Candidate;
use hearth_tokenizer::{ChatMessage, Tokenizer};

use crate::runner::{load_runner, Device, ModelRunner, StepBuffers};
use crate::source::ModelSource;
use crate::{EngineError, PromptBuilder, SeqStep, Sequence};

/// Tokens per KV block.
pub const BLOCK_SIZE: usize = 32;

/// How to load a model.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Context size in tokens: the longest one sequence may grow
    /// (0 = min(4096, the model's training context)).
    pub n_ctx: usize,
    /// KV cache size in tokens, shared by all sequences (0 = `n_ctx`). A server running many
    /// sequences at once wants several contexts' worth.
    pub n_kv_tokens: usize,
    /// CPU threads (0 = all cores).
    pub n_threads: usize,
    /// Most tokens one forward step takes; longer prompts are fed in chunks.
    pub n_batch: usize,
    /// A built-in chat template to use instead of the model's own (chatml, llama3, gemma, mistral).
    pub template: Option<String>,
    /// Where the model runs.
    pub device: Device,
    /// How the KV cache stores keys and values.
    pub kv_type: KvType,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            n_ctx: 0,
            n_kv_tokens: 0,
            n_threads: 0,
            n_batch: 512,
            template: None,
            device: Device::Auto,
            kv_type: KvType::F16,
        }
    }
}

/// Facts about the loaded model, for `hearth show` and logs.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub path: PathBuf,
    pub arch: String,
    pub n_params: u64,
    pub weight_bytes: u64,
    pub n_ctx: usize,
    pub n_ctx_train: usize,
    /// Token slots in the KV cache, over all sequences.
    pub n_kv_tokens: usize,
    pub kv_bytes: u64,
    pub backend: String,
    /// CPU threads the backend runs on (0 on a GPU).
    pub n_threads: usize,
    /// Why the model does not run on the device asked for (`--device auto` without a usable
    /// GPU), to print once.
    pub device_note: Option<String>,
    pub load_time: Duration,
}

/// A loaded model ready to run sequences.
pub struct Engine {
    pub(crate) runner: Box<dyn ModelRunner>,
    /// The last step's results (logits, token ids or candidates); kept to reuse the
    /// allocations.
    pub(crate) out: StepBuffers,
    pub(crate) pool: BlockPool,
    pub tokenizer: Arc<Tokenizer>,
    prompt: PromptBuilder,
    /// The GGUF file, for a model loaded from one.
    file: Option<Arc<GgufFile>>,
    info: ModelInfo,
    n_batch: usize,
}

impl Engine {
    /// Open a GGUF file or a Hugging Face model folder and prepare everything to run it.
    pub fn load(path: &Path, opts: &EngineOptions) -> Result<Self, EngineError> {
        let start = Instant::now();
        let model_err = |error| EngineError::Model {
            path: path.to_path_buf(),
            error,
        };
        let ModelSource {
            mut config,
            tensors,
            tokenizer,
            template,
            n_params,
            weight_bytes,
            gguf,
        } = ModelSource::open(path, opts)?;
        let n_ctx = match opts.n_ctx {
            0 => config.n_ctx_train.min(4096),
            n => n,
        };
        if opts.n_batch == 0 {
            return Err(EngineError::Invalid(
                "the batch size must be positive".into(),
            ));
        }
        config.fit_context(n_ctx);
        let n_kv_tokens = match opts.n_kv_tokens {
            0 => n_ctx,
            n => n.max(n_ctx),
        };
        let n_blocks = n_kv_tokens.div_ceil(BLOCK_SIZE);
        let kv_spec = KvSpec {
            kv_dims: vec![config.kv_dim(); config.n_layers],
            n_blocks,
            block_size: BLOCK_SIZE,
            dtype: opts.kv_type,
        };
        let loaded = load_runner(opts.device, opts.n_threads, config, tensors, &kv_spec).map_err(
            |e| match e {
                EngineError::Run(error) => model_err(error),
                e => e,
            },
        )?;
        let model_config = loaded.runner.config();
        let info = ModelInfo {
            path: path.to_path_buf(),
            arch: model_config.arch.clone(),
            n_params,
            weight_bytes,
            n_ctx,
            n_ctx_train: model_config.n_ctx_train,
            n_kv_tokens: n_blocks * BLOCK_SIZE,
            kv_bytes: kv_spec.bytes(),
            backend: loaded.backend,
            n_threads: loaded.n_threads,
            device_note: loaded.note,
            load_time: start.elapsed(),
        };
        let tokenizer = Arc::new(tokenizer);
        Ok(Self {
            runner: loaded.runner,
            out: StepBuffers::default(),
            pool: BlockPool::new(n_blocks, BLOCK_SIZE),
            prompt: PromptBuilder::new(tokenizer.clone(), template),
            tokenizer,
            file: gguf,
            info,
            n_batch: opts.n_batch,
        })
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The GGUF file the model came from; `None` for a Hugging Face folder.
    pub fn gguf(&self) -> Option<&GgufFile> {
        self.file.as_deref()
    }

    pub fn n_ctx(&self) -> usize {
        self.info.n_ctx
    }

    pub fn n_vocab(&self) -> usize {
        self.runner.config().n_vocab
    }

    /// Render a conversation with the chat template and tokenize it.
    pub fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, EngineError> {
        self.prompt.chat(messages)
    }

    /// The tokenizer and chat template, to build prompts on other threads.
    pub fn prompt_builder(&self) -> PromptBuilder {
        self.prompt.clone()
    }

    /// Bring `seq` to exactly `tokens`: keep the longest prefix already in its cache, run the
    /// rest, and return the logits after the last token. At least the last token is always
    /// run, so that there are logits to return.
    pub fn feed(&mut self, seq: &mut Sequence, tokens: &[u32]) -> Result<Vec<f32>, EngineError> {
        let last = self.feed_all_but_last_chunk(seq, tokens)?;
        self.step(seq, last)
    }

    /// [`Engine::feed`] for greedy decoding: returns the id of the most likely next token
    /// (see [`Engine::step_argmax`]).
    pub fn feed_argmax(&mut self, seq: &mut Sequence, tokens: &[u32]) -> Result<u32, EngineError> {
        let last = self.feed_all_but_last_chunk(seq, tokens)?;
        self.step_argmax(seq, last)
    }

    /// [`Engine::feed`] for sampling with a top-k stage: returns the `k` best candidates after
    /// the last token (see [`Engine::step_best`]).
    pub fn feed_best(
        &mut self,
        seq: &mut Sequence,
        tokens: &[u32],
        k: usize,
    ) -> Result<Vec<Candidate>, EngineError> {
        let last = self.feed_all_but_last_chunk(seq, tokens)?;
        self.step_best(seq, last, k)
    }

    /// Checks `tokens`, keeps the prefix of them `seq` caches, runs the rest in chunks of the
    /// batch size but the last chunk, without logits, and returns that last chunk (never
    /// empty).
    fn feed_all_but_last_chunk<'t>(
        &mut self,
        seq: &mut Sequence,
        tokens: &'t [u32],
    ) -> Result<&'t [u32], EngineError> {
        if tokens.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if tokens.len() > self.n_ctx() {
            return Err(EngineError::PromptTooLong {
                n_prompt: tokens.len(),
                n_ctx: self.n_ctx(),
            });
        }
        let common = Self::reusable_prefix(seq, tokens);
        // NOTE: the table may keep fewer tokens than asked (a cut inside a shared block drops
        // that block); the rest is recomputed below.
        let kept = seq.table.truncate(&mut self.pool, common);
        seq.tokens.truncate(kept);
        // NOTE: `kept < tokens.len()` (see `reusable_prefix`), so the last chunk has a token.
        let rest = &tokens[kept..];
        let split = (rest.len() - 1) / self.n_batch * self.n_batch;
        for chunk in rest[..split].chunks(self.n_batch) {
            self.step_rows(seq, chunk, &[])?;
        }
        Ok(&rest[split..])
    }

    /// How many leading `tokens` `feed` can take from `seq`'s cache: the common prefix, less
    /// the last token, which must run to give logits.
    pub fn reusable_prefix(seq: &Sequence, tokens: &[u32]) -> usize {
        seq.tokens
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count()
            .min(tokens.len().saturating_sub(1))
    }

    /// [`Engine::step`] for greedy decoding: returns the id of the largest logit after the
    /// last token (ties to the lower id, as `hearth_sampler::argmax`), found on the device.
    pub fn step_argmax(&mut self, seq: &mut Sequence, tokens: &[u32]) -> Result<u32, EngineError> {
        let Some(last) = tokens.len().checked_sub(1) else {
            return Err(EngineError::EmptyPrompt);
        };
        let mut work = [SeqStep {
            seq,
            tokens,
            logits_rows: vec![last],
        }];
        let ids = self.step_batch_argmax(&mut work)?;
        ids.first().copied().ok_or_else(|| {
            EngineError::Invalid("the forward pass returned no token for its last row".into())
        })
    }

    /// [`Engine::step`] for sampling with a top-k stage: returns the `k` best candidates after
    /// the last token, best first (`hearth_sampler::best_of_rows`'s order; every token when the
    /// vocabulary has fewer than `k`), selected on the device. What
    /// `Sampler::sample_best` draws from.
    pub fn step_best(
        &mut self,
        seq: &mut Sequence,
        tokens: &[u32],
        k: usize,
    ) -> Result<Vec<Candidate>, EngineError> {
        let Some(last) = tokens.len().checked_sub(1) else {
            return Err(EngineError::EmptyPrompt);
        };
        let mut work = [SeqStep {
            seq,
            tokens,
            logits_rows: vec![last],
        }];
        // NOTE: `step_batch_best` checks that one row's worth of candidates came back.
        Ok(self.step_batch_best(&mut work, k)?.to_vec())
    }

    /// How many candidates a top-k step of `k` brings back per row: `k`, or the whole
    /// vocabulary when it is smaller (the model selects among the vocabulary only).
    pub(crate) fn best_per_row(&self, k: usize) -> Result<usize, EngineError> {
        if k == 0 {
            return Err(EngineError::Invalid(
                "the 0 best candidates were asked for".into(),
            ));
        }
        Ok(k.min(self.n_vocab()))
    }

    /// Run `tokens` as the next tokens of `seq`; returns the logits after the last one.
    pub fn step(&mut self, seq: &mut Sequence, tokens: &[u32]) -> Result<Vec<f32>, EngineError> {
        match tokens.len() {
            0 => Err(EngineError::EmptyPrompt),
            n => self.step_rows(seq, tokens, &[n - 1]),
        }
    }

    /// Run `tokens` as the next tokens of `seq`; returns the logits after each token in
    /// `logits_rows` (indices into `tokens`), `[logits_rows.len(), n_vocab]` row-major.
    pub fn step_rows(
        &mut self,
        seq: &mut Sequence,
        tokens: &[u32],
        logits_rows: &[usize],
    ) -> Result<Vec<f32>, EngineError> {
        let mut work = [SeqStep {
            seq,
            tokens,
            logits_rows: logits_rows.to_vec(),
        }];
        Ok(self.step_batch(&mut work)?.remove(0))
    }

    /// The L2 norms of the last token's hidden state after the embedding, after each layer but
    /// the last, and after the final norm (HF transformers' `output_hidden_states` rows), for
    /// `tokens` run as one fresh sequence; tells which layer first departs from a reference.
    pub fn hidden_norms(&mut self, tokens: &[u32]) -> Result<Vec<f32>, EngineError> {
        let mut seq = Sequence::new();
        self.runner.set_tracing(true);
        let result = self.feed(&mut seq, tokens);
        let norms = self.runner.take_trace();
        self.runner.set_tracing(false);
        self.release(&mut seq);
        result.map(|_| norms)
    }

    /// Return a sequence's blocks to the pool.
    pub fn release(&mut self, seq: &mut Sequence) {
        seq.table.release_all(&mut self.pool);
        seq.tokens.clear();
    }
}
