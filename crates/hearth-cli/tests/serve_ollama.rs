//! The Ollama API of `hearth serve`, over raw HTTP against the real binary, and through the
//! official `ollama` Python client.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;

use common::{gemma3, run_client_script, smollm2, TestServer};
use hearth_gguf::GgufFile;
use hearth_tokenizer::Tokenizer;
use reqwest::blocking::{Client, Response};
use serde_json::{json, Value};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

fn server() -> TestServer {
    TestServer::start(&[smollm2().to_str().unwrap(), "--ctx-size", "512"])
}

fn post(server: &TestServer, path: &str, body: &Value) -> Response {
    Client::new()
        .post(server.url(path))
        .body(body.to_string())
        .send()
        .unwrap()
}

fn post_json(server: &TestServer, path: &str, body: &Value) -> Value {
    let r = post(server, path, body);
    assert_eq!(r.status(), 200, "{path} {body}");
    r.json().unwrap()
}

fn get_json(server: &TestServer, path: &str) -> Value {
    let r = reqwest::blocking::get(server.url(path)).unwrap();
    assert_eq!(r.status(), 200, "{path}");
    r.json().unwrap()
}

/// Every line of an NDJSON reply, each parsed.
fn ndjson_lines(r: Response) -> Vec<Value> {
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let text = r.text().unwrap();
    assert!(text.ends_with('\n'), "{text}");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// llama.cpp's greedy continuation of SmolLM2's first golden prompt.
fn golden() -> (String, Vec<u64>, Vec<u64>) {
    golden_of("smollm2")
}

/// llama.cpp's greedy continuation of a model's first golden prompt: (prompt, prompt ids,
/// 32 generated ids).
fn golden_of(model: &str) -> (String, Vec<u64>, Vec<u64>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/goldens")
        .join(model)
        .join("greedy.json");
    let g: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let case = &g["cases"][0];
    let ids = |k: &str| -> Vec<u64> {
        case[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    (
        case["prompt"].as_str().unwrap().to_string(),
        ids("prompt_ids"),
        ids("ids"),
    )
}

fn decode(ids: &[u64]) -> String {
    decode_with(&smollm2(), ids)
}

fn decode_with(model: &Path, ids: &[u64]) -> String {
    let file = GgufFile::open(model).unwrap();
    let tok = Tokenizer::from_gguf(file.metadata()).unwrap();
    tok.decode(&ids.iter().map(|&i| i as u32).collect::<Vec<_>>())
}

fn ids_of(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list of ids: {v}"))
        .iter()
        .map(|i| i.as_u64().unwrap())
        .collect()
}

/// Gemma 3's first golden case's `top2_gap`s, and llama.cpp's own logit noise on it.
fn gemma_gaps_and_noise() -> (Vec<f64>, f64) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/goldens/gemma3");
    let read = |f: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap()
    };
    let gaps = read("greedy.json")["cases"][0]["top2_gap"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_f64().unwrap())
        .collect();
    let noise = read("logits.json")["self_check"]["max_top10_diff"]
        .as_f64()
        .unwrap();
    (gaps, noise)
}

/// Greedy options without Ollama's default repeat penalty, as llama.cpp's goldens ran.
fn greedy(num_predict: i64) -> Value {
    json!({"temperature": 0, "repeat_penalty": 1.0, "num_predict": num_predict})
}

/// The fields of a final line, with their types and Ollama's invariants.
fn check_final(v: &Value, reason: &str) {
    assert_eq!(v["model"], MODEL);
    assert_eq!(v["done"], true, "{v}");
    assert_eq!(v["done_reason"], reason, "{v}");
    for key in [
        "total_duration",
        "load_duration",
        "prompt_eval_duration",
        "eval_duration",
    ] {
        assert!(v[key].as_u64().is_some_and(|d| d > 0), "{key}: {v}");
    }
    assert!(
        v["prompt_eval_count"].as_u64().is_some_and(|n| n > 0),
        "{v}"
    );
    assert!(v["eval_count"].as_u64().is_some_and(|n| n > 0), "{v}");
    assert!(v["total_duration"].as_u64() >= v["eval_duration"].as_u64());
    check_timestamp(&v["created_at"]);
}

/// RFC 3339 in UTC with nanoseconds: `2023-08-04T19:22:45.499127000Z`.
fn check_timestamp(v: &Value) {
    let t = v.as_str().unwrap_or_else(|| panic!("not a time: {v}"));
    let b = t.as_bytes();
    assert_eq!(b.len(), 30, "{t}");
    for (i, c) in [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
        (29, b'Z'),
    ] {
        assert_eq!(b[i], c, "{t}");
    }
}

/// The first step at which llama.cpp's greedy pick for the smollm2 golden case was a near-tie:
/// its top-2 gap within llama.cpp's own rounding noise (tests/goldens/README.md). Up to there
/// a correct engine must pick the same tokens; from there on the two may part, whichever
/// SIMD kernels either ran with (the OpenAI test checks each parting's margins too).
fn first_near_tie() -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/goldens/smollm2");
    let read = |f: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap()
    };
    let noise = read("logits.json")["self_check"]["max_top10_diff"]
        .as_f64()
        .unwrap()
        .max(0.02);
    let gaps: Vec<f64> =
        serde_json::from_value(read("greedy.json")["cases"][0]["top2_gap"].clone()).unwrap();
    gaps.iter().position(|&g| g < noise).unwrap_or(gaps.len())
}

