//! The provider clients: one type per API, each an [`LlmClient`].

use std::time::Duration;

use afk_core::Result;
use afk_core::runner::{LlmClient, LlmRequest, PriceTable};
use afk_core::schema::LlmResponse;
use async_trait::async_trait;
use genai::adapter::AdapterKind;

use crate::client::{self, Inner};

/// The settings every provider client has, and its [`LlmClient`] impl.
macro_rules! provider_client {
    ($ty:ident) => {
        impl $ty {
            /// Send requests to `url` instead of the provider's own API (a proxy, a gateway, a
            /// compatible server). Paths are joined to it (`<url>/chat/completions`,
            /// `<url>/messages`), so it ends in the API's version (`…/v1`).
            #[must_use]
            pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
                self.inner.set_base_url(url.into());
                self
            }

            /// Price the answers: each answer's [`LlmResponse::cost_usd`] is its usage at the
            /// table's price for the model asked for (or, failing that, the model that
            /// answered), which the run's cost budget adds up. Without a table (the default)
            /// answers carry no cost.
            #[must_use]
            pub fn with_prices(mut self, prices: PriceTable) -> Self {
                self.inner.prices = prices;
                self
            }

            /// Bound one model call, from connecting to the last byte of the answer (default
            /// 120 s). A call that takes longer fails with `Timeout`, which is retryable: the
            /// run suspends and is resumed later.
            #[must_use]
            pub fn with_timeout(mut self, timeout: Duration) -> Self {
                self.inner.set_timeout(timeout);
                self
            }

            /// The most tokens an answer may have (the API's `max_tokens`).
            #[must_use]
            pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
                self.inner.set_max_tokens(max_tokens);
                self
            }
        }

        #[async_trait]
        impl LlmClient for $ty {
            fn provider(&self) -> String {
                self.inner.provider.to_owned()
            }

            /// One call of the API; see the crate docs for what is recorded and how errors
            /// are classified.
            async fn complete(&self, request: LlmRequest) -> Result<LlmResponse> {
                self.inner.complete(request).await
            }
        }
    };
}

/// OpenAI Chat Completions, at OpenAI or at any compatible server (Azure OpenAI, vLLM,
/// Ollama, llama.cpp's server, LiteLLM's proxy, OpenRouter): see
/// <https://platform.openai.com/docs/api-reference/chat/create>. Provider id `openai`.
///
/// ```
/// use afk_providers::OpenAi;
/// use afk_core::runner::{ModelPrice, PriceTable};
///
/// let local = OpenAi::new("unused").with_base_url("http://127.0.0.1:4000/v1");
/// let priced = OpenAi::new("sk-…")
///     .with_prices(PriceTable::new().with("gpt-4o-mini", ModelPrice::per_million(0.15, 0.6)));
/// ```
#[cfg(feature = "openai")]
#[derive(Debug)]
pub struct OpenAi {
    inner: Inner,
}

#[cfg(feature = "openai")]
impl OpenAi {
    /// OpenAI's API (`https://api.openai.com/v1`) with this API key.
    pub fn new(api_key: impl Into<String>) -> Self {
        OpenAi {
            inner: Inner::new(
                "openai",
                AdapterKind::OpenAI,
                "https://api.openai.com/v1".to_owned(),
                api_key.into(),
            ),
        }
    }

    /// From the environment: the key from `OPENAI_API_KEY`, the server from
    /// `OPENAI_BASE_URL` when set. A local server needs no key: with `OPENAI_BASE_URL` set
    /// and no key, the key sent is `none`. `InvalidConfig` when neither is set.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(client::env)
    }

    fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let base = var("OPENAI_BASE_URL");
        let key = match (var("OPENAI_API_KEY"), &base) {
            (Some(key), _) => key,
            (None, Some(_)) => "none".to_owned(),
            (None, None) => return Err(client::missing("OPENAI_API_KEY (or OPENAI_BASE_URL)")),
        };
        let client = OpenAi::new(key);
        Ok(match base {
            Some(url) => client.with_base_url(url),
            None => client,
        })
    }
}

#[cfg(feature = "openai")]
provider_client!(OpenAi);

/// Anthropic Messages: see <https://docs.anthropic.com/en/api/messages>. Provider id
/// `anthropic`.
#[cfg(feature = "anthropic")]
#[derive(Debug)]
pub struct Anthropic {
    inner: Inner,
}

#[cfg(feature = "anthropic")]
impl Anthropic {
    /// Anthropic's API (`https://api.anthropic.com/v1`) with this API key.
    pub fn new(api_key: impl Into<String>) -> Self {
        Anthropic {
            inner: Inner::new(
                "anthropic",
                AdapterKind::Anthropic,
                "https://api.anthropic.com/v1".to_owned(),
                api_key.into(),
            ),
        }
    }

    /// From the environment: the key from `ANTHROPIC_API_KEY` (`InvalidConfig` when unset),
    /// the server from `ANTHROPIC_BASE_URL` when set.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(client::env)
    }

    fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let key = var("ANTHROPIC_API_KEY").ok_or_else(|| client::missing("ANTHROPIC_API_KEY"))?;
        let client = Anthropic::new(key);
        Ok(match var("ANTHROPIC_BASE_URL") {
            Some(url) => client.with_base_url(url),
            None => client,
        })
    }
}

#[cfg(feature = "anthropic")]
provider_client!(Anthropic);

#[cfg(test)]
mod tests {
    use super::*;
    use afk_core::ErrorKind;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[cfg(feature = "openai")]
    #[test]
    fn openai_from_the_environment_needs_a_key_or_a_server() {
        let none = OpenAi::from_lookup(vars(&[]));
        assert_eq!(
            none.map(|_| ()).map_err(|e| e.kind()),
            Err(ErrorKind::InvalidConfig)
        );
        let local = OpenAi::from_lookup(vars(&[("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")]));
        assert!(format!("{:?}", local.map(|c| c.inner)).contains("http://127.0.0.1:1/v1"));
        let keyed = OpenAi::from_lookup(vars(&[("OPENAI_API_KEY", "sk-secret")]));
        let shown = format!("{:?}", keyed.map(|c| c.inner));
        assert!(
            shown.contains("api.openai.com") && !shown.contains("sk-secret"),
            "{shown}"
        );
    }

    #[cfg(feature = "anthropic")]
    #[test]
    fn anthropic_from_the_environment_needs_a_key() {
        let none = Anthropic::from_lookup(vars(&[("ANTHROPIC_BASE_URL", "http://x/v1")]));
        assert_eq!(
            none.map(|_| ()).map_err(|e| e.kind()),
            Err(ErrorKind::InvalidConfig)
        );
        let keyed = Anthropic::from_lookup(vars(&[("ANTHROPIC_API_KEY", "k")]));
        assert!(keyed.is_ok());
    }
}
