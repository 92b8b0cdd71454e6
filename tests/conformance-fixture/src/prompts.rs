//! The `prompts/*` fixtures: `test_simple_prompt`, `test_prompt_with_arguments`,
//! `test_prompt_with_embedded_resource`, `test_prompt_with_image` and the input-required
//! `test_input_required_result_prompt`, with the reference server's messages.

use std::sync::atomic::Ordering;

use rmcp::ErrorData;
use rmcp::model::{GetPromptRequestParams, GetPromptResponse, ListPromptsResult, Prompt};
use serde_json::{Value, json};

use crate::client_requests::elicit;
use crate::input_required::{elicit_answer, input_required, string_field};
use crate::{Fixture, TEST_IMAGE_BASE64, complete};

/// Every prompt, as `prompts/list` JSON.
pub(crate) fn table() -> Value {
    json!([
        {"name": "test_simple_prompt", "title": "Simple Test Prompt", "description": "A simple prompt without arguments"},
        {"name": "test_prompt_with_arguments", "title": "Prompt With Arguments", "description": "A prompt with required arguments",
         "arguments": [
            {"name": "arg1", "description": "First test argument", "required": true},
            {"name": "arg2", "description": "Second test argument", "required": true}]},
        {"name": "test_prompt_with_embedded_resource", "title": "Prompt With Embedded Resource", "description": "A prompt that includes an embedded resource",
         "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": true}]},
        {"name": "test_prompt_with_image", "title": "Prompt With Image", "description": "A prompt that includes image content"},
        {"name": "test_input_required_result_prompt", "description": "MRTR: prompt that requires elicitation input"}
    ])
}

impl Fixture {
    /// `prompts/list`: the table, plus `test_trigger_added_prompt` while toggled on.
    pub(crate) fn prompt_list(&self) -> ListPromptsResult {
        let mut prompts = self.shared.prompts.clone();
        if self.shared.extra_prompt.load(Ordering::Relaxed) {
            prompts.push(Prompt::new(
                "test_trigger_added_prompt",
                Some("Present while test_trigger_prompt_change has been called an odd number of times"),
                None,
            ));
        }
        ListPromptsResult::with_all_items(prompts)
    }
}

/// `prompts/get`.
pub(crate) fn get(params: GetPromptRequestParams) -> Result<GetPromptResponse, ErrorData> {
    let args = params.arguments.clone().unwrap_or_default();
    let arg = |key: &str| crate::str_arg(&args, key);
    let messages = match params.name.as_str() {
        "test_simple_prompt" => json!([{"role": "user",
            "content": {"type": "text", "text": "This is a simple prompt for testing."}}]),
        "test_prompt_with_arguments" => json!([{"role": "user", "content": {"type": "text",
            "text": format!("Prompt with arguments: arg1='{}', arg2='{}'", arg("arg1"), arg("arg2"))}}]),
        "test_prompt_with_embedded_resource" => json!([
            {"role": "user", "content": {"type": "resource", "resource": {
                "uri": arg("resourceUri"), "mimeType": "text/plain",
                "text": "Embedded resource content for testing."}}},
            {"role": "user", "content": {"type": "text", "text": "Please process the embedded resource above."}}
        ]),
        "test_prompt_with_image" => json!([
            {"role": "user", "content": {"type": "image", "data": TEST_IMAGE_BASE64, "mimeType": "image/png"}},
            {"role": "user", "content": {"type": "text", "text": "Please analyze the image above."}}
        ]),
        "test_input_required_result_prompt" => {
            match elicit_answer(&params.input_responses, "user_context")? {
                Some(content) => json!([{"role": "user", "content": {"type": "text",
                    "text": format!("Prompt with context: {}", string_field(content, "context"))}}]),
                None => {
                    let ask = json!({"user_context": elicit("What context should the prompt use?",
                        json!({"context": {"type": "string"}}), json!(["context"]))});
                    return Ok(input_required(ask, None)?.into());
                }
            }
        }
        other => {
            return Err(ErrorData::invalid_params(
                format!("unknown prompt: {other}"),
                None,
            ));
        }
    };
    Ok(complete::<rmcp::model::GetPromptResult>(json!({"messages": messages}))?.into())
}