#[test]
fn raw_generate_matches_llama_cpp_greedy() {
    let server = server();
    let (prompt, prompt_ids, ids) = golden();
    let req = json!({"model": MODEL, "prompt": prompt, "raw": true, "stream": false, "options": greedy(32)});
    let v = post_json(&server, "/api/generate", &req);
    check_final(&v, "length");
    assert_eq!(v["eval_count"], 32);
    assert_eq!(v["prompt_eval_count"], prompt_ids.len());
    let context: Vec<u64> = serde_json::from_value(v["context"].clone()).unwrap();
    assert_eq!(context.len(), prompt_ids.len() + 32, "{v}");
    assert_eq!(context[..prompt_ids.len()], prompt_ids[..]);
    let served = &context[prompt_ids.len()..];
    let sure = first_near_tie();
    assert_eq!(
        served[..sure],
        ids[..sure],
        "llama.cpp's greedy tokens up to its first near-tie (step {sure})"
    );
    let expected = decode(served);
    assert_eq!(v["response"], expected.as_str());

    // Streaming: the same text in pieces, then the final line.
    let mut req = req;
    req["stream"] = json!(true);
    let lines = ndjson_lines(post(&server, "/api/generate", &req));
    let (last, pieces) = lines.split_last().unwrap();
    let text: String = pieces
        .iter()
        .map(|l| {
            assert_eq!(l["done"], false);
            assert_eq!(l["model"], MODEL);
            check_timestamp(&l["created_at"]);
            l["response"].as_str().unwrap()
        })
        .collect();
    assert_eq!(text, expected);
    check_final(last, "length");
    assert_eq!(last["response"], "");
    assert_eq!(last["context"], json!(context));

    // `context` carries the conversation on: the prompt's last token as a new prompt.
    let head = &prompt_ids[..prompt_ids.len() - 1];
    let tail = decode(&prompt_ids[prompt_ids.len() - 1..]);
    let v = post_json(
        &server,
        "/api/generate",
        &json!({"model": MODEL, "prompt": tail, "raw": true, "context": head, "stream": false, "options": greedy(32)}),
    );
    assert_eq!(v["response"], expected.as_str());
    assert_eq!(v["context"], json!(context));
}

