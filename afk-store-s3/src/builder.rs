//! Chainable setters of [`S3Config`], one per option, like afk-core's configs: a user outside
//! this crate cannot write the `#[non_exhaustive]` struct as a literal, so
//! `S3Config::new(bucket).with_…(…)` is how a config is built in code. Nothing is checked here;
//! [`S3Config::validate`] (called by [`S3Store::open`](crate::S3Store::open)) checks the whole.

use crate::config::{S3Config, Secret};

impl S3Config {
    /// Keep every object under this key prefix ([`S3Config::prefix`]).
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Talk to this S3-compatible endpoint instead of AWS ([`S3Config::endpoint`]).
    #[must_use]
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// Use this region ([`S3Config::region`]).
    #[must_use]
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Address buckets as `endpoint/bucket` or not ([`S3Config::force_path_style`]).
    #[must_use]
    pub fn with_force_path_style(mut self, force_path_style: bool) -> Self {
        self.force_path_style = force_path_style;
        self
    }

    /// Sign with this static key pair instead of the AWS credentials chain
    /// ([`S3Config::access_key_id`], [`S3Config::secret_access_key`]).
    #[must_use]
    pub fn with_credentials(
        mut self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> Self {
        self.access_key_id = Some(access_key_id.into());
        self.secret_access_key = Some(Secret::new(secret_access_key));
        self
    }

    /// The session token of temporary credentials, with [`S3Config::with_credentials`]
    /// ([`S3Config::session_token`]).
    #[must_use]
    pub fn with_session_token(mut self, session_token: impl Into<String>) -> Self {
        self.session_token = Some(Secret::new(session_token));
        self
    }

    /// Allow a service without conditional writes, for exactly one writing process
    /// ([`S3Config::single_writer`]; read its caveats first).
    #[must_use]
    pub fn with_single_writer(mut self, single_writer: bool) -> Self {
        self.single_writer = single_writer;
        self
    }

    /// Create the bucket at open time if it does not exist ([`S3Config::create_bucket`]).
    #[must_use]
    pub fn with_create_bucket(mut self, create_bucket: bool) -> Self {
        self.create_bucket = create_bucket;
        self
    }

    /// Set the connect timeout of one request ([`S3Config::connect_timeout_ms`]).
    #[must_use]
    pub fn with_connect_timeout_ms(mut self, ms: u64) -> Self {
        self.connect_timeout_ms = Some(ms);
        self
    }

    /// Set the timeout of one attempt of a request ([`S3Config::attempt_timeout_ms`]).
    #[must_use]
    pub fn with_attempt_timeout_ms(mut self, ms: u64) -> Self {
        self.attempt_timeout_ms = Some(ms);
        self
    }

    /// Set the timeout of one request with all its attempts
    /// ([`S3Config::operation_timeout_ms`]).
    #[must_use]
    pub fn with_operation_timeout_ms(mut self, ms: u64) -> Self {
        self.operation_timeout_ms = Some(ms);
        self
    }

    /// Set the attempts per request, 1 to 10 ([`S3Config::max_attempts`]).
    #[must_use]
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setter_sets_its_field_and_only_it() {
        let base = S3Config::new("b");
        let set = |f: fn(&mut S3Config)| {
            let mut want = base.clone();
            f(&mut want);
            want
        };
        let b = || base.clone();
        assert_eq!(b().with_prefix("p"), set(|c| c.prefix = "p".into()));
        assert_eq!(
            b().with_endpoint("http://e"),
            set(|c| c.endpoint = Some("http://e".into()))
        );
        assert_eq!(b().with_region("r"), set(|c| c.region = Some("r".into())));
        assert_eq!(
            b().with_force_path_style(true),
            set(|c| c.force_path_style = true)
        );
        assert_eq!(
            b().with_credentials("id", "secret"),
            set(|c| {
                c.access_key_id = Some("id".into());
                c.secret_access_key = Some(Secret::new("secret"));
            })
        );
        assert_eq!(
            b().with_single_writer(true),
            set(|c| c.single_writer = true)
        );
        assert_eq!(
            b().with_create_bucket(true),
            set(|c| c.create_bucket = true)
        );
        assert_eq!(
            b().with_connect_timeout_ms(1),
            set(|c| c.connect_timeout_ms = Some(1))
        );
        assert_eq!(
            b().with_attempt_timeout_ms(2),
            set(|c| c.attempt_timeout_ms = Some(2))
        );
        assert_eq!(
            b().with_operation_timeout_ms(3),
            set(|c| c.operation_timeout_ms = Some(3))
        );
        assert_eq!(b().with_max_attempts(4), set(|c| c.max_attempts = Some(4)));
    }
}
