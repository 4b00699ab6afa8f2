//! Shared by the server tests: start `hearth serve` on a free port, find the test models and
//! the Python client environment.
#![allow(dead_code)]

pub mod http;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub fn models_dir() -> PathBuf {
    match std::env::var_os("HEARTH_TEST_MODELS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/hearth-test-models"),
    }
}

fn model(file: &str) -> PathBuf {
    let p = models_dir().join(file);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        p.display()
    );
    p
}

pub fn smollm2() -> PathBuf {
    model("SmolLM2-135M-Instruct.Q4_1.gguf")
}

pub fn gemma3() -> PathBuf {
    model("gemma-3-270m-q4_k_m.gguf")
}

/// The Python interpreter of the environment `scripts/setup-test-clients.sh` makes.
pub fn client_python() -> PathBuf {
    let venv = match std::env::var_os("HEARTH_TEST_VENV") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/hearth-test-venv"),
    };
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup-test-clients.sh (scripts/test.sh does)",
        python.display()
    );
    python
}

/// Runs a Python client script from `tests/clients/` against `server`; panics with its
/// output when it fails.
pub fn run_client_script(server: &TestServer, script: &str, extra: &[&str]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(script);
    let out = Command::new(client_python())
        .arg(&path)
        .arg(&server.base)
        .args(extra)
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- server log\n{}",
        server.logs()
    );
    stdout
}

/// A `hearth serve` process on a free port, killed when dropped.
pub struct TestServer {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl TestServer {
    /// Starts `hearth serve --port 0 <args>` and waits until `/health` says ok.
    pub fn start(args: &[&str]) -> TestServer {
        Self::start_with(args, true)
    }

    /// Like [`TestServer::start`]; with `wait_healthy == false` returns once it listens.
    pub fn start_with(args: &[&str], wait_healthy: bool) -> TestServer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
            .arg("serve")
            .args(["--port", "0", "--host", "127.0.0.1"])
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("HEARTH_API_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hearth serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("listening on ").nth(1) {
                    let _ = tx.send(addr.trim().to_string());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let base = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "hearth serve did not start listening:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        let server = TestServer { child, base, log };
        if wait_healthy {
            server.wait_healthy();
        }
        server
    }

    pub fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let client = reqwest::blocking::Client::new();
        while Instant::now() < deadline {
            if let Ok(r) = client.get(self.url("/health")).send() {
                if r.status().is_success() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("server never became healthy:\n{}", self.logs());
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Everything the server logged so far.
    pub fn logs(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The value of a metric line (`name` with its labels, exactly as exported).
    pub fn metric(&self, name_and_labels: &str) -> f64 {
        let text = reqwest::blocking::get(self.url("/metrics"))
            .and_then(|r| r.text())
            .expect("GET /metrics");
        text.lines()
            .find_map(|l| {
                l.strip_prefix(name_and_labels)?
                    .strip_prefix(' ')?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no metric {name_and_labels} in:\n{text}"))
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