/// Gemma 3's GGUF has no chat template: raw completion matches llama.cpp, chat says what to do.
#[test]
fn gemma_raw_generate_matches_llama_cpp_and_chat_needs_a_template() {
    let server = TestServer::start(&[gemma3().to_str().unwrap(), "--ctx-size", "512"]);
    let model = "gemma-3-270m-q4_k_m";
    let (prompt, prompt_ids, ids) = golden_of("gemma3");
    let v = post_json(
        &server,
        "/api/generate",
        &json!({"model": model, "prompt": prompt, "raw": true, "stream": false, "options": greedy(32)}),
    );
    assert_eq!(v["eval_count"], 32);
    let context = ids_of(&v["context"]);
    let (ours_prompt, ours) = context.split_at(prompt_ids.len());
    assert_eq!(ours_prompt, prompt_ids);
    assert_eq!(v["response"], decode_with(&gemma3(), ours).as_str());
    // Greedy paths may part only where llama.cpp's top two logits are within its own noise
    // (tests/goldens/README.md); this Q4_K model has such near-ties.
    if let Some(step) = ours.iter().zip(&ids).position(|(a, b)| a != b) {
        let (gaps, noise) = gemma_gaps_and_noise();
        assert!(
            gaps[step] < noise,
            "parted from llama.cpp at step {step}, where its margin was {} (noise {noise})",
            gaps[step]
        );
    }

    for (path, body) in [
        (
            "/api/chat",
            json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}),
        ),
        ("/api/generate", json!({"model": model, "prompt": "hi"})),
    ] {
        let r = post(&server, path, &body);
        assert_eq!(r.status(), 400);
        let v: Value = r.json().unwrap();
        let e = v["error"].as_str().unwrap();
        assert!(
            e.contains("has no chat template") && e.contains("raw: true"),
            "{e}"
        );
    }
    let tags = get_json(&server, "/api/tags");
    let details = &tags["models"][0]["details"];
    assert_eq!(
        (
            details["family"].as_str(),
            details["quantization_level"].as_str()
        ),
        (Some("gemma3"), Some("Q4_K_M"))
    );
}

#[test]
fn stop_num_predict_and_num_ctx_end_generation() {
    let server = server();
    let (prompt, prompt_ids, ids) = golden();
    let full = decode(&ids);
    let gen = |options: Value| {
        post_json(
            &server,
            "/api/generate",
            &json!({"model": format!("{MODEL}:latest"), "prompt": prompt, "raw": true, "stream": false, "options": options}),
        )
    };
    let mut o = greedy(32);
    o["stop"] = json!(["."]);
    let v = gen(o);
    assert_eq!(v["response"], full.split('.').next().unwrap());
    assert_eq!(v["done_reason"], "stop");
    // The client's spelling of the model comes back as sent.
    assert_eq!(v["model"], format!("{MODEL}:latest"));

    let v = gen(greedy(5));
    assert_eq!(v["response"], decode(&ids[..5]).as_str());
    assert_eq!(
        (v["done_reason"].as_str(), v["eval_count"].as_u64()),
        (Some("length"), Some(5))
    );

    // num_ctx limits prompt and output together.
    let mut o = greedy(-1);
    o["num_ctx"] = json!(prompt_ids.len() + 3);
    let v = gen(o);
    assert_eq!(v["response"], decode(&ids[..3]).as_str());
    assert_eq!(
        (v["done_reason"].as_str(), v["eval_count"].as_u64()),
        (Some("length"), Some(3))
    );
}

#[test]
fn chat_streams_and_answers_whole() {
    let server = server();
    let req = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "system": "Answer in one word.",
        "options": greedy(12),
    });
    let lines = ndjson_lines(post(&server, "/api/chat", &req));
    let (last, pieces) = lines.split_last().unwrap();
    assert!(!pieces.is_empty());
    let mut text = String::new();
    for l in pieces {
        assert_eq!(l["done"], false, "{l}");
        assert_eq!(l["message"]["role"], "assistant");
        text.push_str(l["message"]["content"].as_str().unwrap());
    }
    check_final(last, last["done_reason"].as_str().unwrap_or("?"));
    assert_eq!(last["message"], json!({"role": "assistant", "content": ""}));
    assert!(last.get("context").is_none());
    let n = last["eval_count"].as_u64().unwrap();
    match last["done_reason"].as_str() {
        Some("length") => assert_eq!(n, 12),
        Some("stop") => assert!(n <= 12),
        other => panic!("done_reason {other:?}"),
    }

    // Not streamed: the same greedy text in one object.
    let mut whole = req.clone();
    whole["stream"] = json!(false);
    let v = post_json(&server, "/api/chat", &whole);
    assert_eq!(v["message"]["content"], text.as_str());
    assert_eq!(v["message"]["role"], "assistant");
    assert_eq!(v["eval_count"], n);
    assert_eq!(v["prompt_eval_count"], last["prompt_eval_count"]);

    // A system message of the conversation's own wins over the top-level one.
    let mut own = whole.clone();
    own["messages"] = json!([
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "What is the capital of France?"}
    ]);
    own["system"] = json!("Ignore this.");
    let v = post_json(&server, "/api/chat", &own);
    assert_eq!(v["message"]["content"], text.as_str());
    assert_eq!(v["prompt_eval_count"], last["prompt_eval_count"]);
}

