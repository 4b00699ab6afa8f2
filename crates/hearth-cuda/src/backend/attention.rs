//! Paged attention launches: the batch's sequences, positions and block tables as the kernels
//! read them (kernels/model.cu), the KV write, then attention.

use hearth_backend::{AttnBatch, AttnParams, BackendError};

use super::launch::Arg;
use super::mmq::takes_int8_activations;
use super::staging::key_of;
use super::state::{Mode, Quantized, State};
use super::{CudaBackend, CudaKvCache, CudaTensor};

impl CudaBackend {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch_attention(
        &self,
        st: &mut State,
        q: &CudaTensor,
        k: &CudaTensor,
        v: &CudaTensor,
        cache: &CudaKvCache,
        layer: usize,
        batch: &AttnBatch,
        p: &AttnParams,
        out: &CudaTensor,
    ) -> Result<(), BackendError> {
        let (hd, kv_dim, q_dim) = (
            p.head_dim,
            p.n_kv_heads * p.head_dim,
            p.n_heads * p.head_dim,
        );
        let n = q.rows;
        let flash = flash_prefill_kernel(hd).filter(|_| {
            if !self.dev.info().has_mma() {
                return false;
            }
            let longest = batch.seqs.iter().map(|s| s.n_tokens).max().unwrap_or(0);
            longest >= FLASH_MIN_QUERIES
        });
        // The kernels read a key's values 8 at a time (16 bytes).
        if !hd.is_multiple_of(8) {
            return Err(BackendError::Unsupported(format!(
                "CUDA attention needs a head size that is a multiple of 8, not {hd}"
            )));
        }
        // The kernel whose per-lane share covers the head (lanes past head_dim sit idle), in
        // blocks of 4 or ATTN_WIDE_WARPS warps.
        let wide = self.wide_attention(n);
        let name = match (hd, wide) {
            (1..=32, false) => "attention_hd32",
            (33..=64, false) => "attention_hd64",
            (65..=128, false) => "attention_hd128",
            (129..=256, false) => "attention_hd256",
            (1..=32, true) => "attention_hd32_wide",
            (33..=64, true) => "attention_hd64_wide",
            (65..=128, true) => "attention_hd128_wide",
            (129..=256, true) => "attention_hd256_wide",
            _ => {
                return Err(BackendError::Unsupported(format!(
                    "CUDA attention has no kernel for head size {hd}"
                )))
            }
        };
        let shapes_ok = cache.kv_dims.get(layer) == Some(&kv_dim)
            && batch.block_size == cache.block_size
            && p.n_kv_heads > 0
            && p.n_heads.is_multiple_of(p.n_kv_heads)
            && (q.cols, k.cols, v.cols, out.cols) == (q_dim, kv_dim, kv_dim, q_dim)
            && k.rows == n
            && v.rows == n
            && out.rows == n;
        if !shapes_ok {
            return Err(BackendError::Unsupported(format!(
                "layer {layer}: attention operands do not match the KV cache and parameters"
            )));
        }
        // Every layer gets the same batch: build and stage its description once per pass.
        let key = key_of(batch.seqs, "attention batch");
        let base = match key.and_then(|k| st.staged_at(k)) {
            Some(dev) => dev,
            None => {
                let meta = batch_metadata(batch, n, cache.n_blocks)?;
                self.stage_u32(st, key, &meta)?
            }
        };
        let (n_seqs, n32) = (batch.seqs.len() as u64, n as u64);
        let (tok_seq, tok_pos) = (base, base + 4 * n32);
        let (seq_table, tables) = (base + 8 * n32, base + 8 * n32 + 4 * n_seqs);
        let (kc, vc) = cache.layers[layer];
        let bs = cache.block_size as i32;
        // A decode step where every sequence brings one token: the attention kernel writes the
        // new keys and values itself (no block reads a slot written in the same launch).
        let kv_in_attention = flash.is_none() && batch.seqs.iter().all(|s| s.n_tokens == 1);
        if !kv_in_attention {
            self.launch_kv_write(
                st,
                k,
                v,
                (kc, vc),
                (tok_seq, tok_pos, seq_table, tables),
                kv_dim,
                bs,
            )?;
        }
        if let Some(flash) = flash {
            let args = [
                Arg::P(q.ptr),
                Arg::P(kc),
                Arg::P(vc),
                Arg::P(out.ptr),
                Arg::P(tok_pos),
                Arg::P(seq_table),
                Arg::P(tables),
                Arg::I(p.n_heads as i32),
                Arg::I(p.n_kv_heads as i32),
                Arg::I(bs),
                Arg::F(p.scale),
                Arg::I(p.window.map_or(0, |w| w as i32)),
                Arg::F(p.softcap.unwrap_or(0.0)),
            ];
            return self.launch_flash_prefill(st, flash, batch, p, out, &args);
        }
        // Outputs headed for the o projection's int8 GEMV get their 8-bit copy here, which
        // saves that GEMV a quantize launch (whole 32-value groups within each head only).
        let out_q8 = if takes_int8_activations(n) && hd.is_multiple_of(32) {
            Some(self.alloc_q8(st, n * q_dim)?)
        } else {
            None
        };
        let (oq, ods) = out_q8.unwrap_or((0, 0));
        let args = [
            Arg::P(q.ptr),
            Arg::P(kc),
            Arg::P(vc),
            Arg::P(out.ptr),
            Arg::P(tok_seq),
            Arg::P(tok_pos),
            Arg::P(seq_table),
            Arg::P(tables),
            Arg::I(p.n_heads as i32),
            Arg::I(p.n_kv_heads as i32),
            Arg::I(hd as i32),
            Arg::I(bs),
            Arg::F(p.scale),
            Arg::I(p.window.map_or(0, |w| w as i32)),
            Arg::F(p.softcap.unwrap_or(0.0)),
            Arg::P(oq),
            Arg::P(ods),
            Arg::P(if kv_in_attention { k.ptr } else { 0 }),
            Arg::P(if kv_in_attention { v.ptr } else { 0 }),
        ];
        let longest = batch.seqs.iter().map(|s| s.first_pos + s.n_tokens).max();
        let split = self.attention_splits(p, n, longest.unwrap_or(0));
        let split_done = match split {
            Some(n_split) => {
                let capacity = cache.n_blocks * cache.block_size;
                self.launch_split_attention(st, p, n, n_split, capacity, &args)?
            }
            None => false,
        };
        if !split_done {
            let threads = if wide { ATTN_WIDE_WARPS * 32 } else { 4 * 32 };
            self.launch(st, name, (p.n_heads as u32, n as u32), threads, &args)?;
        }
        if out_q8.is_some() {
            st.quantized.set(Some(Quantized {
                of: out.ptr,
                q: oq,
                ds: ods,
            }));
        }
        Ok(())
    }

