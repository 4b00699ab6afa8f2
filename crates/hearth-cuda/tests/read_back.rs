//! What comes back from the GPU at the end of a pass: a small tensor straight into the
//! vector, a large one (the logits of many sequences) through page-locked memory, logits
//! into the page-locked memory the caller keeps, and each row's argmax instead of the row.
//! Without a usable GPU the test prints "skipped: <reason>".

mod common;

use common::gpu;
use hearth_backend::Backend;
use rand::{Rng, SeedableRng};

#[test]
fn tensors_come_back_unchanged_and_argmax_rows_pick_the_samplers_ids() {
    let Some(be) = gpu() else { return };
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    // 600 KB (one row of a 152k vocabulary), 9.7 MB (16 of them: 10 chunks, the last one
    // short) and 39 MB (64): both read-back paths, the large one growing its page-locked
    // buffer and chunk events, then reusing them.
    // Kept across the rows, as the engine keeps its logits: page-locked memory made at the
    // first read-back, again when 16 rows outgrow it, then reused.
    let mut values = hearth_backend::HostValues::new();
    for rows in [1, 16, 64, 16, 1] {
        let cols = 151_936;
        let mut host: Vec<f32> = (0..rows * cols)
            .map(|_| rng.gen_range(-30.0..30.0))
            .collect();
        // A tie at the row's maximum, the lower index must win.
        for r in 0..rows {
            host[r * cols + 7] = 99.0;
            host[r * cols + cols - 1 - r] = 99.0;
        }
        be.begin_forward(None);
        let t = be.upload(&host, rows, cols).expect("upload");
        let mut back = vec![1.0; 3]; // replaced, not appended to
        be.to_host_into(&t, &mut back).expect("read back");
        assert!(back == host, "{rows} rows came back changed");
        be.to_host_values(&t, &mut values).expect("read back");
        assert!(
            values[..] == host[..],
            "{rows} rows came back changed into HostValues"
        );
        let mut ids = vec![5; 2];
        be.argmax_rows(&t, &mut ids).expect("argmax");
        let want: Vec<u32> = host.chunks(cols).map(hearth_sampler::argmax).collect();
        assert_eq!(ids, want, "{rows} rows");
        assert!(ids.iter().all(|&i| i == 7));
    }
}

/// Each row's argmax on the device against the sampler's, over widths that take one block and
/// widths cut into chunks (a short last chunk, rows not of whole float4s): NaN never wins,
/// -inf wins only where nothing else is there, ties (across chunks too) go to the lower index,
/// and a row of only NaN gives 0.
#[test]
fn argmax_rows_over_chunks_pick_the_samplers_ids() {
    let Some(be) = gpu() else { return };
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for cols in [7, 4095, 4096, 4097, 8192, 151_936, 262_147] {
        let rows = 6;
        let mut host: Vec<f32> = (0..rows * cols)
            .map(|_| (rng.gen_range(-16.0f32..16.0) * 4.0).round() / 4.0)
            .collect();
        let row = |r: usize| r * cols..(r + 1) * cols;
        // Row 0: NaN at the front and the maximum tied at the first and last index.
        host[row(0)].fill(1.0);
        host[0] = f32::NAN;
        host[1] = 2.0;
        host[cols - 1] = 2.0;
        // Row 1: only NaN. Row 2: NaN and -inf (the first -inf wins).
        host[row(1)].fill(f32::NAN);
        host[row(2)].fill(f32::NAN);
        host[2 * cols + cols / 2] = f32::NEG_INFINITY;
        host[2 * cols + cols - 1] = f32::NEG_INFINITY;
        // Row 3: one value everywhere (the first index wins). Row 4: +inf in the last chunk.
        host[row(3)].fill(-0.5);
        host[4 * cols + cols - 2] = f32::INFINITY;
        be.begin_forward(None);
        let t = be.upload(&host, rows, cols).expect("upload");
        let mut ids = Vec::new();
        be.argmax_rows(&t, &mut ids).expect("argmax");
        let want: Vec<u32> = host.chunks(cols).map(hearth_sampler::argmax).collect();
        assert_eq!(ids, want, "rows of {cols}");
        assert_eq!(&ids[..4], &[1, 0, cols as u32 / 2, 0], "rows of {cols}");
    }
}

/// The k best of each row, selected on the device, against the sampler's own selection:
/// ties at the k-th place (the lower ids must win), NaN (as -inf), infinities, both zeros
/// (+0 before -0), rows shorter than k's block, k from 1 to the kernel's largest, and rows
/// of real vocabularies' widths (cut into chunks for most k, one block a row for the largest).
#[test]
fn top_k_rows_select_what_the_sampler_selects() {
    let Some(be) = gpu() else { return };
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    for (rows, cols) in [(3, 7), (4, 200), (2, 5000), (3, 151_936), (3, 262_144)] {
        let mut host: Vec<f32> = (0..rows * cols)
            .map(|_| (rng.gen_range(-16.0f32..16.0) * 4.0).round() / 4.0)
            .collect();
        let row = |r: usize, c: usize| r * cols + c % cols;
        host[row(0, 3)] = f32::NAN;
        host[row(0, 5)] = f32::INFINITY;
        host[row(1, 1)] = 0.0;
        host[row(1, 2)] = -0.0;
        if rows > 2 {
            // A row of one value: every pick is a tie.
            host[row(2, 0)..row(2, 0) + cols].fill(-0.0);
        }
        be.begin_forward(None);
        let t = be.upload(&host, rows, cols).expect("upload");
        for k in [1, 2, 5, 40, 100, 128] {
            let k = k.min(cols);
            let mut got = Vec::new();
            be.top_k_rows(&t, k, &mut got).expect("top k");
            let mut want = Vec::new();
            // The exact order: a full sort, not the sampler's fast path.
            for r in host.chunks(cols) {
                let mut all = hearth_sampler::Candidates::new();
                all.fill(r);
                all.sort_prefix(k);
                all.truncate(k);
                want.extend_from_slice(all.as_slice());
            }
            let bits = |c: &[hearth_sampler::Candidate]| -> Vec<(u32, u32)> {
                c.iter().map(|c| (c.id, c.logit.to_bits())).collect()
            };
            assert_eq!(bits(&got), bits(&want), "{rows} rows of {cols}, k {k}");
            let mut sampler_view = Vec::new();
            hearth_sampler::best_of_rows(&host, cols, k, &mut sampler_view);
            assert_eq!(
                bits(&sampler_view),
                bits(&want),
                "best_of_rows, {cols} k {k}"
            );
        }
    }
}
