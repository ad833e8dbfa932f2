//! TLS material for `rediss://`: the private CA (`tls_ca`) and the client certificate and key
//! for mutual TLS (`tls_cert`, `tls_key`), read and checked before connecting so that a bad
//! file is `InvalidConfig` naming the option, never a handshake failure later.
//!
//! Messages name the option and the path, never the contents of a file (the key is a secret,
//! and PEM parse errors can quote a line of the file).

use std::path::Path;
use std::sync::Arc;

use afk_core::{Error, Result};
use redis::{ClientTlsConfig, TlsCertificates};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::RedisConfig;

/// Make sure rustls has a process-wide crypto provider before the `redis` crate builds a
/// `rustls::ClientConfig` (it uses the process default, and the `redis` crate enables no
/// provider). An application that installed its own keeps it.
pub(crate) fn ensure_crypto_provider() {
    if CryptoProvider::get_default().is_none() {
        // Losing a race against another installer is fine: some provider is installed.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
}

/// The certificates for the `redis` crate's `build_with_tls` / `ClusterClientBuilder::certs`,
/// or `None` when the configuration names no TLS file (then the webpki roots are used).
pub(crate) fn certificates(cfg: &RedisConfig) -> Result<Option<TlsCertificates>> {
    if cfg.tls_ca.is_none() && cfg.tls_cert.is_none() && cfg.tls_key.is_none() {
        return Ok(None);
    }
    ensure_crypto_provider();
    let root_cert = match &cfg.tls_ca {
        Some(path) => {
            let pem = read("tls_ca", path)?;
            check_ca(path, &pem)?;
            Some(pem)
        }
        None => None,
    };
    let client_tls = match (&cfg.tls_cert, &cfg.tls_key) {
        (Some(cert), Some(key)) => {
            let client_cert = read("tls_cert", cert)?;
            let client_key = read("tls_key", key)?;
            check_client(cert, &client_cert, key, &client_key)?;
            Some(ClientTlsConfig {
                client_cert,
                client_key,
            })
        }
        (None, None) => None,
        _ => {
            return Err(Error::invalid_config(
                "redis: options tls_cert and tls_key go together (mutual TLS needs both)",
            ));
        }
    };
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert,
    }))
}

fn read(option: &str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::invalid_config(format!(
            "redis: option {option}: cannot read {}: {e}",
            path.display()
        ))
    })
}

fn certs(option: &str, path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    let bad = |why: &str| {
        Error::invalid_config(format!("redis: option {option}: {} {why}", path.display()))
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|_| bad("is not a valid PEM file"))?;
    if certs.is_empty() {
        return Err(bad(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certs)
}

fn check_ca(path: &Path, pem: &[u8]) -> Result<()> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs("tls_ca", path, pem)? {
        roots.add(cert).map_err(|e| {
            Error::invalid_config(format!(
                "redis: option tls_ca: {} holds a certificate that is not a usable CA: {e}",
                path.display()
            ))
        })?;
    }
    Ok(())
}

fn check_client(cert_path: &Path, cert: &[u8], key_path: &Path, key: &[u8]) -> Result<()> {
    let chain = certs("tls_cert", cert_path, cert)?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|_| {
        Error::invalid_config(format!(
            "redis: option tls_key: {} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)",
            key_path.display()
        ))
    })?;
    let provider = CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid_config(format!("redis: TLS setup failed: {e}")))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_client_auth_cert(chain, key)
        .map_err(|e| {
            Error::invalid_config(format!(
                "redis: options tls_cert and tls_key: the key {} does not fit the certificate \
                 {} ({e})",
                key_path.display(),
                cert_path.display()
            ))
        })?;
    Ok(())
}