    /// Whether a batch of `n` tokens gets attention blocks of ATTN_WIDE_WARPS warps rather
    /// than 4 (one block per query head and token). Each warp walks every 4th or 32nd
    /// position, one after another, a chain of dependent loads: a few tokens' heads alone
    /// would leave most of the GPU idle, many tokens' fill it with blocks of 4.
    /// `HEARTH_CUDA_ATTN_WIDE` (0 or 1) sets it for every batch, for measurements. Where steps
    /// may run as one kernel (`decode_layers.rs`), whose blocks are 4 warps, the op-by-op steps
    /// keep 4 too: the two then give the same bits.
    ///
    /// NOTE (H100, `scripts/device/binary_ab.sh`, tg128, two rounds each, tok/s): Qwen3-0.6B
    /// Q8_0 with 4 warps 769.2 / 763.8, 8 warps 809.5 / 832.7, 16 warps 890.4 / 910.9; in a
    /// second call 4 warps 740.1 / 735.3, 16 902.7 / 906.8, 32 930.4 / 934.2. Llama-3.1-8B
    /// Q4_K_M in that call: 302.7 / 302.0, 329.6 / 332.8, 332.9 / 335.3. 64 sequences (4 warps
    /// either way) within the rounds' spread.
    fn wide_attention(&self, n: usize) -> bool {
        self.wide_attention_set
            .unwrap_or(n <= ATTN_FEW_TOKENS && !self.one_kernel_decode)
    }

