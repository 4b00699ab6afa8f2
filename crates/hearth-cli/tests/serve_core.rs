//! `hearth serve` basics that belong to neither API: health, metrics, API keys, start-up errors.

mod common;

use common::{smollm2, TestServer};

#[test]
fn health_and_metrics_answer() {
    let server = TestServer::start(&[smollm2().to_str().unwrap()]);
    let health_count = "hearth_requests_total{endpoint=\"/health\",status=\"200\"}";
    let before = server.metric(health_count);
    let r = reqwest::blocking::get(server.url("/health")).unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().unwrap(), r#"{"status":"ok"}"#);
    let blocks_free = server.metric("hearth_kv_blocks_free{model=\"SmolLM2-135M-Instruct.Q4_1\"}");
    assert!(blocks_free > 0.0);
    assert_eq!(server.metric(health_count), before + 1.0);
}

#[test]
fn unknown_paths_get_json_404s_in_each_apis_shape() {
    let server = TestServer::start(&[smollm2().to_str().unwrap()]);
    let r = reqwest::blocking::get(server.url("/v1/nothing")).unwrap();
    assert_eq!(r.status(), 404);
    let body: serde_json::Value = r.json().unwrap();
    assert_eq!(body["error"]["message"], "no route for GET /v1/nothing");
    assert_eq!(body["error"]["type"], "not_found_error");
    let r = reqwest::blocking::get(server.url("/api/nothing")).unwrap();
    assert_eq!(r.status(), 404);
    let body: serde_json::Value = r.json().unwrap();
    assert_eq!(body["error"], "no route for GET /api/nothing");
}

#[test]
fn binding_beyond_loopback_needs_an_api_key() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args([
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            smollm2().to_str().unwrap(),
        ])
        .env_remove("HEARTH_API_KEY")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("set --api-key"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn api_key_is_required_when_set() {
    let server = TestServer::start(&[smollm2().to_str().unwrap(), "--api-key", "sesame"]);
    let client = reqwest::blocking::Client::new();
    // Health and the Ollama probe stay open.
    assert_eq!(
        client.get(server.url("/health")).send().unwrap().status(),
        200
    );
    for (key, want) in [
        (None, 401),
        (Some("Bearer wrong"), 401),
        (Some("sesame"), 401),
        (Some("Bearer sesame"), 200),
    ] {
        let mut req = client.get(server.url("/metrics"));
        if let Some(k) = key {
            req = req.header("Authorization", k);
        }
        let r = req.send().unwrap();
        assert_eq!(r.status(), want, "{key:?}");
        if want == 401 {
            let body: serde_json::Value = r.json().unwrap();
            assert!(body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("API key"));
        }
    }
    let r = client.get(server.url("/api/tags")).send().unwrap();
    assert_eq!(r.status(), 401);
    let body: serde_json::Value = r.json().unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("API key"),
        "{body}"
    );
}

#[test]
fn missing_model_file_is_one_clear_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["serve", "--port", "0", "/nonexistent/model.gguf"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no such file: /nonexistent/model.gguf"),
        "{err}"
    );
}

#[test]
fn a_hugging_face_folder_is_served_and_listed() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hf-tiny-llama");
    let server = TestServer::start(&["--model", &format!("tiny={}", dir.display())]);
    let client = reqwest::blocking::Client::new();
    let r: serde_json::Value = client
        .post(server.url("/v1/completions"))
        .json(&serde_json::json!({"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(r["usage"]["completion_tokens"], 4, "{r}");
    let tags: serde_json::Value = client
        .get(server.url("/api/tags"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let details = &tags["models"][0]["details"];
    assert_eq!(details["format"], "safetensors", "{tags}");
    assert_eq!(details["family"], "llama", "{tags}");
    assert_eq!(details["quantization_level"], "F32", "{tags}");
}
