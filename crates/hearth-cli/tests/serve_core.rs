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