    /// Whether a decode step whose longest sequence holds `context` positions may split its
    /// heads' positions across blocks (`attention_splits`): such steps are recorded apart from
    /// shorter ones.
    pub(super) fn long_context(&self, context: usize) -> bool {
        context >= self.attn_split_from
    }

    /// How many blocks share each head of a batch of `n` tokens whose longest sequence holds
    /// `context` positions (kernels/attention_split.cu), or `None` for one block a head (the
    /// kernels of `launch_attention`). Only the few-token steps split, and only while their
    /// heads alone would leave at least half the multiprocessors idle: a head's positions are
    /// a chain of loads through one block, and at 2,048 positions of Qwen3-0.6B the 16 heads'
    /// blocks each pulled 1 MB of cache through one multiprocessor. Sliding-window layers
    /// whose window is shorter than a long context keep one block. The tensor-core kernels
    /// (`gqa_attention_kernels`) split each KV head's positions into about two blocks a
    /// multiprocessor, up to GQA_MAX_SPLITS.
    fn attention_splits(&self, p: &AttnParams, n: usize, context: usize) -> Option<u32> {
        let long = self.long_context(context) && p.window.is_none_or(|w| w >= self.attn_split_from);
        if !long || !self.wide_attention(n) {
            return None;
        }
        let sm = self.dev.info().sm_count;
        let splits = if self.gqa_attention_kernels(p).is_some() {
            // Blocks of 8 warps, one a KV head and split: about two a multiprocessor.
            let groups = (p.n_kv_heads * n).max(1) as u32;
            (2 * sm).div_ceil(groups).min(GQA_MAX_SPLITS as u32)
        } else {
            let heads = (p.n_heads * n).max(1) as u32;
            (sm / heads).min(ATTN_MAX_SPLITS as u32)
        };
        (splits >= 2).then_some(splits)
    }

    /// The scores and values kernels of split attention on tensor cores, one block for all
    /// the query heads of a KV head (kernels/attention_gqa.cu), where they apply: head sizes
    /// 64, 128 and 256, at most GQA_MAX_GROUP query heads a KV head, a GPU with mma whose
    /// blocks may have the kernels' shared memory (256-wide heads need 157 KiB: not on GPUs
    /// of 99 KiB a block), and `HEARTH_CUDA_ATTN_GQA` not 0.
    fn gqa_attention_kernels(&self, p: &AttnParams) -> Option<(&'static str, &'static str)> {
        let grouped = p.n_kv_heads > 0
            && p.n_heads.is_multiple_of(p.n_kv_heads)
            && p.n_heads / p.n_kv_heads <= GQA_MAX_GROUP;
        let info = self.dev.info();
        let fits = gqa_fits_shared(p.head_dim, info.max_shared_per_block);
        if !self.gqa_attention || !grouped || !info.has_mma() || !fits {
            return None;
        }
        Some(match p.head_dim {
            64 => ("attention_gqa_scores_hd64", "attention_gqa_values_hd64"),
            128 => ("attention_gqa_scores_hd128", "attention_gqa_values_hd128"),
            256 => ("attention_gqa_scores_hd256", "attention_gqa_values_hd256"),
            _ => return None,
        })
    }

