//! The Anthropic streaming client over reqwest (feature `anthropic`): request body and
//! normalizer from the parent module, transport from [`crate::provider::http`].

use std::time::SystemTime;

use async_trait::async_trait;

use super::*;
use crate::error::ModelError;
use crate::model::{DeltaStream, Model, ModelRequest};
use crate::provider::http::{post_stream, HttpConfig, ProviderKind};

/// An Anthropic Messages client (R-STR-5). Never retries (R-IN-6).
#[derive(Debug, Clone)]
pub(crate) struct AnthropicModel {
    model: String,
    config: HttpConfig,
    client: reqwest::Client,
}

impl AnthropicModel {
    /// A client for `model` (used when a request's `model` is empty). `config.provider`
    /// should be [`ProviderKind::Anthropic`].
    pub(crate) fn new(model: impl Into<String>, config: HttpConfig) -> Result<Self, ModelError> {
        let client = config.build_client()?;
        Ok(AnthropicModel {
            model: model.into(),
            config,
            client,
        })
    }
}

#[async_trait]
impl Model for AnthropicModel {
    fn name(&self) -> String {
        format!("{}:{}", ProviderKind::Anthropic, self.model)
    }

    // The wall clock resolves `retry-after` HTTP-dates at the network edge (not in a machine).
    #[allow(clippy::disallowed_methods)]
    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
        let mut body = request_body(&request, &self.model, self.config.default_max_tokens);
        if let Some(budget) = self.config.thinking_budget {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        let mut headers = vec![(
            "anthropic-version".to_string(),
            ANTHROPIC_VERSION.to_string(),
        )];
        if let Some(key) = &self.config.api_key {
            headers.push(("x-api-key".to_string(), key.expose().to_string()));
        }
        post_stream(
            &self.client,
            &self.config,
            headers,
            body,
            AnthropicNormalizer::new(),
            SystemTime::now,
        )
        .await
    }
}
