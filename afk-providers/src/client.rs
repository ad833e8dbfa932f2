//! What the provider clients share: settings, the provider layer's client built from them,
//! and one model call.

use std::time::Duration;

use afk_core::runner::{LlmRequest, PriceTable};
use afk_core::schema::LlmResponse;
use afk_core::{Error, Result};
use genai::adapter::AdapterKind;
use genai::chat::ChatOptions;
use genai::resolver::{AuthData, Endpoint, ProviderConfig};
use genai::{Headers, ModelIden, WebConfig};

use crate::{convert, error};

/// The header the step's idempotency key is sent in: the name of the IETF draft
/// <https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/>. A server or
/// gateway that deduplicates requests answers a repeated step from its cache; the others
/// ignore the header.
pub(crate) const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// Default bound on one model call, connection and answer included.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Default bound on connecting.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The settings of one provider client and the client built from them.
pub(crate) struct Inner {
    pub(crate) provider: &'static str,
    kind: AdapterKind,
    base_url: String,
    api_key: String,
    pub(crate) prices: PriceTable,
    timeout: Duration,
    max_tokens: Option<u32>,
    /// The client, or why it could not be built (each call then fails with it).
    client: Result<genai::Client>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the key.
        f.debug_struct("Client")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("timeout", &self.timeout)
            .field("max_tokens", &self.max_tokens)
            .field("prices", &self.prices)
            .finish_non_exhaustive()
    }
}

impl Inner {
    pub(crate) fn new(
        provider: &'static str,
        kind: AdapterKind,
        base_url: String,
        api_key: String,
    ) -> Self {
        let mut inner = Inner {
            provider,
            kind,
            base_url,
            api_key,
            prices: PriceTable::default(),
            timeout: DEFAULT_TIMEOUT,
            max_tokens: None,
            client: Err(Error::invalid_config("not built yet")),
        };
        inner.rebuild();
        inner
    }

    pub(crate) fn set_base_url(&mut self, url: String) {
        self.base_url = url;
        self.rebuild();
    }

    pub(crate) fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
        self.rebuild();
    }

    pub(crate) fn set_max_tokens(&mut self, max_tokens: u32) {
        self.max_tokens = Some(max_tokens);
    }

    /// The provider layer's client for the current settings: bound to one API, one base URL
    /// (with a trailing `/`, which the provider layer joins paths to) and one key.
    fn rebuild(&mut self) {
        let mut base = self.base_url.clone();
        if !base.ends_with('/') {
            base.push('/');
        }
        let config = ProviderConfig::from((
            Endpoint::from_owned(base),
            AuthData::from_single(self.api_key.clone()),
        ));
        let web = WebConfig::default()
            .with_timeout(self.timeout)
            .with_connect_timeout(CONNECT_TIMEOUT.min(self.timeout));
        self.client = genai::Client::builder()
            .with_adapter_kind(self.kind)
            .append_provider_config(self.kind, config)
            .with_web_config(web)
            .build()
            .map_err(|e| {
                Error::invalid_config(format!(
                    "{}: the HTTP client could not be built",
                    self.provider
                ))
                .with_source(Box::<dyn std::error::Error + Send + Sync>::from(
                    e.to_string(),
                ))
            });
    }

    /// One model call.
    pub(crate) async fn complete(&self, request: LlmRequest) -> Result<LlmResponse> {
        let mut options = ChatOptions::default()
            .with_capture_usage(true)
            .with_capture_tool_calls(true)
            .with_capture_content(true)
            .with_capture_raw_body(true)
            .with_extra_headers(Headers::from((
                IDEMPOTENCY_HEADER.to_owned(),
                request.idempotency_key.clone(),
            )));
        if let Some(n) = self.max_tokens {
            options = options.with_max_tokens(n);
        }
        let chat = convert::request(&request);
        let model = ModelIden::new(self.kind, request.model.clone());
        let client = self.client.as_ref().map_err(Clone::clone)?;
        let answer = client
            .exec_chat(model, chat, Some(&options))
            .await
            .map_err(|e| error::map(self.provider, e))?;
        Ok(convert::response(answer, &request.model, &self.prices))
    }
}

/// A missing setting of `from_env`.
pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `InvalidConfig` for a missing variable.
pub(crate) fn missing(name: &str) -> Error {
    Error::invalid_config(format!("{name} is not set"))
}
