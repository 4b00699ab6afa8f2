//! `hearth quantize` against references: the Q8_0 fixture that gguf-py quantized from the same
//! F16 weights, llama.cpp's own output for Q4_K_M (as a fingerprint), its type mix, and
//! llama.cpp's greedy tokens on the result; plus one clear error line for every bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hearth_gguf::{GgmlType, GgufFile, Value};
use hearth_tokenizer::Tokenizer;

fn hearth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .output()
        .expect("run hearth")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Quantizes the F16 fixture with `preset` into `dir`, asserting success.
fn quantize_fixture(dir: &Path, preset: &str) -> PathBuf {
    let out = dir.join(format!("tiny-qwen3-{preset}.gguf"));
    let run = hearth(&[
        "quantize",
        s(&fixture("tiny-qwen3-f16.gguf")),
        s(&out),
        preset,
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    out
}

/// The command failed with exactly one line on stderr that mentions `needle`.
fn assert_one_line_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure, stderr: {err}");
    assert_eq!(err.lines().count(), 1, "stderr is not one line: {err}");
    assert!(err.starts_with("hearth: "), "stderr: {err}");
    assert!(!err.contains("panicked"), "stderr: {err}");
    assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
}

/// FNV-1a of llama.cpp's Q3_K_M file for the F16 fixture.
const Q3_K_M_FINGERPRINT: u64 = 0x5062_d3b7_85bc_bee1;

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn q8_0_equals_the_fixture_gguf_py_quantized_from_the_same_weights() {
    let dir = tempfile::tempdir().unwrap();
    let ours = GgufFile::open(quantize_fixture(dir.path(), "Q8_0")).unwrap();
    let reference = GgufFile::open(fixture("tiny-qwen3-q8_0.gguf")).unwrap();
    assert_eq!(ours.tensors().len(), reference.tensors().len());
    for t in reference.tensors() {
        let o = ours
            .tensor(&t.name)
            .unwrap_or_else(|| panic!("{} missing", t.name));
        assert_eq!((o.ty, &o.dims), (t.ty, &t.dims), "{}", t.name);
        assert!(
            ours.tensor_data(o) == reference.tensor_data(t),
            "{}: bytes differ",
            t.name
        );
    }
    let meta = ours.metadata();
    assert_eq!(meta.get("general.file_type"), Some(&Value::U32(7)));
    assert_eq!(
        meta.get("general.quantization_version"),
        Some(&Value::U32(2))
    );
    // Everything else is copied from the input.
    let input = GgufFile::open(fixture("tiny-qwen3-f16.gguf")).unwrap();
    for (key, value) in input.metadata().iter() {
        if key != "general.file_type" {
            assert_eq!(meta.get(key), Some(value), "{key}");
        }
    }
}

#[test]
fn q8_0_result_generates_llama_cpp_greedy_tokens() {
    // tests/goldens/qwen3-tiny-q8_0/greedy.json, case 2: prompt ids 65..=84 (the text below)
    // and llama.cpp's first 8 greedy ids (top-2 gaps all above 0.2, so no near-ties).
    const GREEDY: [u32; 8] = [159, 18, 207, 66, 416, 296, 31, 207];
    let dir = tempfile::tempdir().unwrap();
    let model = quantize_fixture(dir.path(), "Q8_0");
    let tok = Tokenizer::from_gguf(GgufFile::open(&model).unwrap().metadata()).unwrap();
    let prompt = "ABCDEFGHIJKLMNOPQRST";
    assert_eq!(
        tok.encode(prompt, false).unwrap(),
        (65..=84).collect::<Vec<u32>>()
    );
    let out = hearth(&["run", s(&model), "--raw", "--temp", "0", "-n", "8", prompt]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), tok.decode(&GREEDY));
}

#[test]
fn q4_k_m_has_llama_cpp_mix_and_bytes_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = quantize_fixture(dir.path(), "Q4_K_M");
    // Fingerprint of llama.cpp's own Q4_K_M file for this input (llama-cpp-python 0.3.16,
    // scripts/check_quantize_llamacpp.py): the whole file, metadata and tensor order included.
    assert_eq!(fnv1a(&std::fs::read(&path).unwrap()), 0x1700_f636_075c_a871);
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(
        file.metadata().get("general.file_type"),
        Some(&Value::U32(15))
    );
    // Rows of 64 / 128 elements cannot hold Q4_K / Q6_K blocks, so llama.cpp falls back to
    // Q5_0 / Q8_0; the tied embedding and the use_more_bits layer (blk.1 of 2) get Q6_K -> Q8_0.
    for t in file.tensors() {
        let want = if t.dims.len() == 1 {
            GgmlType::F32
        } else if t.name == "token_embd.weight"
            || t.name == "blk.1.attn_v.weight"
            || t.name == "blk.1.ffn_down.weight"
        {
            GgmlType::Q8_0
        } else {
            GgmlType::Q5_0
        };
        assert_eq!(t.ty, want, "{}", t.name);
    }
    let out = hearth(&["run", s(&path), "--raw", "--temp", "0", "-n", "8", "hello"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.stdout.is_empty());
}

