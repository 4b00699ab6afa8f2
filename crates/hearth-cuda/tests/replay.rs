//! A replayed decode step launches its graph as soon as it has staged the host data its
//! recording staged, while the host walks the rest of the pass: the results must be the
//! step's own, pass after pass, and a replay that stages more than its recording must fail
//! with an error, not run the graph on a layout it does not have. Without a usable GPU each
//! test prints "skipped: <reason>".

mod common;

use common::gpu;
use hearth_backend::Backend;
use hearth_cuda::CudaBackend;
use rand::{Rng, SeedableRng};

/// `(x + y) * 3` for two uploaded rows, the second staged after the pass's first ops.
fn add_then_scale(be: &CudaBackend, key: Option<u64>, x: &[f32], y: &[f32]) -> Vec<f32> {
    be.begin_forward(key);
    let mut a = be.upload(x, 1, x.len()).expect("upload x");
    be.scale(&mut a, 1.0).expect("scale");
    let b = be.upload(y, 1, y.len()).expect("upload y");
    be.add(&mut a, &b).expect("add");
    // Tensors made and used after the last staged array: their addresses come from the
    // recording while its graph may already run.
    let mut s = be.copy(&a).expect("copy");
    be.scale(&mut s, 3.0).expect("scale");
    be.to_host(&s).expect("to host")
}

#[test]
fn replayed_steps_give_their_own_results() {
    let Some(be) = gpu() else { return };
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let n = 4096;
    // Seen, recorded, then replayed: new values every pass.
    for pass in 0..6 {
        let x: Vec<f32> = (0..n).map(|_| rng.gen_range(-4.0..4.0)).collect();
        let y: Vec<f32> = (0..n).map(|_| rng.gen_range(-4.0..4.0)).collect();
        let got = add_then_scale(&be, Some(7), &x, &y);
        let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| (a + b) * 3.0).collect();
        assert_eq!(got, want, "pass {pass}");
    }
}

#[test]
fn a_replay_staging_more_than_its_recording_is_an_error() {
    let Some(be) = gpu() else { return };
    let x = vec![1.0f32; 256];
    for _ in 0..3 {
        be.begin_forward(Some(9));
        let t = be.upload(&x, 1, x.len()).expect("upload");
        assert_eq!(be.to_host(&t).expect("to host"), x);
    }
    be.begin_forward(Some(9));
    let longer = vec![2.0f32; 512];
    let err = be
        .upload(&longer, 1, longer.len())
        .expect_err("a larger upload in a replay");
    assert!(err.to_string().contains("recording"), "{err}");
    // The next pass runs as usual.
    be.begin_forward(None);
    let t = be.upload(&longer, 1, longer.len()).expect("upload");
    assert_eq!(be.to_host(&t).expect("to host"), longer);
}
