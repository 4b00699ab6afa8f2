//! Sampling's top-k stage on the device: the k best values of each row in the sampler's order
//! (higher value, then lower index; NaN as -inf; +0 before -0), against a full sort on the CPU,
//! with ties across the k-th place, rows of one repeated value, and a real vocabulary's width.

mod common;

use common::*;
use hearth_backend::Backend;
use hearth_sampler::{Candidate, Candidates};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn exact_best(values: &[f32], cols: usize, k: usize) -> Vec<Candidate> {
    let mut out = Vec::new();
    for row in values.chunks(cols) {
        let mut all = Candidates::new();
        all.fill(row);
        all.sort_prefix(k);
        all.truncate(k);
        out.extend_from_slice(all.as_slice());
    }
    out
}

fn bits(c: &[Candidate]) -> Vec<(u32, u32)> {
    c.iter().map(|c| (c.id, c.logit.to_bits())).collect()
}

#[test]
fn top_k_rows_select_what_the_sampler_selects() {
    let Some(be) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(11);
    for (rows, cols) in [(3, 7), (4, 300), (2, 5000), (3, 151_936)] {
        // Quarter steps: many ties, also at the k-th place.
        let mut host: Vec<f32> = (0..rows * cols)
            .map(|_| (rng.gen_range(-16.0f32..16.0) * 4.0).round() / 4.0)
            .collect();
        host[3 % cols] = f32::NAN;
        host[5 % cols] = f32::INFINITY;
        host[cols + 1] = 0.0;
        host[cols + 2] = -0.0;
        if rows > 2 {
            host[2 * cols..3 * cols].fill(-0.0);
        }
        let t = be.upload(&host, rows, cols).expect("upload");
        for k in [1, 2, 5, 40, 128] {
            let k = k.min(cols);
            let mut got = vec![Candidate { id: 9, logit: 9.0 }]; // replaced, not appended to
            be.top_k_rows(&t, k, &mut got).expect("top k");
            let want = exact_best(&host, cols, k);
            assert_eq!(bits(&got), bits(&want), "{rows} rows of {cols}, k {k}");
        }
    }
    // k beyond the kernel's arrays: selected on the host, same answer.
    let host: Vec<f32> = (0..400).map(|i| ((i * 37) % 101) as f32).collect();
    let t = be.upload(&host, 2, 200).expect("upload");
    let mut got = Vec::new();
    be.top_k_rows(&t, 150, &mut got).expect("top k");
    assert_eq!(bits(&got), bits(&exact_best(&host, 200, 150)));
    assert!(be.top_k_rows(&t, 0, &mut got).is_err(), "k 0");
    assert!(be.top_k_rows(&t, 201, &mut got).is_err(), "k past the row");
}
