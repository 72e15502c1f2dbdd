//! The OpenAI Responses streaming client over reqwest (feature `openai-responses`): request
//! body and normalizer from the parent module, transport from [`crate::provider::http`].

use std::time::SystemTime;

use async_trait::async_trait;

use super::*;
use crate::error::ModelError;
use crate::model::{DeltaStream, Model, ModelRequest};
use crate::provider::http::{post_stream, HttpConfig, ProviderKind};

/// An OpenAI Responses API client (`POST {base}/responses`, stateless: `store: false`).
/// Never retries (R-IN-6).
#[derive(Debug, Clone)]
pub(crate) struct OpenAiResponsesModel {
    model: String,
    config: HttpConfig,
    client: reqwest::Client,
}

impl OpenAiResponsesModel {
    /// A client for `model` (used when a request's `model` is empty). `config.provider`
    /// should be [`ProviderKind::OpenAiResponses`].
    pub(crate) fn new(model: impl Into<String>, config: HttpConfig) -> Result<Self, ModelError> {
        let client = config.build_client()?;
        Ok(OpenAiResponsesModel {
            model: model.into(),
            config,
            client,
        })
    }
}

#[async_trait]
impl Model for OpenAiResponsesModel {
    fn name(&self) -> String {
        format!("{}:{}", ProviderKind::OpenAiResponses, self.model)
    }

    // The wall clock resolves `retry-after` HTTP-dates at the network edge (not in a machine).
    #[allow(clippy::disallowed_methods)]
    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
        let body = request_body_with(&request, &self.model, &self.config.responses_reasoning());
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
            ResponsesNormalizer::new(),
            SystemTime::now,
        )
        .await
    }
}
