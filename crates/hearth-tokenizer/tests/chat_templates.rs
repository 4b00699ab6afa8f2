//! Chat templates render exactly as Python's jinja2 does under transformers' settings
//! (fixtures/chat_templates.json, written by fixtures/make_template_fixtures.py).

mod common;

use hearth_tokenizer::{ChatMessage, ChatTemplate, TokenizerError};

#[derive(serde::Deserialize)]
struct Fixture {
    messages: Vec<ChatMessage>,
    bos_token: String,
    eos_token: String,
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    template: String,
    add_generation_prompt: bool,
    expected: String,
}

fn template(name: &str) -> ChatTemplate {
    match name {
        "smollm2" => {
            let file = common::open_model(common::SMOLLM2);
            ChatTemplate::from_gguf(file.metadata())
                .expect("template compiles")
                .expect("SmolLM2 embeds a chat template")
        }
        "gemma3" => ChatTemplate::new(
            "gemma3",
            include_str!("fixtures/gemma3_chat_template.jinja"),
        )
        .expect("Gemma 3 template compiles"),
        other => {
            let builtin = other
                .strip_prefix("builtin:")
                .unwrap_or_else(|| panic!("unknown fixture template {other}"));
            ChatTemplate::builtin(builtin).expect("builtin compiles")
        }
    }
}

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi!"),
        ChatMessage::new("assistant", "Hello."),
        ChatMessage::new("user", "Bye"),
    ]
}

#[test]
fn templates_render_like_jinja2() {
    let fixture: Fixture =
        serde_json::from_str(include_str!("fixtures/chat_templates.json")).expect("fixture parses");
    assert!(fixture.cases.len() >= 12);
    for case in &fixture.cases {
        let rendered = template(&case.template)
            .render(
                &fixture.messages,
                case.add_generation_prompt,
                &fixture.bos_token,
                &fixture.eos_token,
            )
            .unwrap_or_else(|e| panic!("{}: {e}", case.template));
        assert_eq!(
            rendered, case.expected,
            "{} (add_generation_prompt = {})",
            case.template, case.add_generation_prompt
        );
    }
}

#[test]
fn builtins_render_known_strings() {
    let render = |name: &str| {
        ChatTemplate::builtin(name)
            .unwrap()
            .render(&conversation(), true, "<s>", "</s>")
            .unwrap()
    };
    assert_eq!(
        render("chatml"),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n\
         <|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(
        render("llama3"),
        "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    assert_eq!(
        render("gemma"),
        "<s><start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n\
         <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
    );
    assert_eq!(
        render("mistral"),
        "<s>[INST] Hi![/INST] Hello.</s>[INST] Be brief.\n\nBye[/INST]"
    );
}

#[test]
fn raise_exception_carries_its_message() {
    let messages = [ChatMessage::new("assistant", "first")];
    let err = ChatTemplate::builtin("gemma")
        .unwrap()
        .render(&messages, false, "", "")
        .unwrap_err();
    match err {
        TokenizerError::TemplateException { name, message } => {
            assert_eq!(name, "gemma");
            assert_eq!(
                message,
                "Conversation roles must alternate user/assistant/user/assistant/..."
            );
        }
        other => panic!("expected a template exception, got {other}"),
    }
}

#[test]
fn python_methods_functions_and_filters() {
    let source = "{{ messages[0].content.strip().upper() }}|{{ messages[0]['content'].startswith('  a') }}|\
                  {{ {'b': 1, 'a': [true, none, 'é\"']} | tojson }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|\
                  {{ [1, {'k': 'v'}] | tojson(indent=2) }}|\
                  {% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.role }}{% endfor %}|\
                  {{ strftime_now('%Y') | length }}";
    let messages = [
        ChatMessage::new("user", "  abc "),
        ChatMessage::new("assistant", "x"),
    ];
    let rendered = ChatTemplate::new("t", source)
        .unwrap()
        .render(&messages, false, "", "")
        .unwrap();
    assert_eq!(
        rendered,
        "ABC|True|{\"b\": 1, \"a\": [true, null, \"é\\\"\"]}|{\"a\": 2, \"b\": 1}|\
         [\n  1,\n  {\n    \"k\": \"v\"\n  }\n]|user|4"
    );
}

#[test]
fn whitespace_control_matches_transformers() {
    // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
    let source = "{% for m in messages %}\n    {% if true %}\n[{{ m.role }}]\n    {% endif %}\n{% endfor %}\n";
    let messages = [ChatMessage::new("user", "")];
    let rendered = ChatTemplate::new("t", source)
        .unwrap()
        .render(&messages, false, "", "")
        .unwrap();
    assert_eq!(rendered, "[user]\n");
}

#[test]
fn errors_name_the_template() {
    let err = ChatTemplate::new("broken", "{% if %}").unwrap_err();
    assert!(err.to_string().contains("broken"), "{err}");
    let err = ChatTemplate::builtin("nonesuch").unwrap_err();
    assert!(err.to_string().contains("nonesuch"), "{err}");
}

#[test]
fn gemma3_gguf_has_no_embedded_template() {
    let file = common::open_model(common::GEMMA3);
    assert!(ChatTemplate::from_gguf(file.metadata()).unwrap().is_none());
}
