//! TLS for NBD: the server side of `NBD_OPT_STARTTLS`, with rustls.
//!
//! NBD has no TLS port of its own: a client connects in the clear, receives the greeting, sends
//! `NBD_OPT_STARTTLS`, and on `NBD_REP_ACK` both sides run a TLS handshake on the same stream;
//! option haggling then starts afresh inside TLS (state negotiated before it is forgotten, as
//! the protocol requires), and transmission follows inside TLS. [`TlsSettings`] holds what the
//! server needs for that: a certificate chain and key, optionally a CA whose certificates every
//! client must present, and whether plain clients are refused (`require`: every option but
//! STARTTLS and ABORT is answered `NBD_REP_ERR_TLS_REQD`, and `NBD_OPT_EXPORT_NAME` closes the
//! connection, since it cannot be answered with an error).
//!
//! Only ring is compiled in as the crypto provider (no C build of aws-lc); TLS 1.2 and 1.3 with
//! rustls's safe defaults. Loading happens once, at start: a bad file is an error naming it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio_rustls::TlsAcceptor;

/// Why TLS settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}")]
    Pem {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("the TLS configuration is refused")]
    Rustls(#[from] rustls::Error),
    #[error("the client CA {path} cannot verify clients")]
    ClientCa {
        path: PathBuf,
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
}

/// What the server needs to offer (or require) TLS.
#[derive(Clone)]
pub struct TlsSettings {
    pub(crate) acceptor: TlsAcceptor,
    /// Refuse clients that do not start TLS.
    pub require: bool,
    /// Clients must present a certificate signed by the configured CA.
    pub verifies_clients: bool,
}

impl TlsSettings {
    /// The TLS acceptor, for another listener of the same server (the analytics endpoint
    /// serves HTTPS with the NBD certificate, and asks for client certificates alike).
    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("require", &self.require)
            .field("verifies_clients", &self.verifies_clients)
            .finish_non_exhaustive()
    }
}

impl TlsSettings {
    /// Loads a PEM certificate chain and private key, and optionally a PEM file of CA
    /// certificates that client certificates must chain to.
    pub fn from_pem_files(
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
        require: bool,
    ) -> Result<TlsSettings, TlsError> {
        let chain = certificates(cert, "certificate")?;
        let key = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::Pem {
            what: "private key",
            path: key.to_path_buf(),
            source,
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = match client_ca {
            Some(path) => {
                let mut roots = rustls::RootCertStore::empty();
                for ca in certificates(path, "client CA")? {
                    roots.add(ca)?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|source| TlsError::ClientCa {
                            path: path.to_path_buf(),
                            source,
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let config = builder.with_single_cert(chain, key)?;
        Ok(TlsSettings {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            require,
            verifies_clients: client_ca.is_some(),
        })
    }
}

fn certificates(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem_error = |source| TlsError::Pem {
        what,
        path: path.to_path_buf(),
        source,
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(pem_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem_error)?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(chain)
}