    /// The two launches of split attention (`args`: the single-block kernel's arguments) over
    /// a cache of `capacity` positions: false, and nothing queued, where the head counters
    /// would have to grow while a step is being recorded.
    fn launch_split_attention(
        &self,
        st: &mut State,
        p: &AttnParams,
        n: usize,
        n_split: u32,
        capacity: usize,
        args: &[Arg],
    ) -> Result<bool, BackendError> {
        let heads = n * p.n_heads;
        let slots = heads * n_split as usize;
        // Every split keeps all its scores and rows (split_range in the kernels: a split has
        // at most ATTN_SPLIT_MIN positions, or a span / n_split share rounded up), then its
        // (m, l) and its part of the output.
        let span = p.window.map_or(capacity, |w| w.min(capacity));
        // A multiple of 4: the tensor-core kernels copy a split's scores 16 bytes at a time.
        let per_split = (span.div_ceil(n_split as usize) + ATTN_SPLIT_MIN).next_multiple_of(4);
        let kept = slots * per_split * 4;
        let bytes = 2 * kept + slots * 8 + slots * p.head_dim * 4;
        let Some((counts, scratch)) = self.row_counters_and_scratch(st, heads, bytes)? else {
            return Ok(false);
        };
        let (rows, stats) = (scratch + kept as u64, scratch + 2 * kept as u64);
        let parts = stats + slots as u64 * 8;
        let mut all = args.to_vec();
        all.extend([
            Arg::I(n_split as i32),
            Arg::I(per_split as i32),
            Arg::P(scratch),
            Arg::P(rows),
            Arg::P(stats),
            Arg::P(parts),
            Arg::P(counts),
        ]);
        if let Some((scores, values)) = self.gqa_attention_kernels(p) {
            let grid = (p.n_kv_heads as u32 * n_split, n as u32);
            let (scores_shared, values_shared) = gqa_shared_bytes(p.head_dim);
            self.launch_with_shared(st, scores, grid, GQA_THREADS, scores_shared, &all)?;
            self.launch_with_shared(st, values, grid, GQA_THREADS, values_shared, &all)?;
            st.arena.give_back(scratch, bytes);
            return Ok(true);
        }
        // As the single-block kernels: a lane's share covers the head.
        let (scores, values) = match p.head_dim {
            1..=32 => ("attention_split_scores_hd32", "attention_split_values_hd32"),
            33..=64 => ("attention_split_scores_hd64", "attention_split_values_hd64"),
            65..=128 => (
                "attention_split_scores_hd128",
                "attention_split_values_hd128",
            ),
            _ => (
                "attention_split_scores_hd256",
                "attention_split_values_hd256",
            ),
        };
        let grid = (p.n_heads as u32 * n_split, n as u32);
        let threads = ATTN_WIDE_WARPS * 32;
        self.launch(st, scores, grid, threads, &all)?;
        self.launch(st, values, grid, threads, &all)?;
        // The next kernel that could be handed this memory waits for these before writing.
        st.arena.give_back(scratch, bytes);
        Ok(true)
    }