#[test]
fn prints_one_line_per_tensor_and_a_total() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("q4_0.gguf");
    let out = hearth(&[
        "quantize",
        s(&fixture("tiny-qwen3-f16.gguf")),
        s(&out_path),
        "q4_0",
        "--threads",
        "2",
    ]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 25, "{stdout}");
    let embd = lines
        .iter()
        .find(|l| l.contains("token_embd.weight"))
        .unwrap();
    // The tied embedding is the output matrix too: Q6_K, which falls back to Q8_0 for rows of 64.
    assert!(embd.contains("F16 -> Q8_0*"), "{embd}");
    assert!(
        lines[24].starts_with("Q4_0: 24 tensors, 15 quantized"),
        "{}",
        lines[24]
    );
}

#[test]
fn refuses_to_requantize_without_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.gguf");
    let q8 = fixture("tiny-qwen3-q8_0.gguf");
    let out = hearth(&["quantize", s(&q8), s(&out_path), "Q4_0"]);
    assert_one_line_error(&out, "--allow-requantize");
    assert!(!out_path.exists(), "a failed run leaves no output file");
    let out = hearth(&[
        "quantize",
        s(&q8),
        s(&out_path),
        "Q4_0",
        "--allow-requantize",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("less accurate"));
    let file = GgufFile::open(&out_path).unwrap();
    assert_eq!(
        file.tensor("blk.0.attn_q.weight").unwrap().ty,
        GgmlType::Q4_0
    );
}

#[test]
fn bad_inputs_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("tiny-qwen3-f16.gguf");
    let out = dir.path().join("out.gguf");
    let missing = dir.path().join("missing.gguf");
    assert_one_line_error(
        &hearth(&["quantize", s(&missing), s(&out), "Q8_0"]),
        "missing.gguf",
    );
    assert_one_line_error(
        &hearth(&["quantize", s(&input), s(&out), "Q9_9"]),
        "unknown quantization type 'Q9_9'",
    );
    assert_one_line_error(
        &hearth(&["quantize", s(&input), s(&input), "Q8_0"]),
        "is the input file",
    );
    let unwritable = dir.path().join("no-such-dir/out.gguf");
    assert_one_line_error(
        &hearth(&["quantize", s(&input), s(&unwritable), "Q8_0"]),
        "cannot write output file",
    );
    let not_gguf = dir.path().join("not.gguf");
    std::fs::write(&not_gguf, b"hello").unwrap();
    assert_one_line_error(
        &hearth(&["quantize", s(&not_gguf), s(&out), "Q8_0"]),
        "not.gguf",
    );
}

#[test]
fn q3_k_m_falls_back_to_iq4_nl() {
    // Q3_K needs 256-element rows; for rows of 64 llama.cpp falls back to IQ4_NL (Q5_K / Q4_K
    // to Q5_1 / Q5_0 for the bumped attn_v / attn_output / ffn_down). The whole file is
    // llama.cpp's, byte for byte (fingerprint from scripts/check_quantize_llamacpp.py).
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("q3km.gguf");
    let input = fixture("tiny-qwen3-f16.gguf");
    let out = hearth(&["quantize", s(&input), s(&out_path), "Q3_K_M"]);
    assert!(out.status.success());
    // hearth runs IQ4_NL, so the fallback is no reason for a warning.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
    let file = GgufFile::open(&out_path).unwrap();
    assert_eq!(
        file.tensor("blk.0.attn_q.weight").unwrap().ty,
        GgmlType::IQ4_NL
    );
    assert_eq!(
        file.tensor("blk.0.attn_v.weight").unwrap().ty,
        GgmlType::Q5_1
    );
    assert_eq!(
        fnv1a(&std::fs::read(&out_path).unwrap()),
        Q3_K_M_FINGERPRINT
    );
}

#[test]
fn q3_k_m_result_generates_llama_cpp_greedy_tokens() {
    // Its attention and FFN matrices are IQ4_NL (see above). The file equals llama.cpp's
    // byte for byte, and llama-cpp-python 0.3.16 run greedily on it from prompt ids 65..=84
    // gives these 8 ids, with top-2 logit gaps of at least 0.3 (no near-ties).
    const GREEDY: [u32; 8] = [159, 18, 358, 386, 386, 386, 386, 386];
    let dir = tempfile::tempdir().unwrap();
    let model = quantize_fixture(dir.path(), "Q3_K_M");
    let file = GgufFile::open(&model).unwrap();
    assert_eq!(
        file.tensor("blk.1.ffn_up.weight").unwrap().ty,
        GgmlType::IQ4_NL
    );
    let tok = Tokenizer::from_gguf(file.metadata()).unwrap();
    let prompt = "ABCDEFGHIJKLMNOPQRST";
    assert_eq!(
        tok.encode(prompt, false).unwrap(),
        (65..=84).collect::<Vec<u32>>()
    );
    let out = hearth(&["run", s(&model), "--raw", "--temp", "0", "-n", "8", prompt]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), tok.decode(&GREEDY));
}
