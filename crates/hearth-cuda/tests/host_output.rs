//! A pass whose logits come back may have the output GEMV write them straight into the
//! caller's page-locked memory (`Backend::begin_forward_to_host`, `matmul_to_host`). What
//! lands there must be, bit for bit, what a matmul into device memory and a copy back give:
//! op by op, recorded and replayed, for one and several tokens, for every int8 GEMV type, and
//! when a replayed step is handed other memory than its recording wrote. Shapes that the
//! direct path does not take (rows not in whole GEMV blocks, other types) must come back the
//! same way. Without a usable GPU each test prints "skipped: <reason>".

mod common;

use common::{assert_same_bits, gpu, random_host_weight};
use hearth_backend::{Backend, HostValues};
use hearth_cuda::CudaBackend;
use hearth_quant::GgmlType;
use rand::{Rng, SeedableRng};

type Weight = <CudaBackend as Backend>::Weight;

/// Held by each test: the tests' backends share the GPU's context, and page-locked memory
/// made or freed by one while another records a graph would spoil that recording.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// `w · x` (`rows` outputs) by the plain path: into device memory, then copied back.
fn copied_back(be: &CudaBackend, w: &Weight, x: &[f32], tokens: usize, rows: usize) -> Vec<f32> {
    be.begin_forward(None);
    let xt = be.upload(x, tokens, x.len() / tokens).expect("upload");
    let mut y = be.alloc(tokens, rows).expect("alloc");
    be.matmul(w, &xt, &mut y).expect("matmul");
    be.to_host(&y).expect("to host")
}

/// The same product as the last op of a pass begun for `out`, replay key `key`; the input
/// goes through a scale first so that the product reads a tensor the pass made.
fn to_host(
    be: &CudaBackend,
    key: Option<u64>,
    w: &Weight,
    x: &[f32],
    (tokens, rows): (usize, usize),
    out: &mut HostValues,
) {
    be.begin_forward_to_host(key, out, tokens * rows)
        .expect("begin");
    let mut xt = be.upload(x, tokens, x.len() / tokens).expect("upload");
    be.scale(&mut xt, 1.0).expect("scale");
    be.matmul_to_host(w, &xt, rows, out)
        .expect("matmul to host");
}

#[test]
fn products_written_to_the_host_equal_products_copied_back() {
    let _serial = one_at_a_time();
    let Some(be) = gpu() else { return };
    let mut rng = rand::rngs::StdRng::seed_from_u64(31);
    let cols = 1024;
    let mut key = 100;
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q4_0,
    ] {
        for (rows, direct) in [(32_768, true), (4_100, false)] {
            let w = be
                .load_weight(random_host_weight(ty, rows, cols, &mut rng))
                .expect("load");
            for tokens in [1, 3] {
                key += 1;
                let what = format!("{ty:?}, {rows} rows, {tokens} tokens");
                // Kept from pass to pass, as the engine keeps its logits.
                let mut out = HostValues::new();
                let written = be.host_outputs();
                let queued = be.steps_queued_ahead();
                // Op by op (the key's first pass), recorded, then replayed.
                for pass in 0..5 {
                    let x: Vec<f32> = (0..tokens * cols)
                        .map(|_| rng.gen_range(-2.0..2.0))
                        .collect();
                    to_host(&be, Some(key), &w, &x, (tokens, rows), &mut out);
                    let want = copied_back(&be, &w, &x, tokens, rows);
                    assert_same_bits(&out, &want, &format!("{what}, pass {pass}"));
                }
                let direct_passes = be.host_outputs() - written;
                assert_eq!(direct_passes, if direct { 5 } else { 0 }, "{what}");
                // Recorded and replayed steps whose GEMV writes the host are queued again
                // ahead of the next pass (here each is called off by the pass that checks
                // it); a step whose product is copied after it never is: that copy would
                // wait for the next pass.
                let ahead = be.steps_queued_ahead() - queued;
                assert_eq!(
                    ahead,
                    if direct { 4 } else { 0 },
                    "{what}: steps queued ahead"
                );
            }
        }
    }
}