    /// Flash attention over a prompt chunk (kernels/flash_prefill.cu), its spans split across
    /// blocks where `flash_splits` says so. `args`: the kernel's arguments up to the tiles,
    /// which this stages, and without the split ones.
    fn launch_flash_prefill(
        &self,
        st: &mut State,
        kernels: FlashKernels,
        batch: &AttnBatch,
        p: &AttnParams,
        out: &CudaTensor,
        args: &[Arg; 13],
    ) -> Result<(), BackendError> {
        let tiles = flash_tiles(batch);
        let tiles_at = self.stage_u32(st, key_of(batch.seqs, "flash tiles"), &tiles)?;
        let n_tiles = tiles.len() / 3;
        let n = out.rows;
        let longest = batch
            .seqs
            .iter()
            .map(|s| {
                let end = s.first_pos + s.n_tokens;
                p.window.map_or(end, |w| end.min(w + FLASH_ROWS))
            })
            .max()
            .unwrap_or(0);
        let shared = flash_shared_bytes(p.head_dim);
        // Phase 1 (only K tiles) takes half the shared memory, so its own split count.
        let stats_shared = shared / 2;
        let (n_split, n_stats) = if st.mode == Mode::Eager {
            let sms = self.dev.info().sm_count as usize;
            let mut splits = |name, shared| -> Result<u32, BackendError> {
                let resident = self.resident_per_sm(st, name, FLASH_THREADS, shared)? * sms;
                Ok(flash_splits(
                    n_tiles * p.n_heads,
                    resident,
                    longest / self.flash_split_keys,
                ))
            };
            let n_split = splits(kernels.attention, shared)?;
            let n_stats = if n_split > 1 {
                splits(kernels.stats, stats_shared)?
            } else {
                1
            };
            (n_split, n_stats)
        } else {
            (1, 1)
        };
        let with = |n_split: u32, n_stats: u32, stats: u64, parts: u64| {
            let mut all = args[..7].to_vec();
            all.push(Arg::P(tiles_at));
            all.extend_from_slice(&args[7..]);
            all.extend([
                Arg::I(n_split as i32),
                Arg::I(n_stats as i32),
                Arg::I(n as i32),
                Arg::P(stats),
                Arg::P(parts),
            ]);
            all
        };
        let grid = |n_split: u32| (n_tiles as u32, p.n_heads as u32 * n_split);
        if n_split == 1 {
            let all = with(1, 0, 0, 0);
            let name = kernels.attention;
            return Ok(self.launch_with_shared(st, name, grid(1), FLASH_THREADS, shared, &all)?);
        }
        let stream = self.dev.stream().clone();
        let stats_bytes = n_stats as usize * n * p.n_heads * 8;
        let parts_bytes = n_split as usize * out.len() * 4;
        let stats = st.arena.alloc(&stream, stats_bytes, true)?;
        let parts = st.arena.alloc(&stream, parts_bytes, true)?;
        // Phase 1: every split's (max, sum) of each row; phase 2: the weighted values.
        let all = with(n_stats, 0, stats, 0);
        let name = kernels.stats;
        self.launch_with_shared(st, name, grid(n_stats), FLASH_THREADS, stats_shared, &all)?;
        let all = with(n_split, n_stats, stats, parts);
        let name = kernels.attention;
        self.launch_with_shared(st, name, grid(n_split), FLASH_THREADS, shared, &all)?;
        let combine = [Arg::P(parts), Arg::P(out.ptr), Arg::I(n_split as i32)];
        self.launch_elementwise(st, "flash_combine", &combine, out.len())?;
        // The next kernel that could be handed this memory waits for these before writing.
        st.arena.give_back(parts, parts_bytes);
        st.arena.give_back(stats, stats_bytes);
        Ok(())
    }

    /// The batch's new keys and values into their f16 cache slots (kernels/model.cu).
    #[allow(clippy::too_many_arguments)]
    fn launch_kv_write(
        &self,
        st: &mut State,
        k: &CudaTensor,
        v: &CudaTensor,
        (kc, vc): (u64, u64),
        (tok_seq, tok_pos, seq_table, tables): (u64, u64, u64, u64),
        kv_dim: usize,
        bs: i32,
    ) -> Result<(), BackendError> {
        let n = k.rows;
        Ok(self.launch(
            st,
            "kv_write",
            (n as u32, 1),
            256,
            &[
                Arg::P(k.ptr),
                Arg::P(v.ptr),
                Arg::P(kc),
                Arg::P(vc),
                Arg::P(tok_seq),
                Arg::P(tok_pos),
                Arg::P(seq_table),
                Arg::P(tables),
                Arg::I(kv_dim as i32),
                Arg::I(bs),
            ],
        )?)
    }
}

