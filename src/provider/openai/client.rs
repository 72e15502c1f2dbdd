//! The OpenAi streaming client over reqwest (feature `openai`): request body and
//! normalizer from the parent module, transport from [`crate::provider::http`].

use std::time::SystemTime;

use async_trait::async_trait;

use super::*;
use crate::error::ModelError;
use crate::model::{DeltaStream, Model, ModelRequest};
use crate::provider::http::{post_stream, HttpConfig, ProviderKind};

/// An OpenAI-compatible Chat Completions client (R-STR-5). Never retries (R-IN-6).
#[derive(Debug, Clone)]
pub(crate) struct OpenAiModel {
    model: String,
    config: HttpConfig,
    client: reqwest::Client,
}

impl OpenAiModel {
    /// A client for `model` (used when a request's `model` is empty). `config.provider`
    /// should be [`ProviderKind::OpenAi`].
    pub(crate) fn new(model: impl Into<String>, config: HttpConfig) -> Result<Self, ModelError> {
        let client = config.build_client()?;
        Ok(OpenAiModel {
            model: model.into(),
            config,
            client,
        })
    }
}

#[async_trait]
impl Model for OpenAiModel {
    fn name(&self) -> String {
        format!("{}:{}", ProviderKind::OpenAi, self.model)
    }

    // The wall clock resolves `retry-after` HTTP-dates at the network edge (not in a machine).
    #[allow(clippy::disallowed_methods)]
    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
        check_request(&request)?;
        let mut body = request_body_with(&request, &self.model, self.config.reasoning_replay);
        let wire = body["model"].as_str().unwrap_or_default().to_string();
        let completion = self
            .config
            .max_completion_tokens
            .unwrap_or_else(|| crate::provider::http::uses_max_completion_tokens(&wire));
        if completion {
            if let Some(m) = body.as_object_mut().and_then(|b| b.remove("max_tokens")) {
                body["max_completion_tokens"] = m;
            }
        }
        let mut headers = Vec::new();
        if let Some(key) = &self.config.api_key {
            headers.push((
                "authorization".to_string(),
                format!("Bearer {}", key.expose()),
            ));
        }
        post_stream(
            &self.client,
            &self.config,
            headers,
            body,
            OpenAiNormalizer::new().with_id_prefix(format!(
                "call_{}_{}_",
                request.run_id, request.model_call_index
            )),
            SystemTime::now,
        )
        .await
    }
}
