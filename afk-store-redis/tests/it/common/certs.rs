//! Throwaway TLS material made with the `openssl` command at test time: a CA, a server
//! certificate for `127.0.0.1` and `localhost` signed by it, and a client certificate for
//! mutual TLS. Everything lives in a temporary directory removed on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A private CA with one server and one client certificate, as PEM files.
pub struct TestPki {
    dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command is installed");
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `openssl req` arguments for a fresh P-256 key (fast to make, accepted by Redis and rustls).
const NEW_KEY: &[&str] = &[
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

impl TestPki {
    /// Make the CA, the server certificate (SAN `IP:127.0.0.1`, `DNS:localhost`) and the
    /// client certificate.
    pub fn new() -> TestPki {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let mut ca = vec!["req", "-x509"];
        ca.extend(NEW_KEY);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=afk test CA",
        ]);
        openssl(d, &ca);
        for (name, ext) in [
            (
                "server",
                "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
                 keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
            ),
            (
                "client",
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n\
                 extendedKeyUsage=clientAuth\n",
            ),
        ] {
            std::fs::write(d.join(format!("{name}.ext")), ext).expect("write ext file");
            let subj = format!("/CN=afk test {name}");
            let (key, csr, pem, extf) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
                format!("{name}.ext"),
            );
            let mut req = vec!["req"];
            req.extend(NEW_KEY);
            req.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
            openssl(d, &req);
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-out",
                    &pem,
                    "-extfile",
                    &extf,
                ],
            );
        }
        TestPki { dir }
    }

    /// The path of `name` (`ca.pem`, `server.pem`, `server.key`, `client.pem`, `client.key`).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `path(name)` percent-encoded for a URL query.
    pub fn query(&self, name: &str) -> String {
        let p = self.path(name);
        url::form_urlencoded::byte_serialize(p.to_string_lossy().as_bytes()).collect()
    }

    /// `redis-server` arguments: TLS only (plain port off) on `tls_port`, clients
    /// authenticated by certificate when `auth_clients` is `"yes"`.
    pub fn server_args(&self, auth_clients: &str) -> Vec<String> {
        let s = |p: PathBuf| p.to_string_lossy().into_owned();
        vec![
            "--tls-cert-file".into(),
            s(self.path("server.pem")),
            "--tls-key-file".into(),
            s(self.path("server.key")),
            "--tls-ca-cert-file".into(),
            s(self.path("ca.pem")),
            "--tls-auth-clients".into(),
            auth_clients.into(),
        ]
    }
}
