//! Chat templates: Jinja templates (as stored in `tokenizer.chat_template`) rendered with
//! `minijinja`, configured to behave like HF transformers' Jinja2 environment.

use crate::TokenizerError;
use hearth_gguf::Metadata;
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};
use std::fmt::Write as _;

const KEY_CHAT_TEMPLATE: &str = "tokenizer.chat_template";
const TEMPLATE: &str = "chat";
/// Prefix of errors raised by the template's `raise_exception`, to tell them apart.
const RAISED: &str = "raise_exception: ";

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The message text.
    pub content: String,
}

impl ChatMessage {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template.
pub struct ChatTemplate {
    name: String,
    env: Environment<'static>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`; `name` appears in error messages.
    pub fn new(name: &str, source: &str) -> Result<ChatTemplate, TokenizerError> {
        let mut env = Environment::new();
        // NOTE: transformers compiles chat templates with
        // `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
        // extensions=[loopcontrols])` and Jinja2's default of dropping one trailing newline;
        // templates are written against that, so whitespace only matches with the same settings.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(TEMPLATE, source.to_string())
            .map_err(|e| template_error(name, &e))?;
        Ok(ChatTemplate {
            name: name.to_string(),
            env,
        })
    }

    /// The template stored in `tokenizer.chat_template`, if the file has one.
    pub fn from_gguf(meta: &Metadata) -> Result<Option<ChatTemplate>, TokenizerError> {
        match meta.get_str(KEY_CHAT_TEMPLATE)? {
            Some(source) => Ok(Some(ChatTemplate::new(KEY_CHAT_TEMPLATE, source)?)),
            None => Ok(None),
        }
    }

    /// A template shipped with this crate: `chatml`, `llama3`, `gemma` or `mistral`.
    pub fn builtin(name: &str) -> Result<ChatTemplate, TokenizerError> {
        let source = match name {
            "chatml" => include_str!("templates/chatml.jinja"),
            "llama3" => include_str!("templates/llama3.jinja"),
            "gemma" => include_str!("templates/gemma.jinja"),
            "mistral" => include_str!("templates/mistral.jinja"),
            other => return Err(TokenizerError::UnknownTemplate(other.to_string())),
        };
        ChatTemplate::new(name, source)
    }

    /// The name given at construction.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Renders a conversation. `bos` / `eos` are the tokenizer's BOS / EOS texts.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        bos: &str,
        eos: &str,
    ) -> Result<String, TokenizerError> {
        let ctx = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => bos,
            eos_token => eos,
        };
        let template = self
            .env
            .get_template(TEMPLATE)
            .map_err(|e| template_error(&self.name, &e))?;
        template
            .render(ctx)
            .map_err(|e| template_error(&self.name, &e))
    }
}

fn template_error(name: &str, error: &Error) -> TokenizerError {
    // Find a `raise_exception` anywhere in the cause chain.
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if let Some(e) = e.downcast_ref::<Error>() {
            if let Some(message) = e.detail().and_then(|d| d.strip_prefix(RAISED)) {
                return TokenizerError::TemplateException {
                    name: name.to_string(),
                    message: message.to_string(),
                };
            }
        }
        cause = e.source();
    }
    let mut message = error.to_string();
    if let Some(line) = error.line() {
        let _ = write!(message, " (line {line})");
    }
    TokenizerError::Template {
        name: name.to_string(),
        message,
    }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("{RAISED}{message}"),
    ))
}

fn strftime_now(format: String) -> Result<String, Error> {
    let now = chrono::Local::now();
    let mut out = String::new();
    // An invalid format specifier surfaces as a formatting error, not a panic.
    write!(out, "{}", now.format(&format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format {format:?}"),
        )
    })?;
    Ok(out)
}

/// `tojson` as transformers defines it: Python's `json.dumps(x, ensure_ascii=False,
/// indent=indent, sort_keys=sort_keys)`, i.e. `", "` / `": "` separators (`","` between items
/// when indenting) and non-ASCII kept as is.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let style = JsonStyle {
        indent: kwargs.get("indent")?,
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&value, style, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

#[derive(Clone, Copy)]
struct JsonStyle {
    indent: Option<usize>,
    sort_keys: bool,
}

fn write_json(
    value: &Value,
    style: JsonStyle,
    depth: usize,
    out: &mut String,
) -> Result<(), Error> {
    let indent = style.indent;
    let newline = |out: &mut String, depth: usize| {
        if let Some(width) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(width * depth));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            let json = serde_json::to_string(value)
                .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
            out.push_str(&json);
        }
        ValueKind::String => {
            let text = value.as_str().unwrap_or_default();
            // serde_json escapes exactly the characters Python does with ensure_ascii=False.
            out.push_str(&serde_json::to_string(text).unwrap_or_default());
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                write_json(item, style, depth + 1, out)?;
            }
            newline(out, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter()?.collect();
            if style.sort_keys {
                keys.sort();
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                let key_text = key
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| key.to_string());
                out.push_str(&serde_json::to_string(&key_text).unwrap_or_default());
                out.push_str(": ");
                write_json(&value.get_item(key)?, style, depth + 1, out)?;
            }
            newline(out, depth);
            out.push('}');
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: cannot serialize a value of kind {}", value.kind()),
            ))
        }
    }
    Ok(())
}
