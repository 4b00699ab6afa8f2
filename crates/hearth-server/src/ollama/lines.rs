//! The objects chat and generate replies are made of, with fields in Ollama's order
//! (`model` and `created_at` first, the counts last) so they read the same as Ollama's.

use std::time::Duration;

use serde::Serialize;

use super::timestamp;
use crate::runner::Summary;

/// Which endpoint a reply is for: chat lines carry `message`, generate lines `response`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Chat,
    Generate,
}

impl Api {
    /// The route, for logs.
    pub fn endpoint(self) -> &'static str {
        match self {
            Api::Chat => "/api/chat",
            Api::Generate => "/api/generate",
        }
    }
}

/// One line of a reply (or the whole reply, when not streamed).
#[derive(Debug, Serialize)]
pub struct Line<'a> {
    pub model: &'a str,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Message<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<&'a str>,
    pub done: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done_reason: Option<&'a str>,
    /// Generate's last line: prompt and generated token ids, for a follow-up request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<&'a [u32]>,
    #[serde(flatten)]
    pub counts: Option<Counts>,
}

/// An assistant message (chat).
#[derive(Debug, Serialize)]
pub struct Message<'a> {
    pub role: &'static str,
    pub content: &'a str,
}

/// A finished generation's counts and timings, durations in nanoseconds.
#[derive(Debug, Serialize)]
pub struct Counts {
    pub total_duration: u64,
    pub load_duration: u64,
    pub prompt_eval_count: usize,
    pub prompt_eval_duration: u64,
    pub eval_count: usize,
    pub eval_duration: u64,
}

impl Counts {
    /// From the runner's summary, the time since the request arrived and the load time.
    pub fn new(s: &Summary, total: Duration, load: Duration) -> Self {
        Self {
            total_duration: nanos(total),
            load_duration: nanos(load),
            prompt_eval_count: s.n_prompt,
            prompt_eval_duration: nanos(s.prompt_time),
            eval_count: s.n_generated,
            eval_duration: nanos(s.gen_time),
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<'a> Line<'a> {
    /// A line with (part of) the text, `done: false`, stamped now.
    pub fn text(api: Api, model: &'a str, text: &'a str) -> Self {
        let (message, response) = match api {
            Api::Chat => (
                Some(Message {
                    role: "assistant",
                    content: text,
                }),
                None,
            ),
            Api::Generate => (None, Some(text)),
        };
        Self {
            model,
            created_at: timestamp(chrono::Utc::now()),
            message,
            response,
            done: false,
            done_reason: None,
            context: None,
            counts: None,
        }
    }

    /// The whole reply to a request that only loads or unloads a model (`reason` is `load`
    /// or `unload`).
    pub fn status(api: Api, model: &'a str, reason: &'a str) -> Self {
        Self {
            done: true,
            done_reason: Some(reason),
            ..Self::text(api, model, "")
        }
    }

    /// The line as NDJSON: its JSON and a newline.
    pub fn ndjson(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_come_in_ollamas_order() {
        let line = String::from_utf8(Line::text(Api::Generate, "m", "Hi").ndjson()).unwrap();
        let rest = line.strip_prefix(r#"{"model":"m","created_at":""#).unwrap();
        assert!(
            rest.ends_with("Z\",\"response\":\"Hi\",\"done\":false}\n"),
            "{line}"
        );
        let status = serde_json::to_string(&Line::status(Api::Chat, "m", "load")).unwrap();
        assert!(
            status.ends_with(
                r#""message":{"role":"assistant","content":""},"done":true,"done_reason":"load"}"#
            ),
            "{status}"
        );
    }
}
