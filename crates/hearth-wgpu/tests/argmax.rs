//! Greedy decoding's argmax on the device: the CPU sampler's index for every row, by its
//! rules (ties to the lower index, NaN never wins, 0 for a row of only NaN), across the parts
//! the first pass splits a row into.

mod common;

use common::*;
use hearth_backend::Backend;
use rand::{rngs::StdRng, Rng, SeedableRng};

const INF: f32 = f32::INFINITY;
const NAN: f32 = f32::NAN;

/// Rows of `cols` values (at least 8) and the index each must give, written out by hand.
fn rule_rows(cols: usize, rng: &mut StdRng) -> Vec<(Vec<f32>, u32)> {
    let last = cols - 1;
    let noise =
        |rng: &mut StdRng| -> Vec<f32> { (0..cols).map(|_| rng.gen_range(-8.0..8.0)).collect() };
    let mut rows = Vec::new();
    // A tie between the last value and one early on (in another part when the row has
    // several): the lower index wins.
    let mut r = noise(rng);
    r[3] = 9.5;
    r[last] = 9.5;
    rows.push((r, 3));
    // NaN everywhere but two values.
    let mut r = vec![NAN; cols];
    r[last] = -1.0;
    r[5] = -2.0;
    rows.push((r, last as u32));
    rows.push((vec![NAN; cols], 0));
    rows.push((vec![-INF; cols], 0));
    let mut r = vec![-INF; cols];
    r[0] = NAN;
    rows.push((r, 1));
    let mut r = noise(rng);
    r[last / 2] = INF;
    r[last] = INF;
    rows.push((r, (last / 2) as u32));
    // -0 and +0 are equal: the lower index wins whichever sign it has.
    let mut r: Vec<f32> = (0..cols).map(|_| rng.gen_range(-8.0..-1.0)).collect();
    r[last] = 0.0;
    r[6] = -0.0;
    rows.push((r, 6));
    // Subnormals and the most negative value.
    let mut r = vec![f32::MIN; cols];
    r[2] = -1e-45;
    r[last] = 1e-45;
    rows.push((r, last as u32));
    rows
}

fn check(g: &impl Backend, rows: &[Vec<f32>], cols: usize, what: &str) {
    let flat: Vec<f32> = rows.concat();
    let t = g.upload(&flat, rows.len(), cols).expect("upload");
    let mut got = vec![7; 3]; // replaced, not appended to
    g.argmax_rows(&t, &mut got).expect("argmax");
    let want: Vec<u32> = rows.iter().map(|r| hearth_sampler::argmax(r)).collect();
    assert_eq!(got, want, "{what}");
}

#[test]
fn argmax_follows_the_samplers_rules() {
    let Some(g) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(11);
    // One part, a partial last part, several parts, a 152k vocabulary.
    for cols in [8, 2047, 2048, 5000, 151_936] {
        let (rows, want): (Vec<Vec<f32>>, Vec<u32>) = rule_rows(cols, &mut rng).into_iter().unzip();
        let got: Vec<u32> = rows.iter().map(|r| hearth_sampler::argmax(r)).collect();
        assert_eq!(
            got, want,
            "{cols} columns: the hand-written answers are the sampler's"
        );
        check(&g, &rows, cols, &format!("{cols} columns"));
    }
}

#[test]
fn argmax_of_many_random_rows() {
    let Some(g) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(12);
    for (n_rows, cols) in [(300, 333), (17, 4099), (1, 1)] {
        let rows: Vec<Vec<f32>> = (0..n_rows).map(|_| random(&mut rng, cols)).collect();
        check(&g, &rows, cols, &format!("{n_rows} rows of {cols}"));
    }
}

#[test]
fn argmax_of_no_rows_is_empty() {
    let Some(g) = gpu() else { return };
    let t = g.alloc(0, 10).expect("alloc");
    let mut got = vec![1, 2];
    g.argmax_rows(&t, &mut got).expect("argmax");
    assert!(got.is_empty());
}
