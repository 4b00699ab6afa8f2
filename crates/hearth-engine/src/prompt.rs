//! Turning conversations and texts into prompt token ids, shareable across threads so request
//! handlers can tokenize while the engine runs.

use std::sync::Arc;

use hearth_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};

use crate::EngineError;

/// A model's tokenizer and chat template. Cheap to clone.
#[derive(Clone, Debug)]
pub struct PromptBuilder {
    pub tokenizer: Arc<Tokenizer>,
    template: Option<Arc<ChatTemplate>>,
}

impl PromptBuilder {
    pub fn new(tokenizer: Arc<Tokenizer>, template: Option<ChatTemplate>) -> Self {
        Self {
            tokenizer,
            template: template.map(Arc::new),
        }
    }

    /// The chat template's name, when the model has one.
    pub fn template_name(&self) -> Option<&str> {
        self.template.as_ref().map(|t| t.name())
    }

    /// Render a conversation with the chat template and tokenize it (special tokens parsed;
    /// BOS added as the model's metadata asks, unless the template already wrote it).
    pub fn chat(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, EngineError> {
        let template = self.template.as_ref().ok_or_else(|| {
            EngineError::Invalid(
                "the model has no chat template: pass --template chatml|llama3|gemma|mistral, or --raw"
                    .into(),
            )
        })?;
        let text = template
            .render(
                messages,
                true,
                self.tokenizer.bos_text(),
                self.tokenizer.eos_text(),
            )
            .map_err(EngineError::Template)?;
        self.tokenizer
            .encode_prompt(&text, true)
            .map_err(EngineError::Template)
    }

    /// Tokenize a plain-text prompt as a completion: special tokens in the text are parsed,
    /// BOS added as the model's metadata asks.
    pub fn raw(&self, text: &str) -> Result<Vec<u32>, EngineError> {
        self.tokenizer
            .encode_prompt(text, true)
            .map_err(|e| EngineError::Invalid(format!("tokenizer: {e}")))
    }
}
