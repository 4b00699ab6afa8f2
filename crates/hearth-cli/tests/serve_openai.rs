//! The OpenAI-compatible API over raw HTTP against the real binary: response shapes, SSE
//! framing, llama.cpp's greedy tokens, exact token counts, and errors in OpenAI's shape.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::http::{check_openai_error as check_error, post, post_sse};
use common::{run_client_script, smollm2, TestServer};
use serde_json::{json, Value};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

fn server() -> TestServer {
    TestServer::start(&[smollm2().to_str().unwrap(), "--ctx-size", "512"])
}

/// Greedy continuations equal llama.cpp's, token by token, up to its first end-of-generation
/// token. As in the engine's golden test, the two may part only at a step where both see a
/// tie within llama.cpp's own rounding noise (its batched-vs-sequential logit difference).
#[test]
fn greedy_completions_equal_llama_cpp_tokens() {
    let server = server();
    let tok = tokenizer();
    let cases = golden_cases();
    let mut exact = 0;
    for case in &cases {
        let prompt = case["prompt"].as_str().unwrap();
        let prompt_ids = ids(&case["prompt_ids"]);
        let mut texts = Vec::new();
        for prompt_field in [json!(prompt), json!(prompt_ids)] {
            let (status, r) = post(
                &server,
                "/v1/completions",
                json!({"model": MODEL, "prompt": prompt_field, "temperature": 0,
                       "max_tokens": 32, "logprobs": 5}),
            );
            assert_eq!(status, 200, "{r}");
            assert_eq!(r["usage"]["prompt_tokens"], prompt_ids.len());
            exact += check_golden_choice(&tok, case, &r) as usize;
            texts.push(r["choices"][0]["text"].clone());
        }
        assert_eq!(
            texts[0], texts[1],
            "a text prompt and its token ids continue alike"
        );
    }
    // NOTE: how many continuations run to the end identical depends on which SIMD kernels
    // hearth and llama.cpp each ran (the goldens came from an AVX-512 machine; on an AVX2 one
    // 8 of 18 do): what must hold everywhere is that every parting is at a near-tie, which
    // `check_golden_choice` asserts.
    eprintln!(
        "{exact}/{} continuations identical to llama.cpp",
        2 * cases.len()
    );
}

