//! Server metrics in the Prometheus text exposition format (`GET /metrics`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the latency histogram buckets.
const LATENCY_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A cumulative histogram over [`LATENCY_BUCKETS`].
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    /// Sum of observations in microseconds (an integer, so it can be atomic).
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (bound, count) in LATENCY_BUCKETS.iter().zip(&self.counts) {
            if s <= *bound {
                count.fetch_add(1, Relaxed);
            }
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_us.fetch_add(d.as_micros() as u64, Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bound, count) in LATENCY_BUCKETS.iter().zip(&self.counts) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{bound}\"}} {}",
                count.load(Relaxed)
            );
        }
        let n = self.count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {n}");
        let sum = self.sum_us.load(Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {n}");
    }
}

/// A gauge's name, help text and how to read it from an engine's gauges.
type GaugeDef = (&'static str, &'static str, fn(&EngineGauges) -> usize);

/// One loaded model's engine state, refreshed by its runner after every step.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineGauges {
    pub waiting: usize,
    pub running: usize,
    pub kv_blocks_used: usize,
    pub kv_blocks_free: usize,
}

/// Every counter the server exports. Shared by the HTTP layer and the runners.
#[derive(Debug, Default)]
pub struct Metrics {
    /// (endpoint, status) -> requests answered.
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    pub prompt_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    /// Prompt tokens taken from the prefix cache instead of computed.
    pub prefix_cache_hit_tokens: AtomicU64,
    /// Requests that reused at least one cached block.
    pub prefix_cache_hits: AtomicU64,
    /// Requests whose client went away before they finished.
    pub cancelled: AtomicU64,
    pub preemptions: AtomicU64,
    /// Greedy decode steps queued on the device before the step before them had brought its
    /// tokens back (`RunnerConfig::chain_greedy`).
    pub chained_steps: AtomicU64,
    pub ttft: Histogram,
    pub inter_token: Histogram,
    /// Model name -> its engine's gauges.
    engines: Mutex<BTreeMap<String, EngineGauges>>,
}

impl Metrics {
    pub fn count_request(&self, endpoint: &str, status: u16) {
        let mut map = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry((endpoint.to_string(), status)).or_default() += 1;
    }

    pub fn set_engine(&self, model: &str, gauges: EngineGauges) {
        let mut map = self.engines.lock().unwrap_or_else(|e| e.into_inner());
        // NOTE: called after every engine step; no allocation once the model has an entry.
        match map.get_mut(model) {
            Some(g) => *g = gauges,
            None => {
                map.insert(model.to_string(), gauges);
            }
        }
    }

    /// Forget an unloaded model's gauges.
    pub fn remove_engine(&self, model: &str) {
        let mut map = self.engines.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(model);
    }

    /// The current state of a model's engine, if it is loaded.
    pub fn engine(&self, model: &str) -> Option<EngineGauges> {
        let map = self.engines.lock().unwrap_or_else(|e| e.into_inner());
        map.get(model).copied()
    }

    /// Everything, in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP hearth_requests_total HTTP requests answered, by endpoint and status.\n# TYPE hearth_requests_total counter"
        );
        {
            let map = self.requests.lock().unwrap_or_else(|e| e.into_inner());
            for ((endpoint, status), n) in map.iter() {
                let _ = writeln!(
                    out,
                    "hearth_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}"
                );
            }
        }
        let counters = [
            (
                "hearth_prompt_tokens_total",
                "Prompt tokens of finished requests.",
                &self.prompt_tokens,
            ),
            (
                "hearth_generated_tokens_total",
                "Tokens generated.",
                &self.generated_tokens,
            ),
            (
                "hearth_prefix_cache_hit_tokens_total",
                "Prompt tokens served from the prefix cache.",
                &self.prefix_cache_hit_tokens,
            ),
            (
                "hearth_prefix_cache_hits_total",
                "Requests that reused cached KV blocks.",
                &self.prefix_cache_hits,
            ),
            (
                "hearth_cancelled_requests_total",
                "Requests cancelled because the client went away.",
                &self.cancelled,
            ),
            (
                "hearth_preemptions_total",
                "Requests preempted (KV blocks freed, recomputed later).",
                &self.preemptions,
            ),
            (
                "hearth_chained_steps_total",
                "Greedy decode steps queued before the step before them returned its tokens.",
                &self.chained_steps,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Relaxed)
            );
        }
        self.ttft.render(
            &mut out,
            "hearth_time_to_first_token_seconds",
            "Time from request arrival to its first generated token.",
        );
        self.inter_token.render(
            &mut out,
            "hearth_inter_token_latency_seconds",
            "Time between consecutive generated tokens of a request.",
        );
        let engines = self.engines.lock().unwrap_or_else(|e| e.into_inner());
        let gauges: [GaugeDef; 4] = [
            (
                "hearth_queue_depth",
                "Requests waiting to be scheduled.",
                |g| g.waiting,
            ),
            (
                "hearth_running_sequences",
                "Requests holding KV blocks.",
                |g| g.running,
            ),
            ("hearth_kv_blocks_used", "KV cache blocks in use.", |g| {
                g.kv_blocks_used
            }),
            (
                "hearth_kv_blocks_free",
                "KV cache blocks free (cached blocks included).",
                |g| g.kv_blocks_free,
            ),
        ];
        for (name, help, get) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (model, g) in engines.iter() {
                let _ = writeln!(out, "{name}{{model=\"{model}\"}} {}", get(g));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_millis(7));
        h.observe(Duration::from_millis(200));
        let mut out = String::new();
        h.render(&mut out, "x", "help");
        assert!(out.contains("x_bucket{le=\"0.005\"} 0\n"));
        assert!(out.contains("x_bucket{le=\"0.01\"} 1\n"));
        assert!(out.contains("x_bucket{le=\"0.25\"} 2\n"));
        assert!(out.contains("x_bucket{le=\"+Inf\"} 2\n"));
        assert!(out.contains("x_count 2\n"));
        assert!(out.contains("x_sum 0.207\n"));
    }

    #[test]
    fn requests_and_gauges_are_labelled() {
        let m = Metrics::default();
        m.count_request("/v1/chat/completions", 200);
        m.count_request("/v1/chat/completions", 200);
        m.count_request("/api/chat", 404);
        m.set_engine(
            "smol",
            EngineGauges {
                waiting: 1,
                running: 2,
                kv_blocks_used: 3,
                kv_blocks_free: 4,
            },
        );
        let text = m.render();
        assert!(text.contains(
            "hearth_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2\n"
        ));
        assert!(text.contains("hearth_requests_total{endpoint=\"/api/chat\",status=\"404\"} 1\n"));
        assert!(text.contains("hearth_kv_blocks_free{model=\"smol\"} 4\n"));
        assert!(text.contains("hearth_queue_depth{model=\"smol\"} 1\n"));
    }
}
