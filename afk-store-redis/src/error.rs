//! The one mapping from `redis` errors to [`afk_core::Error`] kinds.
//!
//! | redis error | kind |
//! |---|---|
//! | I/O (refused, reset, timed out), no connection to a cluster node | `Unavailable` (retryable) |
//! | `LOADING`, `BUSY`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY`, `OOM` | `Unavailable` (retryable) |
//! | `MOVED` / `ASK` reaching us (only on a single-node connection to a cluster node) | `InvalidConfig` |
//! | `NOAUTH`, `WRONGPASS`, `NOPERM`, authentication failed, invalid client config | `InvalidConfig` |
//! | TLS: the server certificate is not trusted or not for this host, the server rejects our client certificate, the peer does not speak TLS | `InvalidConfig` (retrying cannot help; the URL's `tls_*` options or the server's certificates must change) |
//! | a reply that does not parse while connecting: the URL names something that is not a Redis server (decided in `conn.rs`) | `InvalidConfig` |
//! | a single-node URL at a Cluster node, a cluster URL at a server without Cluster support (decided in `conn.rs`, when connecting) | `InvalidConfig` |
//! | `NOSCRIPT` | never reaches callers: the script is re-sent with `EVAL` ([`crate::store`]) |
//! | the commit script's fence answer | `Fenced` (decided in `store.rs`, not an error reply) |
//! | anything else (`ERR …`, parse errors, unexpected replies) | `Unexpected` |
//!
//! Messages never contain a password: they name the operation, not the URL, and the `redis`
//! crate's own errors carry addresses, never credentials.

use std::error::Error as StdError;
use std::sync::Arc;

use afk_core::{Error, ErrorKind};
use redis::{RedisError, ServerErrorKind};

/// Map a `redis` error raised while doing `what` (for example `"commit run_1"`).
pub(crate) fn map_err(err: RedisError, what: &str) -> Error {
    let kind = classify(&err);
    let tls = tls_error(&err).map(|t| format!(" (TLS: {t}; check tls_ca, the host name in the URL against the server certificate, and tls_cert/tls_key)"));
    let hint = match kind {
        ErrorKind::InvalidConfig if tls.is_some() => tls.as_deref().unwrap_or_default(),
        ErrorKind::InvalidConfig if is_redirect(&err) => {
            " (the server is a cluster node: use a redis+cluster:// URL)"
        }
        ErrorKind::InvalidConfig => " (check the user name, password and ACL of the Redis URL)",
        _ => "",
    };
    Error::new(kind, format!("redis: {what} failed{hint}")).with_source(err)
}

/// Whether `err` is the server's NOSCRIPT answer (the script cache was flushed or is cold).
pub(crate) fn is_noscript(err: &RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript)
}

fn is_redirect(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        redis::ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask)
    )
}

/// Whether `err` is a TLS failure that retrying cannot fix (see [`tls_error`]).
pub(crate) fn is_tls_config_error(err: &RedisError) -> bool {
    tls_error(err).is_some()
}

/// The rustls error behind `err`, if a TLS handshake or record failed for a reason retrying
/// cannot fix: the server certificate is not trusted (or not for this host, or expired), the
/// server rejected our client certificate, or the peer does not speak TLS at all.
fn tls_error(err: &RedisError) -> Option<&rustls::Error> {
    fn direct<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
        e.downcast_ref::<rustls::Error>().or_else(|| {
            e.downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        })
    }
    // The redis crate keeps its cause as an `Arc<dyn Error>`, and `io::Error::source` skips
    // the error it wraps, so each link is looked at directly and through the `Arc`.
    let mut link = err.source();
    while let Some(e) = link {
        let found = direct(e).or_else(|| {
            e.downcast_ref::<Arc<dyn StdError + Send + Sync>>()
                .and_then(|a| direct(&**a))
        });
        if let Some(t) = found {
            return is_config_tls_error(t).then_some(t);
        }
        link = e.source();
    }
    None
}

fn is_config_tls_error(e: &rustls::Error) -> bool {
    use rustls::AlertDescription as A;
    use rustls::Error as E;
    match e {
        E::InvalidCertificate(_)
        | E::NoCertificatesPresented
        | E::InvalidMessage(_)
        | E::InappropriateMessage { .. }
        | E::InappropriateHandshakeMessage { .. }
        | E::PeerIncompatible(_) => true,
        E::AlertReceived(a) => matches!(
            a,
            A::BadCertificate
                | A::UnsupportedCertificate
                | A::CertificateRevoked
                | A::CertificateExpired
                | A::CertificateUnknown
                | A::CertificateRequired
                | A::UnknownCA
                | A::AccessDenied
                | A::HandshakeFailure
                | A::ProtocolVersion
                | A::InsufficientSecurity
        ),
        _ => false,
    }
}

fn classify(err: &RedisError) -> ErrorKind {
    use redis::ErrorKind as K;
    if tls_error(err).is_some() {
        return ErrorKind::InvalidConfig;
    }
    if err.is_io_error()
        || err.is_timeout()
        || err.is_connection_refusal()
        || err.is_connection_dropped()
    {
        return ErrorKind::Unavailable;
    }
    match err.kind() {
        K::Io | K::ClusterConnectionNotFound => ErrorKind::Unavailable,
        K::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly,
        ) => ErrorKind::Unavailable,
        K::Server(ServerErrorKind::Moved | ServerErrorKind::Ask) => ErrorKind::InvalidConfig,
        K::Server(ServerErrorKind::NoPerm) => ErrorKind::InvalidConfig,
        K::AuthenticationFailed | K::InvalidClientConfig => ErrorKind::InvalidConfig,
        K::Extension => match err.code() {
            Some("BUSY" | "OOM") => ErrorKind::Unavailable,
            Some("NOAUTH" | "WRONGPASS" | "NOPERM") => ErrorKind::InvalidConfig,
            _ => ErrorKind::Unexpected,
        },
        _ => ErrorKind::Unexpected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str, detail: &str) -> RedisError {
        redis::make_extension_error(code.to_string(), Some(detail.to_string()))
    }

    #[test]
    fn extension_codes_map_to_kinds() {
        assert_eq!(
            map_err(server("BUSY", "script"), "x").kind(),
            ErrorKind::Unavailable
        );
        assert_eq!(
            map_err(server("WRONGPASS", "bad"), "x").kind(),
            ErrorKind::InvalidConfig
        );
        assert_eq!(
            map_err(server("NOAUTH", "bad"), "x").kind(),
            ErrorKind::InvalidConfig
        );
        assert_eq!(
            map_err(server("WHATEVER", "x"), "x").kind(),
            ErrorKind::Unexpected
        );
        assert!(map_err(server("BUSY", "script"), "x").is_retryable());
    }

    #[test]
    fn io_errors_are_unavailable_and_retryable() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = map_err(RedisError::from(io), "get");
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.is_retryable());
        assert!(e.to_string().contains("redis: get failed"), "{e}");
    }

    #[test]
    fn a_timeout_says_each_thing_once() {
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out");
        let e = map_err(RedisError::from(io), "commit of run R");
        // As the checkpoint writer hands it to a second caller: the same error again.
        for e in [
            e.clone(),
            e,
            map_err(server("WRONGPASS", "invalid password"), "AUTH"),
        ] {
            let s = e.to_string();
            assert_eq!(afk_core::repeated_phrase(&s, 12), None, "{s}");
        }
    }
}
