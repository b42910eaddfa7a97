//! TLS to Postgres, the outbox router's way (`crates/outbox/src/pgtls.rs`, copied: this crate
//! does not depend on the outbox), configured the way libpq users already write it: `sslmode` and
//! `sslrootcert` in `postgres.url` (`…?sslmode=verify-full&sslrootcert=/etc/eosflow/pg-ca.pem`).
//!
//! tokio-postgres knows only `disable|prefer|require` and never verifies by itself, so this
//! module takes the two parameters out of the URL and builds the TLS connector: native-tls
//! (OpenSSL). Modes mean what they mean in libpq: `prefer`/`require` encrypt without verifying
//! (`require` with a root certificate verifies the chain, as libpq does), `verify-ca` checks the
//! chain, `verify-full` the chain and the host name.

use std::path::PathBuf;
use std::str::FromStr;

use crate::ProjectionError;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Plain TCP.
    Disable,
    /// TLS when the server offers it, unverified (libpq's default).
    Prefer,
    /// TLS or fail; unverified unless a root certificate is given.
    Require,
    /// TLS with the server's chain checked against the root certificate.
    VerifyCa,
    /// TLS with the chain and the host name checked.
    VerifyFull,
}

impl SslMode {
    fn parse(v: &str) -> Result<Self, ProjectionError> {
        Ok(match v {
            "disable" => Self::Disable,
            "prefer" | "allow" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(ProjectionError::Config(format!(
                    "postgres.url: sslmode={other:?} is not one of disable, prefer, require, verify-ca, verify-full"
                )))
            }
        })
    }
}

/// A parsed `postgres.url` with its TLS settings.
#[derive(Debug, Clone)]
pub(crate) struct PgTarget {
    /// What tokio-postgres connects with (`sslmode` narrowed to what it understands).
    pub(crate) config: tokio_postgres::Config,
    /// The requested mode.
    pub(crate) mode: SslMode,
    /// `sslrootcert`: the CA bundle that verifies the server.
    pub(crate) root_cert: Option<PathBuf>,
}

