//! What comes back from the GPU at the end of a pass: a small tensor straight into the
//! vector, a large one (the logits of many sequences) through page-locked memory, and each
//! row's argmax instead of the row. Without a usable GPU the test prints "skipped: <reason>".

mod common;

use common::gpu;
use hearth_backend::Backend;
use rand::{Rng, SeedableRng};

#[test]
fn tensors_come_back_unchanged_and_argmax_rows_pick_the_samplers_ids() {
    let Some(be) = gpu() else { return };
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    // 600 KB (one row of a 152k vocabulary) and 9.7 MB (16 of them): both read-back paths,
    // twice each, so the second large one reuses the page-locked buffer.
    for rows in [1, 16, 16, 1] {
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
        let mut ids = vec![5; 2];
        be.argmax_rows(&t, &mut ids).expect("argmax");
        let want: Vec<u32> = host.chunks(cols).map(hearth_sampler::argmax).collect();
        assert_eq!(ids, want, "{rows} rows");
        assert!(ids.iter().all(|&i| i == 7));
    }
}