/// Queries of one sequence from which a step takes the flash-attention prompt kernel
/// (kernels/flash_prefill.cu); fewer go to the kernel that reads each key once per query.
const FLASH_MIN_QUERIES: usize = 16;
/// Batches of at most this many tokens get attention blocks of ATTN_WIDE_WARPS warps rather
/// than 4 (`wide_attention`); the kernels' ATTN_WIDE_WARPS must be the same (a test in
/// compile.rs checks).
const ATTN_FEW_TOKENS: usize = 4;
pub(crate) const ATTN_WIDE_WARPS: u32 = 32;
/// Fewest positions of a split (kernels/attention_split.cu ATTN_SPLIT_MIN) and most splits
/// of a head (ATTN_MAX_SPLITS there, at most a warp's lanes); no more splits than positions a
/// split keeps every split non-empty.
pub(crate) const ATTN_SPLIT_MIN: usize = 64;
pub(crate) const ATTN_MAX_SPLITS: usize = 16;
const _: () = assert!(ATTN_MAX_SPLITS <= ATTN_SPLIT_MIN && ATTN_MAX_SPLITS <= 32);
/// Threads of a block of the tensor-core split attention (kernels/attention_gqa.cu
/// GQA_WARPS warps), most query heads of its KV head (GQA_MAX_GROUP: an mma's 16 rows), most
/// splits of a head (GQA_MAX_SPLITS: a warp's lanes), positions of a tile (GQA_BK) and tiles
/// in flight (GQA_STAGES); a test in compile.rs checks the kernels agree.
pub(crate) const GQA_THREADS: u32 = 256;
pub(crate) const GQA_MAX_GROUP: usize = 16;
pub(crate) const GQA_MAX_SPLITS: usize = 32;
pub(crate) const GQA_BK: usize = 64;
pub(crate) const GQA_STAGES: usize = 4;
const _: () = assert!(GQA_MAX_SPLITS <= ATTN_SPLIT_MIN);

/// The values kernel's static shared memory (its weights, the head's max and sum, the staged
/// block table), at most this.
const GQA_STATIC_SHARED: u32 = 8 << 10;

/// Whether a block of `max_shared` bytes of shared memory holds the tensor-core split
/// attention's values kernel (the larger of the two) for a head size.
fn gqa_fits_shared(head_dim: usize, max_shared: u32) -> bool {
    gqa_shared_bytes(head_dim).1 + GQA_STATIC_SHARED <= max_shared
}

/// Dynamic shared memory of the tensor-core split attention's scores and values kernels:
/// GQA_STAGES tiles of GQA_BK keys or values with rows padded by 8 values, and for the values
/// kernel each stage's scores of GQA_MAX_GROUP heads (kernels/attention_gqa.cu).
fn gqa_shared_bytes(head_dim: usize) -> (u32, u32) {
    let tiles = GQA_STAGES * GQA_BK * (head_dim + 8) * 2;
    let scores = GQA_STAGES * GQA_MAX_GROUP * GQA_BK * 4;
    (tiles as u32, (tiles + scores) as u32)
}

/// Longest sequence (positions) from which few-token decode steps split their heads across
/// blocks, unless `HEARTH_CUDA_ATTN_SPLIT_FROM` says otherwise (`attention_splits`).
/// NOTE (H200, Qwen3-0.6B Q8_0, `scripts/device/binary_ab.sh`, two rounds): splitting every
/// step cost tg128 15% (928 / 943 against 1,065 / 1,119 tok/s: the second launch is one more
/// dependent kernel a layer); from 128 positions and from 512 measured alike after 512 tokens
/// of context (815 / 800 and 798 / 819 tok/s, one block a head 686 / 685).
pub(super) const ATTN_SPLIT_FROM: usize = 512;
/// How many blocks share each (query tile, head) of a prompt chunk's flash attention, its
/// (tile, head) pairs being `blocks`, `resident` blocks fitting the GPU at once, and its
/// longest span holding `by_keys` times `flash_split_keys` keys (splits need at least two
/// such runs). Each block walks every key of its span twice, so after thousands of cached
/// positions a 512-token chunk of Qwen3-0.6B's 128 unsplit blocks ran at 0.39x llama.cpp's
/// speed (H100, 8,192 positions before the chunk). Blocks of equal work run in rounds of
/// `resident`, and a part-filled last round costs nearly a full one, so the count taken is
/// the fewest whose rounds are at least FLASH_ROUNDS_FILLED full, else the fullest; each
/// split also adds partial results to write and add.
/// NOTE (H100, Qwen3-0.6B Q8_0, 128 pairs, 396 resident; pp512 tok/s, two rounds): after
/// 8,192 positions 3 splits gave 32,169 / 32,338, 4 28,439 / 28,695, 5 30,487 / 30,406, 6
/// 31,466 / 31,158 and 7 (two rounds' worth, the earlier rule) 23,279 / 28,896; after
/// 32,768, 11,300 / 11,231, 11,278 / 11,255, 9,627 / 9,720, 10,717 / 10,724 and 10,369 /
/// 10,386. Against the earlier rule in one call (`scripts/device/binary_ab.sh`): 0.6B after
/// 8,192 29,052 / 29,388 → 30,757 / 32,163, after 32,768 10,413 / 10,436 → 11,324 / 11,285;
/// Llama-3.1-8B Q4_K_M (256 pairs, 4 splits → 3) alike, 9,754 → 9,672 and 4,220 → 4,252.
fn flash_splits(blocks: usize, resident: usize, by_keys: usize) -> u32 {
    let most = by_keys.clamp(1, FLASH_MAX_SPLITS);
    if resident == 0 || blocks == 0 {
        return 1;
    }
    // How full the rounds of n splits are, in percent.
    let filled = |n: usize| blocks * n * 100 / ((blocks * n).div_ceil(resident) * resident);
    let fullest = (1..=most).rev().max_by_key(|&n| filled(n)).unwrap_or(1);
    (1..=most)
        .find(|&n| filled(n) >= FLASH_ROUNDS_FILLED)
        .unwrap_or(fullest) as u32
}
/// Percent of resident blocks busy that `flash_splits` settles for.
const FLASH_ROUNDS_FILLED: usize = 90;