/// Splits `sslmode`/`sslrootcert` off a URL (`postgres://…?k=v&…`) or a key-value DSN.
fn split_tls_params(url: &str) -> (String, Option<String>, Option<String>) {
    let (mut mode, mut root) = (None, None);
    let mut take = |k: &str, v: &str| match k {
        "sslmode" => {
            mode = Some(percent_decode(v));
            true
        }
        "sslrootcert" => {
            root = Some(percent_decode(v));
            true
        }
        _ => false,
    };
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else {
            return (url.to_string(), None, None);
        };
        let kept: Vec<&str> = query
            .split('&')
            .filter(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                !take(k, v)
            })
            .collect();
        let rest = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        (rest, mode, root)
    } else {
        let kept: Vec<&str> = url
            .split_whitespace()
            .filter(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                !take(k.trim(), v.trim_matches('\''))
            })
            .collect();
        (kept.join(" "), mode, root)
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(n) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(n);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl PgTarget {
    /// Parses `postgres.url`; errors name the key and the bad part, never the password.
    pub(crate) fn parse(url: &str) -> Result<Self, ProjectionError> {
        let (rest, mode, root) = split_tls_params(url);
        let mode = match mode {
            Some(m) => SslMode::parse(&m)?,
            None => SslMode::Prefer,
        };
        let mut config = tokio_postgres::Config::from_str(&rest)
            .map_err(|e| ProjectionError::Config(format!("postgres.url: {e}")))?;
        config.ssl_mode(match mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        });
        let root_cert = root.map(PathBuf::from);
        if let Some(p) = &root_cert {
            if !p.is_file() {
                return Err(ProjectionError::Config(format!(
                    "postgres.url: sslrootcert={} is not a readable file (a PEM CA bundle)",
                    p.display()
                )));
            }
        }
        if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root_cert.is_none() {
            return Err(ProjectionError::Config(
                "postgres.url: sslmode=verify-ca/verify-full needs sslrootcert=<CA bundle (PEM)>"
                    .into(),
            ));
        }
        Ok(Self {
            config,
            mode,
            root_cert,
        })
    }

    /// Wraps a `tokio_postgres::Config` built in code: its own `ssl_mode` decides (`disable`
    /// plain, `prefer`/`require` encrypted without verification).
    pub(crate) fn from_config(config: tokio_postgres::Config) -> Self {
        let mode = match config.get_ssl_mode() {
            tokio_postgres::config::SslMode::Disable => SslMode::Disable,
            tokio_postgres::config::SslMode::Prefer => SslMode::Prefer,
            _ => SslMode::Require,
        };
        Self {
            config,
            mode,
            root_cert: None,
        }
    }

    /// The mode actually enforced: libpq verifies the chain under `require` when a root
    /// certificate is given.
    pub(crate) fn effective_mode(&self) -> SslMode {
        match (self.mode, &self.root_cert) {
            (SslMode::Require, Some(_)) => SslMode::VerifyCa,
            (m, _) => m,
        }
    }

    fn tls_connector(&self) -> Result<postgres_native_tls::MakeTlsConnector, ProjectionError> {
        let mut b = native_tls::TlsConnector::builder();
        if let Some(p) = &self.root_cert {
            let pem = std::fs::read(p).map_err(|e| {
                ProjectionError::Config(format!("postgres.url: sslrootcert={}: {e}", p.display()))
            })?;
            let cert = native_tls::Certificate::from_pem(&pem).map_err(|e| {
                ProjectionError::Config(format!(
                    "postgres.url: sslrootcert={} is not PEM: {e}",
                    p.display()
                ))
            })?;
            b.add_root_certificate(cert);
        }
        match self.effective_mode() {
            SslMode::Disable | SslMode::Prefer | SslMode::Require => {
                b.danger_accept_invalid_certs(true);
                b.danger_accept_invalid_hostnames(true);
            }
            SslMode::VerifyCa => {
                b.danger_accept_invalid_hostnames(true);
            }
            SslMode::VerifyFull => {}
        }
        let c = b
            .build()
            .map_err(|e| ProjectionError::Config(format!("postgres.url: TLS setup: {e}")))?;
        Ok(postgres_native_tls::MakeTlsConnector::new(c))
    }

    /// Opens a SQL connection (its driver task runs on the current tokio runtime).
    pub(crate) async fn connect(&self) -> Result<tokio_postgres::Client, ProjectionError> {
        fn drive<S, T>(connection: tokio_postgres::Connection<S, T>)
        where
            S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
            T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        {
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!(error = %e, "postgres connection ended");
                }
            });
        }
        if self.mode == SslMode::Disable {
            let (client, connection) = self
                .config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(|e| crate::transient("connecting", &e))?;
            drive(connection);
            return Ok(client);
        }
        let (client, connection) = self
            .config
            .connect(self.tls_connector()?)
            .await
            .map_err(|e| crate::transient("connecting (TLS)", &e))?;
        drive(connection);
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_tls_parameters_are_taken_out_of_the_url() {
        let (rest, mode, root) = split_tls_params(
            "postgres://u:p@h:5432/db?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
        );
        assert_eq!(rest, "postgres://u:p@h:5432/db?application_name=x");
        assert_eq!(mode.as_deref(), Some("verify-full"));
        assert_eq!(root.as_deref(), Some("/etc/ca.pem"));
        let (rest, mode, _) = split_tls_params("host=h user=u sslmode=require dbname=d");
        assert_eq!(rest, "host=h user=u dbname=d");
        assert_eq!(mode.as_deref(), Some("require"));
    }

    #[test]
    fn a_bad_mode_or_a_verify_mode_without_a_root_certificate_names_what_to_fix() {
        let e = PgTarget::parse("postgres://u@h/db?sslmode=verify").expect_err("bad mode");
        assert!(e.to_string().contains("sslmode=\"verify\""), "{e}");
        let e = PgTarget::parse("postgres://u@h/db?sslmode=verify-full").expect_err("no root");
        assert!(e.to_string().contains("sslrootcert"), "{e}");
        let e = PgTarget::parse("postgres://u@h/db?sslmode=require&sslrootcert=/nonexistent")
            .expect_err("missing file");
        assert!(e.to_string().contains("/nonexistent"), "{e}");
        let t = PgTarget::parse("postgres://u:secret@h/db").expect("plain URL");
        assert_eq!(t.mode, SslMode::Prefer);
    }
}
