//! Chainable setters of [`RedisConfig`], one per option, like afk-core's configs: a user
//! outside this crate cannot write the `#[non_exhaustive]` struct as a literal, so
//! `RedisConfig::single(host, port).with_…(…)` (or [`RedisConfig::cluster`]) is how a config is
//! built in code. Nothing is checked here; [`RedisConfig::validate`] (called by
//! [`RedisStore::open`](crate::RedisStore::open)) checks the whole.

use std::path::PathBuf;

use afk_core::config::Secret;

use crate::config::RedisConfig;

impl RedisConfig {
    /// A Redis Cluster configuration from its seed nodes `(host, port)`, every option at its
    /// default. One reachable seed is enough; the client learns the rest of the cluster.
    pub fn cluster<H: Into<String>>(nodes: impl IntoIterator<Item = (H, u16)>) -> Self {
        RedisConfig {
            nodes: nodes.into_iter().map(|(h, p)| (h.into(), p)).collect(),
            cluster: true,
            ..RedisConfig::default()
        }
    }

    /// Use TLS or not ([`RedisConfig::tls`]).
    #[must_use]
    pub fn with_tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }

    /// Trust the CA certificates in this PEM file instead of the webpki roots
    /// ([`RedisConfig::tls_ca`]); only with TLS.
    #[must_use]
    pub fn with_tls_ca(mut self, pem: impl Into<PathBuf>) -> Self {
        self.tls_ca = Some(pem.into());
        self
    }

    /// Present this client certificate chain and its private key (PEM files) for mutual TLS
    /// ([`RedisConfig::tls_cert`], [`RedisConfig::tls_key`]); only with TLS.
    #[must_use]
    pub fn with_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls_cert = Some(cert.into());
        self.tls_key = Some(key.into());
        self
    }

    /// Authenticate as this ACL user ([`RedisConfig::username`]).
    #[must_use]
    pub fn with_username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// Authenticate with this password ([`RedisConfig::password`]; never shown by `Debug`).
    #[must_use]
    pub fn with_password(mut self, password: impl Into<Secret>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Use this database index ([`RedisConfig::db`]; single node only).
    #[must_use]
    pub fn with_db(mut self, db: i64) -> Self {
        self.db = db;
        self
    }

    /// Put every key under this prefix ([`RedisConfig::prefix`]).
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Allow this long to open one connection ([`RedisConfig::connect_timeout_ms`]).
    #[must_use]
    pub fn with_connect_timeout_ms(mut self, ms: u64) -> Self {
        self.connect_timeout_ms = ms;
        self
    }

    /// Allow this long for one answer ([`RedisConfig::response_timeout_ms`]).
    #[must_use]
    pub fn with_response_timeout_ms(mut self, ms: u64) -> Self {
        self.response_timeout_ms = ms;
        self
    }

    /// Let every key of a finished run expire this long after it ended (runs that have not
    /// finished never expire)
    /// ([`RedisConfig::ttl_s`]).
    #[must_use]
    pub fn with_ttl_s(mut self, seconds: u64) -> Self {
        self.ttl_s = Some(seconds);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setter_sets_its_field_and_only_it() {
        let base = RedisConfig::single("h", 7000);
        let set = |f: fn(&mut RedisConfig)| {
            let mut want = base.clone();
            f(&mut want);
            want
        };
        let b = || base.clone();
        assert_eq!(b().with_tls(true), set(|c| c.tls = true));
        assert_eq!(
            b().with_tls_ca("/ca"),
            set(|c| c.tls_ca = Some("/ca".into()))
        );
        assert_eq!(
            b().with_client_cert("/c", "/k"),
            set(|c| {
                c.tls_cert = Some("/c".into());
                c.tls_key = Some("/k".into());
            })
        );
        assert_eq!(
            b().with_username("u"),
            set(|c| c.username = Some("u".into()))
        );
        assert_eq!(
            b().with_password("p"),
            set(|c| c.password = Some("p".into()))
        );
        assert_eq!(b().with_db(3), set(|c| c.db = 3));
        assert_eq!(b().with_prefix("x"), set(|c| c.prefix = "x".into()));
        assert_eq!(
            b().with_connect_timeout_ms(7),
            set(|c| c.connect_timeout_ms = 7)
        );
        assert_eq!(
            b().with_response_timeout_ms(8),
            set(|c| c.response_timeout_ms = 8)
        );
        assert_eq!(b().with_ttl_s(9), set(|c| c.ttl_s = Some(9)));
    }

    #[test]
    fn cluster_takes_the_seeds_and_keeps_the_defaults() {
        let c = RedisConfig::cluster([("a", 1), ("b", 2)]);
        let want = RedisConfig {
            nodes: vec![("a".into(), 1), ("b".into(), 2)],
            cluster: true,
            ..RedisConfig::default()
        };
        assert_eq!(c, want);
        assert_eq!(
            RedisConfig::from_url("redis+cluster://a:1,b:2").unwrap(),
            want
        );
    }
}