/// Checks one greedy completion against a golden case; whether it matched to the end.
fn check_golden_choice(tok: &hearth_tokenizer::Tokenizer, case: &Value, r: &Value) -> bool {
    let prompt = &case["prompt"];
    let want = ids(&case["ids"]);
    let gaps: Vec<f64> = serde_json::from_value(case["top2_gap"].clone()).unwrap();
    // llama.cpp's argmax runs on past an end-of-generation token; a server stops there.
    let k = want
        .iter()
        .position(|&id| tok.is_eog(id))
        .unwrap_or(want.len());
    let choice = &r["choices"][0];
    let lp = &choice["logprobs"];
    let got: Vec<&str> = lp["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let text = choice["text"].as_str().unwrap();
    assert_eq!(text, got.concat());
    let stopped = choice["finish_reason"] == "stop";
    assert_eq!(
        choice["finish_reason"],
        if stopped { "stop" } else { "length" }
    );
    let n = r["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    assert_eq!(
        n,
        got.len() + stopped as usize,
        "the end-of-generation token counts"
    );
    assert_eq!(
        r["usage"]["total_tokens"],
        r["usage"]["prompt_tokens"].as_u64().unwrap() + n as u64
    );
    let parted = (0..k).find(|&i| got.get(i) != Some(&token_text(tok, want[i]).as_str()));
    let Some(i) = parted else {
        assert_eq!(text, tok.decode(&want[..k]), "{prompt}");
        assert_eq!((got.len(), stopped), (k, k < want.len()), "{prompt}");
        return true;
    };
    let theirs = token_text(tok, want[i]);
    // Our pick's margin over llama.cpp's (unknown when we stopped there).
    let our_margin = match got.get(i) {
        Some(_) => lp["top_logprobs"][i][&theirs]
            .as_f64()
            .map(|l| lp["token_logprobs"][i].as_f64().unwrap() - l),
        None => Some(0.0),
    };
    let noise = golden_noise();
    assert!(
        gaps[i] < noise && our_margin.is_some_and(|m| m < noise),
        "{prompt}: step {i}: got {:?}, llama.cpp chose {theirs:?} by a margin of {} (noise \
         {noise}); our margin: {our_margin:?}",
        got.get(i),
        gaps[i]
    );
    eprintln!("{prompt}: parted at step {i}, a tie within the noise");
    false
}

#[test]
fn completion_response_and_stream_have_openai_shapes() {
    let server = server();
    let body = json!({"model": MODEL, "prompt": "The capital of France is",
                      "temperature": 0, "max_tokens": 12});
    let (status, r) = post(&server, "/v1/completions", body.clone());
    assert_eq!(status, 200, "{r}");
    check_head(&r, "cmpl-", "text_completion");
    assert_eq!(r["choices"][0]["index"], 0);
    assert_eq!(r["choices"][0]["logprobs"], Value::Null);
    let text = r["choices"][0]["text"].as_str().unwrap().to_string();

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let chunks = post_sse(&server, "/v1/completions", streamed);
    let (first, rest) = chunks.split_first().unwrap();
    for c in &chunks {
        assert_eq!(c["id"], first["id"]);
        assert_eq!(c["created"], first["created"]);
        assert_eq!(c["object"], "text_completion");
        assert_eq!(c["model"], MODEL);
    }
    assert!(first["id"].as_str().unwrap().starts_with("cmpl-"));
    let (usage_chunk, body_chunks) = chunks.split_last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"], r["usage"]);
    let (finish, content) = body_chunks.split_last().unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    assert_eq!(finish["choices"][0]["text"], "");
    let joined: String = content
        .iter()
        .map(|c| {
            assert_eq!(c["usage"], Value::Null);
            assert_eq!(c["choices"][0]["finish_reason"], Value::Null);
            c["choices"][0]["text"].as_str().unwrap()
        })
        .collect();
    assert_eq!(joined, text);
    assert!(!rest.is_empty());

    // echo puts the prompt in front, in both forms.
    let mut echo = body.clone();
    echo["echo"] = json!(true);
    let (_, r2) = post(&server, "/v1/completions", echo.clone());
    assert_eq!(
        r2["choices"][0]["text"],
        format!("The capital of France is{text}")
    );
    echo["stream"] = json!(true);
    let chunks = post_sse(&server, "/v1/completions", echo);
    assert_eq!(chunks[0]["choices"][0]["text"], "The capital of France is");
}

#[test]
fn chat_response_and_stream_agree_and_count_tokens_exactly() {
    let server = server();
    let messages = json!([{"role": "system", "content": "You are terse."},
                          {"role": "user", "content": "Name a color."}]);
    let body = json!({"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 16});
    let (status, r) = post(&server, "/v1/chat/completions", body.clone());
    assert_eq!(status, 200, "{r}");
    check_head(&r, "chatcmpl-", "chat.completion");
    let choice = &r["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["logprobs"], Value::Null);
    let content = choice["message"]["content"].as_str().unwrap();
    assert!(!content.is_empty());
    let n_prompt = chat_prompt_len(&[("system", "You are terse."), ("user", "Name a color.")]);
    assert_eq!(r["usage"]["prompt_tokens"], n_prompt);
    let n_gen = r["usage"]["completion_tokens"].as_u64().unwrap();
    assert_eq!(r["usage"]["total_tokens"], n_prompt as u64 + n_gen);
    assert!(r["usage"]["prompt_tokens_details"]["cached_tokens"].is_u64());

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let chunks = post_sse(&server, "/v1/chat/completions", streamed);
    let first = &chunks[0];
    assert!(first["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(
        first["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    for c in &chunks {
        assert_eq!((&c["id"], &c["created"]), (&first["id"], &first["created"]));
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["system_fingerprint"], r["system_fingerprint"]);
    }
    let (usage_chunk, body_chunks) = chunks.split_last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    // Greedy twice: the second run may reuse the prompt's cached blocks; the rest is equal.
    assert_eq!(usage_chunk["usage"]["prompt_tokens"], n_prompt);
    assert_eq!(usage_chunk["usage"]["completion_tokens"], n_gen);
    let (finish, deltas) = body_chunks.split_last().unwrap();
    assert_eq!(finish["choices"][0]["delta"], json!({}));
    assert_eq!(
        finish["choices"][0]["finish_reason"],
        choice["finish_reason"]
    );
    let joined: String = deltas[1..]
        .iter()
        .map(|c| {
            assert_eq!(c["usage"], Value::Null);
            assert!(c["choices"][0]["delta"].get("role").is_none());
            c["choices"][0]["delta"]["content"].as_str().unwrap()
        })
        .collect();
    assert_eq!(joined, content);

    // Without include_usage, chunks carry no usage at all and no usage chunk comes.
    let mut plain = body;
    plain["stream"] = json!(true);
    let chunks = post_sse(&server, "/v1/chat/completions", plain);
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    assert!(chunks.last().unwrap()["choices"][0]["finish_reason"].is_string());
}

#[test]
fn stop_strings_cut_the_text_and_finish_with_stop() {
    let server = server();
    let tok = tokenizer();
    let case = &golden_cases()[0];
    let full = tok.decode(&ids(&case["ids"]));
    let cut = &full[..full.find('\n').unwrap()];
    let body = json!({"model": MODEL, "prompt": case["prompt"], "temperature": 0,
                      "max_tokens": 32, "stop": ["\n", "zzz"]});
    let (_, r) = post(&server, "/v1/completions", body.clone());
    assert_eq!(r["choices"][0]["text"], cut);
    assert_eq!(r["choices"][0]["finish_reason"], "stop");
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let chunks = post_sse(&server, "/v1/completions", streamed);
    let joined: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(joined, cut);
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
}

#[test]
fn n_choices_share_a_prompt_and_replay_with_a_seed() {
    let server = server();
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story."}],
                      "n": 2, "seed": 42, "temperature": 1.0, "max_tokens": 8});
    let (status, r) = post(&server, "/v1/chat/completions", body.clone());
    assert_eq!(status, 200, "{r}");
    let choices = r["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    assert_eq!(
        (&choices[0]["index"], &choices[1]["index"]),
        (&json!(0), &json!(1))
    );
    let n_prompt = chat_prompt_len(&[("user", "Tell me a story.")]);
    assert_eq!(r["usage"]["prompt_tokens"], n_prompt);
    let (_, again) = post(&server, "/v1/chat/completions", body.clone());
    assert_eq!(again["choices"], r["choices"]);
    assert_eq!(
        again["usage"]["completion_tokens"],
        r["usage"]["completion_tokens"]
    );

    // n=1 with seed 43 replays choice 1 (its seed is seed + 1).
    let mut one = body.clone();
    one["n"] = json!(1);
    one["seed"] = json!(43);
    let (_, single) = post(&server, "/v1/chat/completions", one);
    assert_eq!(single["choices"][0]["message"], choices[1]["message"]);

    let mut streamed = body;
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let chunks = post_sse(&server, "/v1/chat/completions", streamed);
    for (i, choice) in choices.iter().enumerate() {
        let mine: Vec<&Value> = chunks
            .iter()
            .filter_map(|c| c["choices"].as_array()?.first())
            .filter(|c| c["index"] == i)
            .collect();
        assert_eq!(mine[0]["delta"]["role"], "assistant");
        assert_eq!(
            mine.last().unwrap()["finish_reason"],
            choice["finish_reason"]
        );
        let text: String = mine
            .iter()
            .filter_map(|c| c["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, choice["message"]["content"].as_str().unwrap());
    }
    assert_eq!(
        chunks.last().unwrap()["usage"]["completion_tokens"],
        r["usage"]["completion_tokens"]
    );
}

#[test]
fn logprobs_have_both_shapes() {
    let server = server();
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}],
                      "temperature": 0, "max_tokens": 6, "logprobs": true, "top_logprobs": 3});
    let (status, r) = post(&server, "/v1/chat/completions", body.clone());
    assert_eq!(status, 200, "{r}");
    let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert!(!content.is_empty());
    let mut text = String::new();
    for entry in content {
        check_chat_logprob(entry, 3);
        text.push_str(entry["token"].as_str().unwrap());
    }
    assert_eq!(text, r["choices"][0]["message"]["content"]);
    let finished_by_length = r["choices"][0]["finish_reason"] == "length";
    let eog = if finished_by_length { 0 } else { 1 };
    assert_eq!(r["usage"]["completion_tokens"], content.len() + eog);

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let chunks = post_sse(&server, "/v1/chat/completions", streamed);
    let streamed_entries: Vec<Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array())
        .flatten()
        .cloned()
        .collect();
    assert_eq!(&streamed_entries, content);

    let (_, r) = post(
        &server,
        "/v1/completions",
        json!({"model": MODEL, "prompt": "1, 2, 3,", "temperature": 0, "max_tokens": 5, "logprobs": 2}),
    );
    let lp = &r["choices"][0]["logprobs"];
    let tokens = lp["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 5);
    let mut offset = 0;
    for (i, t) in tokens.iter().enumerate() {
        assert_eq!(lp["text_offset"][i], offset);
        offset += t.as_str().unwrap().chars().count();
        let chosen = lp["token_logprobs"][i].as_f64().unwrap();
        assert!(chosen <= 0.0);
        let top = lp["top_logprobs"][i].as_object().unwrap();
        assert!(!top.is_empty() && top.len() <= 2);
        let best = top
            .values()
            .filter_map(Value::as_f64)
            .fold(f64::MIN, f64::max);
        assert_eq!(top[t.as_str().unwrap()].as_f64().unwrap(), chosen);
        assert_eq!(best, chosen, "greedy picks the most likely token");
    }
}

#[test]
fn models_are_listed_and_retrieved() {
    let server = server();
    let mtime = std::fs::metadata(smollm2()).unwrap().modified().unwrap();
    let created = mtime
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let entry = json!({"id": MODEL, "object": "model", "created": created, "owned_by": "hearth"});
    let list: Value = reqwest::blocking::get(server.url("/v1/models"))
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(list, json!({"object": "list", "data": [entry]}));
    let one = reqwest::blocking::get(server.url(&format!("/v1/models/{MODEL}"))).unwrap();
    assert_eq!(one.status(), 200);
    assert_eq!(one.json::<Value>().unwrap(), entry);
    let missing = reqwest::blocking::get(server.url("/v1/models/nope")).unwrap();
    assert_eq!(missing.status(), 404);
    check_error(
        &missing.json().unwrap(),
        404,
        Some("model"),
        "'nope' not found",
        &json!({}),
    );
}

#[test]
fn a_client_that_disconnects_cancels_its_generation() {
    let server = server();
    let cancelled = "hearth_cancelled_requests_total";
    let before = server.metric(cancelled);
    let body = json!({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 500,
                      "stream": true, "stop": ["zzzz"], "temperature": 0});
    let addr = server.base.trim_start_matches("http://");
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    let body = body.to_string();
    write!(
        sock,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("\"text\":\"") {
        let n = sock.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "the stream ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    drop(sock);
    // Generous deadline: only an absent cancellation fails.
    let deadline = Instant::now() + Duration::from_secs(60);
    let running = format!("hearth_running_sequences{{model=\"{MODEL}\"}}");
    while server.metric(cancelled) <= before || server.metric(&running) != 0.0 {
        assert!(
            Instant::now() < deadline,
            "never cancelled:\n{}",
            server.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_client_that_gives_up_on_a_plain_request_cancels_it() {
    let server = server();
    let cancelled = "hearth_cancelled_requests_total";
    let running = format!("hearth_running_sequences{{model=\"{MODEL}\"}}");
    let before = server.metric(cancelled);
    let body = json!({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 500,
                      "stop": ["zzzz"], "temperature": 0})
    .to_string();
    let addr = server.base.trim_start_matches("http://");
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    write!(
        sock,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.metric(&running) == 0.0 {
        assert!(
            Instant::now() < deadline,
            "never started:\n{}",
            server.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(sock);
    while server.metric(cancelled) <= before || server.metric(&running) != 0.0 {
        assert!(
            Instant::now() < deadline,
            "never cancelled:\n{}",
            server.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_official_python_client_works() {
    let server = server();
    let out = run_client_script(&server, "openai_client.py", &[]);
    assert!(out.contains("all checks passed"), "{out}");
}

/// The fields every non-streamed response has.
fn check_head(r: &Value, prefix: &str, object: &str) {
    assert!(r["id"].as_str().unwrap().starts_with(prefix), "{r}");
    assert_eq!(r["object"], object);
    assert_eq!(r["model"], MODEL);
    assert!(r["created"].as_u64().unwrap() > 1_600_000_000);
    assert!(r["system_fingerprint"]
        .as_str()
        .unwrap()
        .starts_with("hearth-"));
    let u = &r["usage"];
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
    );
}

/// One entry of chat `logprobs.content`.
fn check_chat_logprob(entry: &Value, n_top: usize) {
    let token = entry["token"].as_str().unwrap();
    let bytes: Vec<u8> = serde_json::from_value(entry["bytes"].clone()).unwrap();
    assert_eq!(String::from_utf8_lossy(&bytes), token);
    let lp = entry["logprob"].as_f64().unwrap();
    assert!(lp <= 0.0, "{entry}");
    let top = entry["top_logprobs"].as_array().unwrap();
    assert_eq!(top.len(), n_top);
    let lps: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
    assert!(lps.windows(2).all(|w| w[0] >= w[1]), "{entry}");
    // Greedy: the chosen token is the most likely one.
    assert_eq!(top[0]["token"], token);
    assert_eq!(lps[0], lp);
    assert!(top.iter().all(|t| t["bytes"].is_array()));
}

fn tokenizer() -> hearth_tokenizer::Tokenizer {
    let file = hearth_gguf::GgufFile::open(smollm2()).unwrap();
    hearth_tokenizer::Tokenizer::from_gguf(file.metadata()).unwrap()
}

fn token_text(tok: &hearth_tokenizer::Tokenizer, id: u32) -> String {
    String::from_utf8_lossy(tok.token_bytes(id)).into_owned()
}

/// The prompt length of a conversation under the model's own chat template.
fn chat_prompt_len(messages: &[(&str, &str)]) -> usize {
    let file = hearth_gguf::GgufFile::open(smollm2()).unwrap();
    let tok = hearth_tokenizer::Tokenizer::from_gguf(file.metadata()).unwrap();
    let template = hearth_tokenizer::ChatTemplate::from_gguf(file.metadata()).unwrap();
    let builder = hearth_engine::PromptBuilder::new(std::sync::Arc::new(tok), template);
    let messages: Vec<_> = messages
        .iter()
        .map(|(r, c)| hearth_tokenizer::ChatMessage::new(*r, *c))
        .collect();
    builder.chat(&messages).unwrap().len()
}

/// llama.cpp's greedy continuations of SmolLM2 (tests/goldens/smollm2/greedy.json).
fn golden_cases() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/goldens/smollm2/greedy.json"
    );
    let golden: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    golden["cases"].as_array().unwrap().clone()
}

/// llama.cpp's own logit noise on this model (see tests/goldens/README.md).
fn golden_noise() -> f64 {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/goldens/smollm2/logits.json"
    );
    let golden: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    golden["self_check"]["max_top10_diff"]
        .as_f64()
        .unwrap()
        .max(0.02)
}

fn ids(v: &Value) -> Vec<u32> {
    serde_json::from_value(v.clone()).unwrap()
}