#[test]
fn load_and_unload() {
    let server = TestServer::start(&[smollm2().to_str().unwrap(), "--ctx-size", "512", "--lazy"]);
    let size = std::fs::metadata(smollm2()).unwrap().len();
    assert_eq!(get_json(&server, "/api/ps"), json!({"models": []}));

    let v = post_json(&server, "/api/generate", &json!({"model": MODEL}));
    assert_eq!(
        (v["done"].as_bool(), v["done_reason"].as_str()),
        (Some(true), Some("load"))
    );
    assert_eq!(v["response"], "");
    let ps = get_json(&server, "/api/ps");
    let m = &ps["models"][0];
    assert_eq!(m["name"], format!("{MODEL}:latest"));
    assert_eq!(
        (m["size"].as_u64(), m["size_vram"].as_u64()),
        (Some(size), Some(0))
    );
    assert_eq!(m["context_length"], 512);
    // The server keeps models forever by default: Ollama's farthest time, in 2300-something.
    assert!(m["expires_at"].as_str().unwrap().starts_with("23"), "{m}");

    // A request's keep_alive replaces the model's: now it unloads within the hour.
    let v = post_json(
        &server,
        "/api/generate",
        &json!({"model": MODEL, "keep_alive": "1h"}),
    );
    assert_eq!(v["done_reason"], "load");
    let ps = get_json(&server, "/api/ps");
    check_timestamp(&ps["models"][0]["expires_at"]);
    let expires = ps["models"][0]["expires_at"].as_str().unwrap();
    assert!(expires.starts_with("20"), "{expires}");

    let v = post_json(
        &server,
        "/api/chat",
        &json!({"model": MODEL, "messages": [], "keep_alive": 0}),
    );
    assert_eq!(v["done_reason"], "unload");
    assert_eq!(v["message"], json!({"role": "assistant", "content": ""}));
    assert_eq!(get_json(&server, "/api/ps"), json!({"models": []}));
}

#[test]
fn listings_describe_the_model() {
    let server = server();
    let size = std::fs::metadata(smollm2()).unwrap().len();
    let tags = get_json(&server, "/api/tags");
    let t = &tags["models"][0];
    assert_eq!(tags["models"].as_array().unwrap().len(), 1);
    assert_eq!(
        (t["name"].as_str(), t["model"].as_str()),
        (
            Some("SmolLM2-135M-Instruct.Q4_1:latest"),
            Some("SmolLM2-135M-Instruct.Q4_1:latest")
        )
    );
    assert_eq!(t["size"], size);
    check_timestamp(&t["modified_at"]);
    let digest = t["digest"].as_str().unwrap();
    assert!(
        digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
        "{digest}"
    );
    // The same file keeps its digest, in every listing.
    assert_eq!(
        get_json(&server, "/api/tags")["models"][0]["digest"],
        digest
    );
    assert_eq!(get_json(&server, "/api/ps")["models"][0]["digest"], digest);
    let n_params: u64 = GgufFile::open(smollm2())
        .unwrap()
        .tensors()
        .iter()
        .map(|t| t.n_elements())
        .sum();
    assert_eq!(n_params, 134_515_008);
    assert_eq!(
        t["details"],
        json!({"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
               "parameter_size": "134.52M", "quantization_level": "Q4_1"})
    );

    let file = GgufFile::open(smollm2()).unwrap();
    let meta = file.metadata();
    let show = post_json(&server, "/api/show", &json!({"model": MODEL}));
    assert_eq!(
        show["template"],
        meta.get_str("tokenizer.chat_template").unwrap().unwrap()
    );
    assert_eq!(show["details"], t["details"]);
    assert_eq!(show["capabilities"], json!(["completion"]));
    assert_eq!(show["model_info"]["general.architecture"], "llama");
    assert_eq!(
        show["model_info"]["llama.context_length"],
        meta.get_u32("llama.context_length").unwrap().unwrap()
    );
    assert_eq!(show["model_info"]["tokenizer.ggml.tokens"], Value::Null);
    assert_eq!(show["parameters"], format!("{:<30} \"<|im_end|>\"", "stop"));
    assert!(show["modelfile"]
        .as_str()
        .unwrap()
        .starts_with(&format!("FROM {}\n", smollm2().display())));
    let verbose = post_json(
        &server,
        "/api/show",
        &json!({"model": MODEL, "verbose": true}),
    );
    let n_vocab = meta
        .get_str_array("tokenizer.ggml.tokens")
        .unwrap()
        .unwrap()
        .len();
    assert_eq!(
        verbose["model_info"]["tokenizer.ggml.tokens"]
            .as_array()
            .unwrap()
            .len(),
        n_vocab
    );
}