#[test]
fn a_replayed_step_handed_other_memory_writes_that_memory() {
    let _serial = one_at_a_time();
    let Some(be) = gpu() else { return };
    let mut rng = rand::rngs::StdRng::seed_from_u64(32);
    let (rows, cols) = (8_192, 512);
    let w = be
        .load_weight(random_host_weight(GgmlType::Q8_0, rows, cols, &mut rng))
        .expect("load");
    let mut first = HostValues::new();
    let mut second = HostValues::new();
    // The first memory's recording replays; then the second's passes (its first runs op by
    // op, dropping the recording that writes the first memory), then the first's again.
    let order = [0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0];
    for (pass, &which) in order.iter().enumerate() {
        let x: Vec<f32> = (0..cols).map(|_| rng.gen_range(-2.0..2.0)).collect();
        let out = if which == 0 { &mut first } else { &mut second };
        to_host(&be, Some(7), &w, &x, (1, rows), out);
        let want = copied_back(&be, &w, &x, 1, rows);
        assert_same_bits(out, &want, &format!("pass {pass}, memory {which}"));
    }
    // The other memory still holds its last pass's values: nothing else wrote it.
    let x: Vec<f32> = (0..cols).map(|_| rng.gen_range(-2.0..2.0)).collect();
    let before = second.to_vec();
    to_host(&be, Some(7), &w, &x, (1, rows), &mut first);
    assert_same_bits(&second, &before, "the memory not handed to the pass");
}

#[test]
fn without_the_direct_path_the_product_is_copied_back() {
    let _serial = one_at_a_time();
    let Some(be) = gpu() else { return };
    let be = be.with_host_output(false);
    let mut rng = rand::rngs::StdRng::seed_from_u64(33);
    let (rows, cols) = (4_096, 1_024);
    let w = be
        .load_weight(random_host_weight(GgmlType::Q8_0, rows, cols, &mut rng))
        .expect("load");
    let mut out = HostValues::new();
    for pass in 0..4 {
        let x: Vec<f32> = (0..cols).map(|_| rng.gen_range(-2.0..2.0)).collect();
        to_host(&be, Some(3), &w, &x, (1, rows), &mut out);
        let want = copied_back(&be, &w, &x, 1, rows);
        assert_same_bits(&out, &want, &format!("pass {pass}"));
    }
    assert_eq!(be.host_outputs(), 0);
}

/// Passes of one key into the same memory, one after another with nothing between them: from
/// the third on, each releases the step its predecessor queued ahead (`step_gate.rs`), and
/// each must land its own product. The products are compared only after the last pass, so
/// that no other pass calls a queued step off.
fn consecutive_passes(be: &CudaBackend, seed: u64, pause: std::time::Duration) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (rows, cols) = (16_384, 1_024);
    let w = be
        .load_weight(random_host_weight(GgmlType::Q8_0, rows, cols, &mut rng))
        .expect("load");
    let mut out = HostValues::new();
    let mut inputs = Vec::new();
    let mut landed = Vec::new();
    for _ in 0..8 {
        let x: Vec<f32> = (0..cols).map(|_| rng.gen_range(-2.0..2.0)).collect();
        to_host(be, Some(11), &w, &x, (1, rows), &mut out);
        landed.push(out.to_vec());
        inputs.push(x);
        std::thread::sleep(pause);
    }
    for (pass, (x, got)) in inputs.iter().zip(&landed).enumerate() {
        let want = copied_back(be, &w, x, 1, rows);
        assert_same_bits(got, &want, &format!("pass {pass}"));
    }
}

#[test]
fn consecutive_passes_release_the_steps_queued_ahead() {
    let _serial = one_at_a_time();
    let Some(be) = gpu() else { return };
    let released = be.steps_released_ahead();
    consecutive_passes(&be, 34, std::time::Duration::ZERO);
    // Pass 0 runs op by op, pass 1 is recorded and queues pass 2's step, and so on.
    assert_eq!(be.steps_released_ahead() - released, 6);
    assert_eq!(be.steps_sent_again(), 0);
}

#[test]
fn a_step_whose_gate_gave_up_waiting_is_sent_again() {
    let _serial = one_at_a_time();
    let Some(be) = gpu() else { return };
    // Gates that give up at once: every step queued ahead runs again on the data before,
    // well before its pass (a millisecond after the one before) releases it.
    let be = be.with_gate_timeout(std::time::Duration::ZERO);
    consecutive_passes(&be, 35, std::time::Duration::from_millis(2));
    assert_eq!(be.steps_sent_again(), 6);
}

#[test]
fn without_steps_ahead_the_passes_land_the_same() {
    let _serial = one_at_a_time();
    let Some(be) = gpu() else { return };
    let be = be.with_steps_ahead(false);
    consecutive_passes(&be, 36, std::time::Duration::ZERO);
    assert_eq!(be.steps_released_ahead(), 0);
}
