//! Int8 GEMVs whose rows fit one shared-memory window whole (the output matrix of a small
//! model) take four rows a warp (kernels/gemv_q8a.cu `gemv_rows4_q8a`). Each row's arithmetic
//! is that of the kernels that take two, so the products must be the same bits: stored, added
//! to rows, and written to page-locked host memory, for one and several tokens, with rows that
//! do not fill the last block, and with rows past one window (which the host hands to the
//! two-row kernels). Without a usable GPU each test prints "skipped: <reason>".

mod common;

use common::{assert_same_bits, gpu, random_host_weight};
use hearth_backend::{Backend, HostValues};
use hearth_cuda::CudaBackend;
use hearth_quant::GgmlType;
use rand::{Rng, SeedableRng};

type Weight = <CudaBackend as Backend>::Weight;

fn random_values(n: usize, rng: &mut impl Rng) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-2.0..2.0)).collect()
}

/// `w · x` (`rows` outputs) for `tokens` rows of x, stored (`base` None) or added to `base`.
fn product(
    be: &CudaBackend,
    w: &Weight,
    x: &[f32],
    (tokens, rows): (usize, usize),
    base: Option<&[f32]>,
) -> Vec<f32> {
    be.begin_forward(None);
    let xt = be.upload(x, tokens, x.len() / tokens).expect("upload");
    let mut y = match base {
        Some(b) => be.upload(b, tokens, rows).expect("upload"),
        None => be.alloc(tokens, rows).expect("alloc"),
    };
    match base {
        Some(_) => be.matmul_add(w, &xt, &mut y).expect("matmul add"),
        None => be.matmul(w, &xt, &mut y).expect("matmul"),
    }
    be.to_host(&y).expect("to host")
}

/// The same product as the last op of a pass whose output comes back to page-locked memory
/// (the input through a scale first, so that the product reads a tensor the pass made).
fn product_to_host(
    be: &CudaBackend,
    w: &Weight,
    x: &[f32],
    (tokens, rows): (usize, usize),
) -> Vec<f32> {
    let mut out = HostValues::new();
    be.begin_forward_to_host(None, &mut out, tokens * rows)
        .expect("begin");
    let mut xt = be.upload(x, tokens, x.len() / tokens).expect("upload");
    be.scale(&mut xt, 1.0).expect("scale");
    be.matmul_to_host(w, &xt, rows, &mut out)
        .expect("matmul to host");
    out.to_vec()
}

#[test]
fn four_rows_a_warp_give_the_bits_of_two() {
    let Some(four) = gpu() else { return };
    // Blocks quantizing their own activations (small shapes, `with_own_q8_bytes`) would take
    // these products past the kernels compared here.
    let four = four.with_rows4(true).with_own_q8_bytes(0);
    let two = CudaBackend::open(0)
        .expect("a second backend")
        .with_rows4(false)
        .with_own_q8_bytes(0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    // (rows, columns, whether the rows fit one window of the type: Q8_0, Q4_0, Q6_K).
    let shapes = [
        (4_100, 1_024, [true, true, true]),
        (1_008, 256, [true, true, true]),
        (1_000, 1_024, [true, true, true]),
        (4_096, 2_048, [false, true, false]),
        (2_048, 2_560, [false, true, false]),
    ];
    for (t, ty) in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q6_K]
        .into_iter()
        .enumerate()
    {
        for &(rows, cols, fits) in &shapes {
            let host = random_host_weight(ty, rows, cols, &mut rng);
            let w4 = four.load_weight(host.clone()).expect("load");
            let w2 = two.load_weight(host).expect("load");
            for tokens in [1, 3] {
                let what = format!("{ty:?}, {rows} x {cols}, {tokens} tokens");
                let x = random_values(tokens * cols, &mut rng);
                let base = random_values(tokens * rows, &mut rng);
                let launches = four.rows4_launches();
                for add in [None, Some(base.as_slice())] {
                    let got = product(&four, &w4, &x, (tokens, rows), add);
                    let want = product(&two, &w2, &x, (tokens, rows), add);
                    assert_same_bits(&got, &want, &format!("{what}, added: {}", add.is_some()));
                }
                let got = product_to_host(&four, &w4, &x, (tokens, rows));
                let want = product_to_host(&two, &w2, &x, (tokens, rows));
                assert_same_bits(&got, &want, &format!("{what}, to the host"));
                // Stored and added; to the host stored in whole blocks of 16 rows, or multiplied
                // into device memory and copied where the rows are not in whole blocks of 8
                // (the two-row kernels store blocks of 8 straight to the host).
                let to_host = rows.is_multiple_of(16) || !rows.is_multiple_of(8);
                let expected = if fits[t] { 2 + to_host as usize } else { 0 };
                assert_eq!(
                    four.rows4_launches() - launches,
                    expected,
                    "{what}: launches"
                );
            }
        }
    }
    assert_eq!(two.rows4_launches(), 0);
}