#[test]
fn version_and_root_answer() {
    let server = server();
    let v = get_json(&server, "/api/version");
    assert_eq!(v, json!({"version": env!("CARGO_PKG_VERSION")}));
    let r = reqwest::blocking::get(server.url("/")).unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    assert_eq!(r.text().unwrap(), "Ollama is running");
    let r = Client::new().head(server.url("/")).send().unwrap();
    assert_eq!(r.status(), 200);
}

#[test]
fn bad_requests_get_ollama_errors_and_the_server_goes_on() {
    let server = server();
    let m = MODEL;
    let gen = "/api/generate";
    let cases: Vec<(&str, String, u16, &str)> = vec![
        (gen, "{\"model\": ".into(), 400, "malformed JSON"),
        (gen, "".into(), 400, "empty"),
        (gen, "[1]".into(), 400, "must be a JSON object"),
        (gen, json!({"prompt": "hi"}).to_string(), 400, "model is required"),
        (gen, json!({"model": 5, "prompt": "hi"}).to_string(), 400, "model must be a string"),
        (gen, json!({"model": "nope", "prompt": "hi"}).to_string(), 404, "'nope' not found"),
        ("/api/chat", json!({"model": "nope", "messages": [{"role": "user", "content": "hi"}]}).to_string(), 404, "'nope' not found"),
        (gen, json!({"model": "nope"}).to_string(), 404, "'nope' not found"),
        (gen, json!({"model": m, "prompt": "hi", "stream": "yes"}).to_string(), 400, "stream must be true or false"),
        (gen, json!({"model": m, "prompt": "hi", "options": {"temperature": "hot"}}).to_string(), 400, "option temperature must be a number"),
        (gen, json!({"model": m, "prompt": "hi", "options": {"num_predict": 0}}).to_string(), 400, "num_predict"),
        (gen, json!({"model": m, "prompt": "hi", "options": {"num_predict": -3}}).to_string(), 400, "num_predict"),
        (gen, json!({"model": m, "prompt": "hi", "options": {"num_ctx": 1_000_000}}).to_string(), 400, "context of 512 tokens; start the server with a larger --ctx-size"),
        (gen, json!({"model": m, "prompt": "a b c d e f g h", "raw": true, "options": {"num_ctx": 2}}).to_string(), 400, "but num_ctx 2 limits prompt and generated tokens together"),
        (gen, json!({"model": m, "prompt": "hi", "options": {"top_p": 2}}).to_string(), 400, "top_p"),
        (gen, json!({"model": m, "prompt": "hi", "options": {"typical_p": 0.5}}).to_string(), 400, "typical_p = 0.5 is not supported"),
        (gen, json!({"model": m, "prompt": "hi", "options": [1]}).to_string(), 400, "options must be a JSON object"),
        (gen, json!({"model": m, "prompt": "hi", "template": "{{ .Prompt }}"}).to_string(), 400, "template is not supported"),
        (gen, json!({"model": m, "prompt": "hi", "format": "json"}).to_string(), 400, "format"),
        (gen, json!({"model": m, "prompt": "hi", "format": {"type": "object"}}).to_string(), 400, "format"),
        (gen, json!({"model": m, "prompt": "hi", "images": ["aGk="]}).to_string(), 400, "images are not supported"),
        (gen, json!({"model": m, "prompt": "hi", "think": true}).to_string(), 400, "think is not supported"),
        (gen, json!({"model": m, "prompt": "hi", "suffix": "end"}).to_string(), 400, "suffix"),
        (gen, json!({"model": m, "prompt": "hi", "keep_alive": "soon"}).to_string(), 400, "keep_alive 'soon' is not a duration"),
        (gen, json!({"model": m, "prompt": "hi", "context": ["a"]}).to_string(), 400, "context[0] must be a token id"),
        (gen, json!({"model": m, "prompt": "hi", "context": [99_999_999]}).to_string(), 400, "is not a token of this model"),
        ("/api/chat", json!({"model": m, "messages": "hi"}).to_string(), 400, "messages must be a list"),
        ("/api/chat", json!({"model": m, "messages": [{"content": "hi"}]}).to_string(), 400, "messages[0].role is required"),
        ("/api/chat", json!({"model": m, "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}]}).to_string(), 400, "tools are not supported"),
        ("/api/show", json!({"model": "nope"}).to_string(), 404, "'nope' not found"),
        ("/api/show", json!({}).to_string(), 400, "model is required"),
    ];
    for (path, body, status, text) in cases {
        let r = Client::new()
            .post(server.url(path))
            .body(body.clone())
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{path} {body}");
        assert!(r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"));
        let v: Value = r.json().unwrap();
        let message = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{path} {body}: {v}"));
        assert!(message.contains(text), "{path} {body}: {message}");
        assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
    }

    // Load-time and unknown options are accepted, with one warning naming them.
    let mut o = greedy(2);
    o["num_thread"] = json!(4);
    o["mirostat"] = json!(0);
    let v = post_json(
        &server,
        gen,
        &json!({"model": m, "prompt": "hi", "raw": true, "stream": false, "options": o}),
    );
    check_final(&v, "length");
    let logs = server.logs();
    let warning = logs
        .lines()
        .find(|l| l.contains("options ignored"))
        .unwrap_or_else(|| panic!("{logs}"));
    assert!(
        warning.contains("num_thread") && warning.contains("mirostat"),
        "{warning}"
    );
}

#[test]
fn a_client_that_goes_away_cancels_its_generation() {
    let server = server();
    let cancelled = "hearth_cancelled_requests_total";
    let before = server.metric(cancelled);
    // Greedy, this prompt repeats itself without an end-of-generation token, so only the
    // context (512 tokens here) would end it.
    let (prompt, _, _) = golden();
    let r = post(
        &server,
        "/api/generate",
        &json!({"model": MODEL, "prompt": prompt, "raw": true, "options": greedy(-1)}),
    );
    let mut reader = BufReader::new(r);
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    let v: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(v["done"], false);
    drop(reader);
    // The runner notices the closed channel before its next step.
    let mut seen = before;
    for _ in 0..200 {
        seen = server.metric(cancelled);
        if seen > before {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(seen, before + 1.0, "{}", server.logs());
    // Not streamed: the client gives up waiting for the one reply.
    let impatient = Client::builder()
        .timeout(std::time::Duration::from_millis(500))
        .build()
        .unwrap();
    let r = impatient
        .post(server.url("/api/generate"))
        .body(json!({"model": MODEL, "prompt": prompt, "raw": true, "stream": false, "options": greedy(-1)}).to_string())
        .send();
    assert!(
        r.is_err(),
        "the generation should outlast the client's patience"
    );
    for _ in 0..200 {
        seen = server.metric(cancelled);
        if seen > before + 1.0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(seen, before + 2.0, "{}", server.logs());
    let v = post_json(
        &server,
        "/api/generate",
        &json!({"model": MODEL, "prompt": "hi", "raw": true, "stream": false, "options": greedy(2)}),
    );
    check_final(&v, "length");
}

#[test]
fn the_official_python_client_works() {
    let server = server();
    let out = run_client_script(&server, "ollama_client.py", &[]);
    assert!(out.contains("all checks passed"), "{out}");
}
