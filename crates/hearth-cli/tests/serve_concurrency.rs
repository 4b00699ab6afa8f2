//! The server under concurrency: continuous batching must not change anyone's text, a client
//! that goes away frees its KV blocks, several models serve side by side, idle models unload.

mod common;

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use common::{gemma3, smollm2, TestServer};
use serde_json::{json, Value};

const QUESTIONS: [&str; 16] = [
    "What is the capital of France?",
    "Name three colors.",
    "Why is the sky blue?",
    "Write a haiku about snow.",
    "What is 2 + 2?",
    "Tell me a joke about cats.",
    "How do birds fly?",
    "List three fruits.",
    "What is Rust?",
    "Describe the moon in one sentence.",
    "What does a baker do?",
    "Say hello in Spanish.",
    "Why do leaves fall?",
    "What is the tallest animal?",
    "How many legs does a spider have?",
    "Give me a word that rhymes with cat.",
];

fn chat_body(question: &str, stream: bool, max_tokens: u32) -> Value {
    json!({
        "model": "smol",
        "messages": [{"role": "user", "content": question}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": stream,
    })
}

/// A streaming chat completion's text, read event by event.
fn stream_text(base: &str, question: &str) -> String {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    let r = client
        .post(format!("{base}/v1/chat/completions"))
        .json(&chat_body(question, true, 24))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut text = String::new();
    for line in BufReader::new(r).lines() {
        let line = line.unwrap();
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(data).unwrap();
        if let Some(piece) = chunk["choices"][0]["delta"]["content"].as_str() {
            text.push_str(piece);
        }
    }
    text
}

fn solo_text(server: &TestServer, question: &str) -> String {
    let r: Value = reqwest::blocking::Client::new()
        .post(server.url("/v1/chat/completions"))
        .json(&chat_body(question, false, 24))
        .send()
        .unwrap()
        .json()
        .unwrap();
    r["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn sixteen_concurrent_streaming_clients_get_their_solo_text() {
    let model = format!("smol={}", smollm2().display());
    // A small step budget: prompts are split into chunks that share steps with decodes.
    let server = TestServer::start(&[
        "--model",
        &model,
        "--max-seqs",
        "16",
        "--max-batch-tokens",
        "48",
    ]);
    let solo: Vec<String> = QUESTIONS.iter().map(|q| solo_text(&server, q)).collect();
    let together: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = QUESTIONS
            .iter()
            .map(|q| {
                let base = server.base.clone();
                s.spawn(move || stream_text(&base, q))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((q, a), b) in QUESTIONS.iter().zip(&solo).zip(&together) {
        assert!(!a.is_empty(), "{q}: empty reply");
        assert_eq!(a, b, "{q}: the reply alone and among 16 differ");
    }
}

/// Polls `cond` for up to a minute (the server's runner notices a disconnect at its next step).
fn eventually(what: &str, server: &TestServer, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what} never happened\n{}", server.logs());
}

#[test]
fn a_client_that_disconnects_mid_stream_is_cancelled_and_its_blocks_freed() {
    let model = format!("smol={}", smollm2().display());
    let server = TestServer::start(&["--model", &model]);
    let used = "hearth_kv_blocks_used{model=\"smol\"}";
    assert_eq!(server.metric(used), 0.0);
    let client = reqwest::blocking::Client::new();
    let r = client
        .post(server.url("/v1/chat/completions"))
        .json(&chat_body(
            "Tell me a very long story about a dragon.",
            true,
            3000,
        ))
        .send()
        .unwrap();
    let mut lines = BufReader::new(r).lines();
    let mut n_events = 0;
    while n_events < 5 {
        if lines.next().unwrap().unwrap().starts_with("data: ") {
            n_events += 1;
        }
    }
    assert!(server.metric(used) > 0.0, "a running request holds blocks");
    drop(lines); // closes the connection mid-stream
    eventually("the cancelled request freeing its blocks", &server, || {
        server.metric(used) == 0.0 && server.metric("hearth_cancelled_requests_total") == 1.0
    });
    assert_eq!(
        server.metric("hearth_running_sequences{model=\"smol\"}"),
        0.0
    );
    // The server goes on serving.
    assert!(!solo_text(&server, "What is 2 + 2?").is_empty());
}

/// What `hearth run --raw` generates greedily for `prompt`: the same engine through the
/// one-sequence path.
fn run_greedy(model: &std::path::Path, prompt: &str, n: usize) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["run", "--raw", "--temp", "0", "-n", &n.to_string()])
        .arg(model)
        .arg(prompt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn two_models_serve_side_by_side_and_each_answers_as_it_does_alone() {
    let (smol, gemma) = (smollm2(), gemma3());
    let server = TestServer::start(&[
        "--model",
        &format!("smol={}", smol.display()),
        "--model",
        &format!("gemma={}", gemma.display()),
    ]);
    let client = reqwest::blocking::Client::new();
    let prompt = "The capital of France is";
    for (name, path) in [("smol", &smol), ("gemma", &gemma)] {
        let r: Value = client
            .post(server.url("/v1/completions"))
            .json(&json!({"model": name, "prompt": prompt, "temperature": 0, "max_tokens": 32}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let want = run_greedy(path, prompt, 32);
        assert_eq!(
            r["choices"][0]["text"].as_str().unwrap(),
            want,
            "{name}: {r}"
        );
        assert_eq!(r["model"], name);
    }
    let r = client
        .post(server.url("/v1/completions"))
        .json(&json!({"model": "nope", "prompt": "hi"}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[test]
fn an_idle_model_unloads_after_its_keep_alive_and_reloads_on_demand() {
    let model = format!("smol={}", smollm2().display());
    let server = TestServer::start(&["--model", &model, "--lazy", "--keep-alive", "1s"]);
    let text = reqwest::blocking::get(server.url("/metrics"))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        !text.contains("model=\"smol\""),
        "lazy: not loaded before its first request"
    );
    let first = solo_text(&server, "What is 2 + 2?");
    eventually("the model unloading", &server, || {
        let text = reqwest::blocking::get(server.url("/metrics"))
            .unwrap()
            .text()
            .unwrap();
        !text.contains("model=\"smol\"")
    });
    assert_eq!(
        solo_text(&server, "What is 2 + 2?"),
        first,
        "reloaded, the same answer"
    );
}

#[test]
fn a_shared_system_prompt_is_served_from_the_prefix_cache() {
    let model = format!("smol={}", smollm2().display());
    let server = TestServer::start(&["--model", &model]);
    let system = "You are a careful assistant for a small bakery. ".repeat(12);
    let ask = |question: &str| -> Value {
        reqwest::blocking::Client::new()
            .post(server.url("/v1/chat/completions"))
            .json(&json!({
                "model": "smol",
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": question},
                ],
                "temperature": 0,
                "max_tokens": 8,
            }))
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    let first = ask("When do you open?");
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let second = ask("Do you sell rye bread?");
    let prompt_tokens = second["usage"]["prompt_tokens"].as_u64().unwrap();
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    // Everything up to the last full 32-token block before the questions differ is reused.
    assert!(
        cached >= 96 && cached % 32 == 0 && cached < prompt_tokens,
        "{second}"
    );
    assert_eq!(server.metric("hearth_prefix_cache_hits_total"), 1.0);
    assert_eq!(
        server.metric("hearth_prefix_cache_hit_tokens_total"),
        cached as f64
    );
}
