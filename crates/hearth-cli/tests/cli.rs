//! The `hearth` binary as a user meets it: exact output formats, and one clear line on stderr
//! (never a panic or a backtrace) for every kind of bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hearth_gguf::{GgmlType, GgufWriter, Value};

fn hearth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .output()
        .expect("run hearth")
}

fn models_dir() -> PathBuf {
    match std::env::var_os("HEARTH_TEST_MODELS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/hearth-test-models"),
    }
}

fn smollm2() -> PathBuf {
    let p = models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        p.display()
    );
    p
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The command failed with exactly one line on stderr that mentions `needle`.
fn assert_one_line_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure, stderr: {err}");
    assert_eq!(err.lines().count(), 1, "stderr is not one line: {err}");
    assert!(err.starts_with("hearth: "), "stderr: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("internal error"),
        "stderr: {err}"
    );
    assert!(
        err.contains(needle),
        "stderr does not mention {needle:?}: {err}"
    );
}

/// A small but complete llama-shaped GGUF whose metadata and tensors can be varied.
fn tiny_llama(arch: &str, tensor_type: GgmlType) -> Vec<u8> {
    let mut w = GgufWriter::new();
    let kv = |w: &mut GgufWriter, k: &str, v: Value| w.add_kv(k, v).expect("metadata");
    kv(&mut w, "general.architecture", Value::String(arch.into()));
    for (k, v) in [
        ("embedding_length", 256u32),
        ("block_count", 1),
        ("feed_forward_length", 256),
        ("attention.head_count", 2),
        ("context_length", 64),
    ] {
        kv(&mut w, &format!("{arch}.{k}"), Value::U32(v));
    }
    let tokens: Vec<Value> = (0..300).map(|i| Value::String(format!("t{i}"))).collect();
    kv(
        &mut w,
        "tokenizer.ggml.model",
        Value::String("llama".into()),
    );
    kv(&mut w, "tokenizer.ggml.tokens", Value::Array(tokens));
    kv(
        &mut w,
        "tokenizer.ggml.scores",
        Value::Array(vec![Value::F32(0.0); 300]),
    );
    kv(
        &mut w,
        "tokenizer.ggml.token_type",
        Value::Array(vec![Value::I32(1); 300]),
    );
    let mut add = |name: &str, dims: &[u64], ty: GgmlType| {
        let n: u64 = dims.iter().product();
        let bytes = vec![0u8; ty.bytes_for(n).expect("whole blocks") as usize];
        w.add_tensor(name, dims, ty, &bytes).expect("tensor");
    };
    add("token_embd.weight", &[256, 300], GgmlType::F32);
    add("output_norm.weight", &[256], GgmlType::F32);
    add("blk.0.attn_norm.weight", &[256], GgmlType::F32);
    add("blk.0.ffn_norm.weight", &[256], GgmlType::F32);
    for n in [
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    ] {
        add(&format!("blk.0.{n}.weight"), &[256, 256], tensor_type);
    }
    w.to_bytes()
}

#[test]
fn missing_file() {
    let out = hearth(&["run", "/nonexistent/model.gguf", "hi"]);
    assert_one_line_error(&out, "/nonexistent/model.gguf");
}

#[test]
fn not_a_gguf_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("notes.gguf");
    std::fs::write(&p, "these are not the weights you are looking for").expect("write");
    for cmd in ["run", "show", "bench"] {
        assert_one_line_error(&hearth(&[cmd, s(&p)]), "GGUF");
    }
}

#[test]
fn truncated_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("cut.gguf");
    let bytes = std::fs::read(smollm2()).expect("read model");
    for len in [16usize, 4096, bytes.len() / 2] {
        std::fs::write(&p, &bytes[..len]).expect("write");
        let out = hearth(&["run", s(&p), "--raw", "hi"]);
        assert_one_line_error(&out, "cut.gguf");
    }
}

#[test]
fn unknown_architecture() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("mamba.gguf");
    std::fs::write(&p, tiny_llama("mamba9", GgmlType::F32)).expect("write");
    assert_one_line_error(
        &hearth(&["run", s(&p), "--raw", "hi"]),
        "unknown architecture 'mamba9'",
    );
    assert_one_line_error(&hearth(&["show", s(&p)]), "mamba9");
}

#[test]
fn tensor_type_we_cannot_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("iq.gguf");
    std::fs::write(&p, tiny_llama("llama", GgmlType::IQ2_XXS)).expect("write");
    assert_one_line_error(&hearth(&["run", s(&p), "--raw", "hi"]), "IQ2_XXS");
}

#[test]
fn unknown_tensor_type_id() {
    let mut bytes = tiny_llama("llama", GgmlType::F32);
    // Patch the type of the first tensor (it follows the name, n_dims and the dims) to 99.
    let name = b"token_embd.weight";
    let at = bytes
        .windows(name.len())
        .position(|w| w == name)
        .expect("tensor name in file");
    let type_at = at + name.len() + 4 + 2 * 8;
    bytes[type_at..type_at + 4].copy_from_slice(&99u32.to_le_bytes());
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("odd.gguf");
    std::fs::write(&p, bytes).expect("write");
    assert_one_line_error(&hearth(&["run", s(&p), "--raw", "hi"]), "token_embd.weight");
}

#[test]
fn prompt_longer_than_the_context() {
    let long = "word ".repeat(200);
    let out = hearth(&["run", s(&smollm2()), "--raw", "--ctx-size", "64", &long]);
    assert_one_line_error(&out, "context");
}