/// Fewest keys a block of split prompt attention walks (`flash_splits`), unless
/// `HEARTH_CUDA_FLASH_SPLIT_KEYS` says otherwise.
/// NOTE (H100, Qwen3-0.6B Q8_0, pp512, before the kernel's copies were asynchronous, two
/// rounds): after 2,048 tokens 512 gave 43,978 / 44,176 tok/s and 1,024 45,306 / 45,195
/// (two splits, not five: one round of blocks); after 8,192 both 17,650-17,730.
pub(super) const FLASH_SPLIT_KEYS: usize = 1024;
/// Most blocks sharing one (tile, head).
const FLASH_MAX_SPLITS: usize = 16;
/// Query rows of one flash-attention block (4 warps of 16) and its threads.
const FLASH_ROWS: usize = 64;
const FLASH_THREADS: u32 = 128;

/// Dynamic shared memory of the flash kernel for a head size: two stages of a K and a V tile
/// of BK keys (64; 32 for 256-wide heads) with rows padded by 8 values (kernels/flash_prefill.cu
/// `flash_tile_words`).
/// NOTE: about 70 KB for 128-wide heads. GPUs with 100 KB of shared memory a multiprocessor
/// (sm_86, sm_89) then hold one block where the one-stage kernel's 35 KB let two; measured only
/// on H100s.
fn flash_shared_bytes(head_dim: usize) -> u32 {
    let keys = if head_dim > 128 { 32 } else { 64 };
    (2 * 2 * keys * (head_dim + 8) * 2) as u32
}

/// The flash-attention prompt kernels of one head size (kernels/flash_prefill.cu).
#[derive(Clone, Copy)]
struct FlashKernels {
    /// Both passes, or phase 2 of a split span.
    attention: &'static str,
    /// Phase 1 of a split span: each split's max and sum of every row.
    stats: &'static str,
}

/// The flash-attention prompt kernels for a head size: the mma's k is 16.
fn flash_prefill_kernel(head_dim: usize) -> Option<FlashKernels> {
    let (attention, stats) = match head_dim {
        16 => ("flash_prefill_hd16", "flash_stats_hd16"),
        32 => ("flash_prefill_hd32", "flash_stats_hd32"),
        64 => ("flash_prefill_hd64", "flash_stats_hd64"),
        96 => ("flash_prefill_hd96", "flash_stats_hd96"),
        128 => ("flash_prefill_hd128", "flash_stats_hd128"),
        256 => ("flash_prefill_hd256", "flash_stats_hd256"),
        _ => return None,
    };
    Some(FlashKernels { attention, stats })
}

