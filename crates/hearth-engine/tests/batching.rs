//! Several sequences in one forward pass give what each gives alone: the model and the paged KV
//! cache keep sequences apart, whatever the mix of prompt chunks and decode steps in a batch.
//! The bound is zero: every per-row operation is computed the same way whatever else is in the
//! batch, so the logits are bit-identical.

mod common;

use common::{argmax, model_path, open_engine};
use hearth_engine::{Engine, SeqStep, Sequence};

/// Per sequence, the chunks it runs at each step (a chunk may be empty: it sits that step out).
type Plan = Vec<Vec<Vec<u32>>>;

/// Run `plan` with each sequence alone, then all together; return the logits of the last token
/// of every chunk, both ways.
fn alone_and_together(engine: &mut Engine, plan: &Plan) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let mut alone = Vec::new();
    for chunks in plan {
        let mut seq = Sequence::new();
        for c in chunks.iter().filter(|c| !c.is_empty()) {
            alone.push(engine.step(&mut seq, c).expect("step alone"));
        }
        engine.release(&mut seq);
    }
    let mut seqs: Vec<Sequence> = plan.iter().map(|_| Sequence::new()).collect();
    let n_steps = plan.iter().map(|c| c.len()).max().unwrap_or(0);
    let mut together: Vec<Vec<Vec<f32>>> = plan.iter().map(|_| Vec::new()).collect();
    for step in 0..n_steps {
        let mut work: Vec<SeqStep> = Vec::new();
        let mut owners = Vec::new();
        for (i, seq) in seqs.iter_mut().enumerate() {
            if let Some(chunk) = plan[i].get(step).filter(|c| !c.is_empty()) {
                work.push(SeqStep {
                    seq,
                    tokens: chunk,
                    logits_rows: vec![chunk.len() - 1],
                });
                owners.push(i);
            }
        }
        let out = engine.step_batch(&mut work).expect("batched step");
        for (i, logits) in owners.into_iter().zip(out) {
            together[i].push(logits);
        }
    }
    (alone, together.into_iter().flatten().collect())
}

fn check(model: &str, tolerance: f32) {
    let mut engine = open_engine(&model_path(model));
    let v = engine.n_vocab() as u32;
    let ids =
        |seed: u32, n: u32| -> Vec<u32> { (0..n).map(|i| (seed * 97 + i * 31) % v).collect() };
    // Three sequences: prompts of different lengths, one split in two chunks, decode steps
    // interleaved with another sequence's prefill, and one that joins late.
    let plan: Plan = vec![
        vec![ids(1, 7), vec![5], vec![9], vec![11]],
        vec![ids(2, 40), ids(3, 9), vec![4], vec![6]],
        vec![vec![], vec![], ids(4, 3), vec![8]],
    ];
    let (alone, together) = alone_and_together(&mut engine, &plan);
    assert_eq!(alone.len(), together.len());
    let mut worst = 0f32;
    for (a, t) in alone.iter().zip(&together) {
        assert_eq!(
            argmax(a),
            argmax(t),
            "{model}: the batch changed a greedy choice"
        );
        for (x, y) in a.iter().zip(t) {
            worst = worst.max((x - y).abs());
        }
    }
    eprintln!("{model}: worst |alone − batched| logit difference {worst}");
    assert!(
        worst <= tolerance,
        "{model}: batched logits differ by {worst} > {tolerance}"
    );
}

#[test]
fn tiny_qwen3_f16_batched_equals_alone() {
    check("tiny-qwen3-f16.gguf", 0.0);
}

#[test]
fn tiny_qwen3_q8_0_batched_equals_alone() {
    check("tiny-qwen3-q8_0.gguf", 0.0);
}

/// Sparse experts: tokens of one batch route to different experts, each expert runs once on
/// its rows, and every row still gets what it gets alone.
#[test]
fn tiny_mixtral_batched_equals_alone() {
    check("hf-tiny-mixtral", 0.0);
}

#[test]
fn tiny_qwen3_moe_q8_0_batched_equals_alone() {
    check("tiny-qwen3-moe-q8_0.gguf", 0.0);
}

#[test]
fn smollm2_batched_equals_alone() {
    check("SmolLM2-135M-Instruct.Q4_1.gguf", 0.0);
}

#[test]
fn gemma3_batched_equals_alone() {
    check("gemma-3-270m-q4_k_m.gguf", 0.0);
}
