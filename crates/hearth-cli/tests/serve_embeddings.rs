//! Embedding endpoints of `hearth serve` over real HTTP, against sentence-transformers'
//! vectors for all-MiniLM-L6-v2 (tests/fixtures/embeddings/minilm.json, made by
//! scripts/make_embedding_goldens.py): OpenAI `/v1/embeddings` (raw and with the official
//! client), Ollama `/api/embed` and `/api/embeddings`, and the errors of each.

mod common;

use std::path::PathBuf;

use base64::Engine as _;
use common::http::{check_openai_error, post};
use common::{models_dir, run_client_script, smollm2, TestServer};
use serde_json::{json, Value};

fn minilm() -> Option<PathBuf> {
    let dir = models_dir().join("all-MiniLM-L6-v2");
    if dir.join("model.safetensors").is_file() {
        return Some(dir);
    }
    eprintln!(
        "SKIPPED: {} is missing (run scripts/fetch-models.sh minilm)",
        dir.display()
    );
    None
}

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/embeddings/minilm.json")
}

fn golden() -> Value {
    serde_json::from_str(&std::fs::read_to_string(golden_path()).unwrap()).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// A server with MiniLM (`minilm`) and a generative model (`smol`).
fn server(dir: &std::path::Path) -> TestServer {
    let m = format!("minilm={}", dir.display());
    let s = format!("smol={}", smollm2().display());
    TestServer::start(&["--model", &m, "--model", &s])
}

#[test]
fn openai_embeddings_match_sentence_transformers() {
    let Some(dir) = minilm() else { return };
    let server = server(&dir);
    let g = golden();
    // Every sentence but the empty one (OpenAI refuses empty inputs) and the long one (it
    // refuses those too, rather than cutting them).
    let picked: Vec<usize> = (0..19).filter(|&i| i != 4).collect();
    let texts: Vec<Value> = picked.iter().map(|&i| g["sentences"][i].clone()).collect();
    let (status, r) = post(
        &server,
        "/v1/embeddings",
        json!({"model": "minilm", "input": texts}),
    );
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        (r["object"].as_str(), r["model"].as_str()),
        (Some("list"), Some("minilm"))
    );
    let data = r["data"].as_array().unwrap();
    assert_eq!(data.len(), picked.len());
    for (i, (d, &s)) in data.iter().zip(&picked).enumerate() {
        assert_eq!(
            (d["object"].as_str(), d["index"].as_u64()),
            (Some("embedding"), Some(i as u64))
        );
        let c = cosine(&floats(&d["embedding"]), &floats(&g["embeddings"][s]));
        assert!(c > 0.9999, "sentence {s}: cosine {c}");
    }
    let n: usize = picked
        .iter()
        .map(|&s| g["token_ids"][s].as_array().unwrap().len())
        .sum();
    assert_eq!(r["usage"], json!({"prompt_tokens": n, "total_tokens": n}));

    // base64 is little-endian f32, the same values.
    let body = json!({"model": "minilm", "input": g["sentences"][0], "encoding_format": "base64"});
    let (status, r) = post(&server, "/v1/embeddings", body);
    assert_eq!(status, 200, "{r}");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(r["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let v: Vec<f64> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
        .collect();
    assert_eq!(v.len(), 384);
    assert!(cosine(&v, &floats(&g["embeddings"][0])) > 0.9999);

    // dimensions: the first n values, normalized again.
    let body = json!({"model": "minilm", "input": g["sentences"][0], "dimensions": 8});
    let (status, r) = post(&server, "/v1/embeddings", body);
    assert_eq!(status, 200, "{r}");
    let v = floats(&r["data"][0]["embedding"]);
    let want: Vec<f64> = floats(&g["embeddings"][0])[..8].to_vec();
    assert_eq!(v.len(), 8);
    assert!(cosine(&v, &want) > 0.9999);
    assert!((v.iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-5);
}

#[test]
fn openai_embedding_errors_name_the_field() {
    let Some(dir) = minilm() else { return };
    let server = server(&dir);
    let long = golden()["sentences"][19].clone();
    let cases = [
        (
            json!({"model": "minilm"}),
            400,
            Some("input"),
            "input is required",
        ),
        (
            json!({"model": "minilm", "input": ""}),
            400,
            Some("input"),
            "must not be empty",
        ),
        (
            json!({"model": "minilm", "input": [1, "a"]}),
            400,
            Some("input"),
            "input must be",
        ),
        (
            json!({"model": "minilm", "input": [99999]}),
            400,
            Some("input"),
            "outside the vocabulary",
        ),
        (
            json!({"model": "minilm", "input": long}),
            400,
            Some("input"),
            "at most 256",
        ),
        (
            json!({"model": "minilm", "input": "a", "encoding_format": "hex"}),
            400,
            Some("encoding_format"),
            "\"float\" or \"base64\"",
        ),
        (
            json!({"model": "minilm", "input": "a", "dimensions": 0}),
            400,
            Some("dimensions"),
            "from 1 to 384",
        ),
        (
            json!({"model": "smol", "input": "a"}),
            400,
            Some("model"),
            "\"smol\" does not support embeddings",
        ),
        (
            json!({"model": "nope", "input": "a"}),
            404,
            Some("model"),
            "model 'nope' not found",
        ),
    ];
    for (body, status, param, says) in cases {
        let (got, e) = post(&server, "/v1/embeddings", body.clone());
        assert_eq!(got, status, "{body}: {e}");
        check_openai_error(&e, status, param, says, &body);
    }
    // Generation on the embedding model names it as embedding-only.
    let body = json!({"model": "minilm", "messages": [{"role": "user", "content": "hi"}]});
    let (status, e) = post(&server, "/v1/chat/completions", body.clone());
    assert_eq!(status, 400, "{e}");
    check_openai_error(
        &e,
        400,
        Some("model"),
        "\"minilm\" does not support generate",
        &body,
    );
}

#[test]
fn ollama_embed_and_legacy_embeddings() {
    let Some(dir) = minilm() else { return };
    let server = server(&dir);
    let g = golden();
    let input = json!([g["sentences"][0], g["sentences"][6]]);
    let body = json!({"model": "minilm", "input": input, "options": {"num_ctx": 512}});
    let (status, r) = post(&server, "/api/embed", body);
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["model"], "minilm");
    let embs = r["embeddings"].as_array().unwrap();
    assert_eq!(embs.len(), 2);
    for (e, i) in embs.iter().zip([0, 6]) {
        assert!(cosine(&floats(e), &floats(&g["embeddings"][i])) > 0.9999);
    }
    let n =
        g["token_ids"][0].as_array().unwrap().len() + g["token_ids"][6].as_array().unwrap().len();
    assert_eq!(r["prompt_eval_count"], json!(n));
    assert!(r["total_duration"].as_u64().unwrap() > 0);
    assert!(r["load_duration"].as_u64().is_some());

    // `truncate` (default true) cuts a long text as sentence-transformers does; false refuses.
    let long = g["sentences"][19].clone();
    let (status, r) = post(
        &server,
        "/api/embed",
        json!({"model": "minilm", "input": long}),
    );
    assert_eq!(status, 200, "{r}");
    assert!(cosine(&floats(&r["embeddings"][0]), &floats(&g["embeddings"][19])) > 0.9999);
    let body = json!({"model": "minilm", "input": long, "truncate": false});
    let (status, r) = post(&server, "/api/embed", body);
    assert_eq!(status, 400, "{r}");
    assert!(r["error"].as_str().unwrap().contains("at most 256"), "{r}");

    let body = json!({"model": "minilm", "prompt": g["sentences"][3]});
    let (status, r) = post(&server, "/api/embeddings", body);
    assert_eq!(status, 200, "{r}");
    assert!(cosine(&floats(&r["embedding"]), &floats(&g["embeddings"][3])) > 0.9999);

    for (path, body, says) in [
        (
            "/api/embed",
            json!({"model": "minilm", "input": 3}),
            "input must be a string or a list of strings",
        ),
        (
            "/api/embed",
            json!({"model": "minilm", "input": "a", "options": 1}),
            "options must be an object",
        ),
        (
            "/api/embed",
            json!({"model": "smol", "input": "a"}),
            "\"smol\" does not support embeddings",
        ),
        (
            "/api/embeddings",
            json!({"prompt": "a"}),
            "model is required",
        ),
        (
            "/api/generate",
            json!({"model": "minilm", "prompt": "hi"}),
            "\"minilm\" does not support generate",
        ),
    ] {
        let (status, r) = post(&server, path, body.clone());
        assert_eq!(status, 400, "{body}: {r}");
        assert_eq!(r.as_object().unwrap().len(), 1, "{r}");
        assert!(r["error"].as_str().unwrap().contains(says), "{body}: {r}");
    }
}

#[test]
fn official_openai_client_embeds() {
    let Some(dir) = minilm() else { return };
    let server = server(&dir);
    let golden = golden_path();
    let out = run_client_script(
        &server,
        "openai_embeddings.py",
        &["minilm", golden.to_str().unwrap()],
    );
    assert!(!out.contains("FAIL"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        7,
        "{out}"
    );
}
