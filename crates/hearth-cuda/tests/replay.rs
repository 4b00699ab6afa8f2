//! A replayed decode step launches its graph as soon as it has staged the host data its
//! recording staged, while the host walks the rest of the pass: the results must be the
//! step's own, pass after pass, and a replay that stages more than its recording must fail
//! with an error, not run the graph on a layout it does not have. A pass that goes on op by
//! op after its graph must not overwrite the replayed tensors. Without a usable GPU each test
//! prints "skipped: <reason>".

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

#[test]
fn tensors_made_after_a_replayed_graph_leave_its_tensors_alone() {
    let Some(be) = gpu() else { return };
    let mut rng = rand::rngs::StdRng::seed_from_u64(22);
    let n = 1024;
    // Seen, recorded, then replayed: each pass reads one result back (which ends its graph),
    // then makes new tensors op by op and reads everything back.
    for pass in 0..5 {
        let x: Vec<f32> = (0..n).map(|_| rng.gen_range(-4.0..4.0)).collect();
        be.begin_forward(Some(11));
        let mut a = be.upload(&x, 1, n).expect("upload");
        be.scale(&mut a, 2.0).expect("scale");
        let mut b = be.copy(&a).expect("copy");
        be.scale(&mut b, 3.0).expect("scale");
        let b_first = be.to_host(&b).expect("to host");
        let mut c = be.copy(&a).expect("copy after the graph");
        be.scale(&mut c, 5.0).expect("scale after the graph");
        let mut d = be.copy(&b).expect("copy after the graph");
        be.scale(&mut d, -1.0).expect("scale after the graph");
        let times = |k: f32| x.iter().map(|v| v * k).collect::<Vec<f32>>();
        assert_eq!(b_first, times(6.0), "pass {pass}: b");
        assert_eq!(
            be.to_host(&a).expect("to host"),
            times(2.0),
            "pass {pass}: a"
        );
        assert_eq!(
            be.to_host(&b).expect("to host"),
            times(6.0),
            "pass {pass}: b again"
        );
        assert_eq!(
            be.to_host(&c).expect("to host"),
            times(10.0),
            "pass {pass}: c"
        );
        assert_eq!(
            be.to_host(&d).expect("to host"),
            times(-6.0),
            "pass {pass}: d"
        );
    }
}