/// The flash kernel's tiles: (sequence, first token row, query count) for every run of up to
/// FLASH_ROWS tokens of one sequence.
fn flash_tiles(batch: &AttnBatch) -> Vec<u32> {
    let mut tiles = Vec::new();
    for (i, s) in batch.seqs.iter().enumerate() {
        for start in (0..s.n_tokens).step_by(FLASH_ROWS) {
            let count = FLASH_ROWS.min(s.n_tokens - start);
            tiles.extend([i as u32, (s.token_start + start) as u32, count as u32]);
        }
    }
    tiles
}

/// The batch as the attention kernels read it (kernels/model.cu): token → sequence, token →
/// position, sequence → offset of its block table, then the tables, each in a slot of
/// `stride` entries (the cache's block count, which bounds any table). The fixed slots keep
/// the size of this data the same from one decode step to the next, as a replayed graph needs.
pub(super) fn batch_metadata(
    batch: &AttnBatch,
    n_tokens: usize,
    stride: usize,
) -> Result<Vec<u32>, BackendError> {
    let n_seqs = batch.seqs.len();
    let mut meta = vec![0u32; 2 * n_tokens + n_seqs + n_seqs * stride];
    for (i, s) in batch.seqs.iter().enumerate() {
        if s.token_start + s.n_tokens > n_tokens
            || (s.first_pos + s.n_tokens).div_ceil(batch.block_size) > s.block_table.len()
            || s.block_table.len() > stride
        {
            return Err(BackendError::Unsupported(format!(
                "sequence {i} of the batch does not fit its rows or block table"
            )));
        }
        for t in 0..s.n_tokens {
            meta[s.token_start + t] = i as u32;
            meta[n_tokens + s.token_start + t] = (s.first_pos + t) as u32;
        }
        meta[2 * n_tokens + i] = (i * stride) as u32;
        let start = 2 * n_tokens + n_seqs + i * stride;
        meta[start..start + s.block_table.len()].copy_from_slice(s.block_table);
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::{flash_splits, gqa_fits_shared};

    /// Hopper (227 KiB a block) and the A100 (163 KiB) take every head size; GPUs of 99 KiB
    /// (sm_86, sm_89, sm_120) keep the per-head kernels for 256-wide heads (Gemma).
    #[test]
    fn tensor_core_split_attention_runs_where_its_shared_memory_fits() {
        for hd in [64, 128, 256] {
            assert!(gqa_fits_shared(hd, 227 << 10), "{hd}");
            assert!(gqa_fits_shared(hd, 163 << 10), "{hd}");
        }
        assert!(gqa_fits_shared(128, 99 << 10));
        assert!(!gqa_fits_shared(256, 99 << 10));
    }

    #[test]
    fn flash_splits_fill_whole_rounds_with_the_fewest_splits() {
        // Qwen3-0.6B's 512-token chunk on an H100: 128 pairs, 396 resident blocks. Three
        // splits fill one round; four or seven would leave a part-filled one.
        assert_eq!(flash_splits(128, 396, 32), 3);
        // Spans too short for two runs of keys, or pairs that already fill the GPU.
        assert_eq!(flash_splits(128, 396, 1), 1);
        assert_eq!(flash_splits(396, 396, 32), 1);
        // Llama-3.1-8B's chunk: 256 pairs; 500 pairs fill 63% of two rounds unsplit, 84% of
        // three split in two and 95% of four split in three.
        assert_eq!(flash_splits(256, 396, 32), 3);
        assert_eq!(flash_splits(500, 396, 32), 3);
        // Too few keys for the full count: the fullest allowed (two, 65%, not one, 32%).
        assert_eq!(flash_splits(128, 396, 2), 2);
        // A kernel that does not fit never splits.
        assert_eq!(flash_splits(128, 0, 32), 1);
        // Never more than FLASH_MAX_SPLITS.
        assert!(flash_splits(1, 10_000, 1 << 20) <= super::FLASH_MAX_SPLITS as u32);
    }
}