/// A GPU that does not exist (here or on any machine) is an error naming it, not a panic and not
/// a silent fallback to the CPU; a device name hearth does not know is named too.
#[test]
fn a_missing_gpu_is_named() {
    let m = smollm2();
    let out = hearth(&[
        "run",
        s(&m),
        "--raw",
        "--device",
        "cuda:99",
        "-n",
        "1",
        "hi",
    ]);
    assert_one_line_error(&out, "CUDA device 99");
    let out = hearth(&["run", s(&m), "--device", "gpu", "hi"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("unknown device 'gpu'"),
        "{err}"
    );
}

/// `--device wgpu` where wgpu finds no adapter (the Vulkan loader pointed at no driver): one
/// line naming wgpu, not a panic. On macOS wgpu uses Metal, which this cannot hide.
#[test]
fn wgpu_without_an_adapter_is_named() {
    if cfg!(target_os = "macos") {
        return;
    }
    let m = smollm2();
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["run", s(&m), "--raw", "--device", "wgpu", "-n", "1", "hi"])
        .env("VK_ICD_FILENAMES", "/nonexistent/hearth-no-driver.json")
        .env("VK_DRIVER_FILES", "/nonexistent/hearth-no-driver.json")
        .output()
        .expect("run hearth");
    assert_one_line_error(&out, "no usable wgpu adapter");
}

#[test]
fn bad_flags_are_named() {
    let m = smollm2();
    assert_one_line_error(&hearth(&["run", s(&m), "--top-p", "1.5", "hi"]), "top_p");
    assert_one_line_error(
        &hearth(&["run", s(&m), "--template", "nonsense", "hi"]),
        "nonsense",
    );
}

/// `--kv-type`: an unknown type is named; f32 runs (the same greedy start as llama.cpp's f16
/// cache gives, " Paris.\n", is far from a near-tie).
#[test]
fn kv_type_flag() {
    let m = smollm2();
    let out = hearth(&["run", s(&m), "--kv-type", "q4_0", "hi"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("'q4_0' is not a KV cache type"),
        "{err}"
    );
    let out = hearth(&[
        "run",
        s(&m),
        "--raw",
        "--kv-type",
        "f32",
        "--device",
        "cpu",
        "--temp",
        "0",
        "-n",
        "3",
        "The capital of France is",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), " Paris.\n");
}

#[test]
fn tokenize_prints_ids_on_one_line() {
    let out = hearth(&["tokenize", s(&smollm2()), "Hello world"]);
    assert!(out.status.success());
    // llama.cpp: [19556, 905]
    assert_eq!(String::from_utf8_lossy(&out.stdout), "19556 905\n");
    let out = hearth(&["tokenize", s(&smollm2()), "<|im_start|>user", "--detok"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1\t\"<|im_start|>\"\n4093\t\"user\"\n"
    );
}

#[test]
fn raw_run_prints_only_the_generated_text() {
    let out = hearth(&[
        "run",
        s(&smollm2()),
        "--raw",
        "--temp",
        "0",
        "-n",
        "3",
        "The capital of France is",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // llama.cpp's greedy continuation starts " Paris.\n" (tests/goldens/smollm2/greedy.json).
    assert_eq!(String::from_utf8_lossy(&out.stdout), " Paris.\n");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn chat_run_applies_the_template() {
    let out = hearth(&[
        "run",
        s(&smollm2()),
        "--temp",
        "0",
        "-n",
        "8",
        "--system",
        "You are a helpful assistant.",
        "What is the capital of France?",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Paris"), "reply: {text}");
}

#[test]
fn show_describes_the_model() {
    let out = hearth(&["show", s(&smollm2()), "--ctx-size", "2048"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "architecture      llama",
        "parameters        134.5 M",
        "layers            30",
        "heads             9 query, 3 key/value, head size 64",
        "Q4_1",
        "chat template     yes",
        "at 2048 tokens",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}

/// A sparse mixture-of-experts file (a tiny Mixtral: llama with `llama.expert_count`).
#[test]
fn show_lists_the_experts() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-mixtral-q8_0.gguf");
    let out = hearth(&["show", s(&fixture)]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "architecture      llama",
        "experts           4 per layer, 2 per token, 64 wide",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}

#[test]
fn bench_json_has_every_field() {
    let out = hearth(&[
        "bench",
        s(&smollm2()),
        "-p",
        "16",
        "-n",
        "4",
        "-r",
        "1",
        "-t",
        "2",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for key in [
        "load_s",
        "pp_tok_s",
        "tg_tok_s",
        "peak_rss_mib",
        "threads",
        "backend",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert!(v["pp_tok_s"]["mean"].as_f64().unwrap_or(0.0) > 0.0);
    assert_eq!(v["threads"], 2);
    assert_eq!(v["depth"], 0);
}

/// `-d`: both tests run after that much context, for one sequence and for several, and are
/// labelled as llama-bench labels them.
#[test]
fn bench_runs_after_the_context_asked_for() {
    let out = hearth(&[
        "bench",
        s(&smollm2()),
        "-p",
        "8",
        "-n",
        "3",
        "-r",
        "1",
        "-t",
        "2",
        "-d",
        "40",
        "--parallel",
        "2",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("pp8 @ d40 "), "{text}");
    assert!(text.contains("tg3x2 @ d40 "), "{text}");
}
