//! The EC2 instance identity document: what proves to `dtd` that an agent runs on the instance
//! it names, before `dtd` pins the agent's key (ARCHITECTURE.md, "How a worker's word reaches
//! dtd").
//!
//! EC2 signs each instance's document (its id, private IP, account, Region) with AWS's key, and
//! serves both on the instance's own metadata service, which the workers' user data keeps to
//! root (the agent) by default. `dtd` checks the base64-encoded signature (SHA-256 with RSA)
//! against AWS's public certificate, as the EC2 User Guide's "Verify the instance identity
//! document for an Amazon EC2 instance" (option 2) does with `openssl dgst -sha256 -verify`.
//! A document says nothing of time: it is the same for the instance's whole life, so the agent
//! signs it, with a time, under its own key (see `protocol::channel`).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use aws_lc_rs::signature::{UnparsedPublicKey, RSA_PKCS1_1024_8192_SHA256_FOR_LEGACY_USE_ONLY};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{
    alg_id, AlgorithmIdentifier, CertificateDer, InvalidSignature, SignatureVerificationAlgorithm,
};
use serde::Deserialize;

/// AWS's RSA certificate for the base64-encoded signature (see the file's own header).
const AWS_RSA: &str = include_str!("aws-rsa.pem");
/// A document is a few hundred bytes; a signature of RSA-4096 is 684 in base64.
pub const MAX_DOCUMENT_BYTES: usize = 4096;
pub const MAX_SIGNATURE_BYTES: usize = 1024;

/// What `dtd` reads of a document (EC2 writes more: image, type, zone, architecture).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IdentityDocument {
    pub instance_id: String,
    pub private_ip: IpAddr,
    pub account_id: String,
    pub region: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("the identity document is longer than {MAX_DOCUMENT_BYTES} bytes")]
    TooLong,
    #[error("the identity document's signature is not base64")]
    NotBase64,
    #[error(
        "the identity document's signature does not verify with AWS's certificate \
         (workers.identity_certificates): not a document EC2 signed"
    )]
    BadSignature,
    /// serde_json's words, kept as text so that the error can be compared and cloned.
    #[error("the identity document is not EC2's JSON: {0}")]
    NotJson(String),
}

/// Why the configured certificates cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate in it")]
    None { path: PathBuf },
    #[error("{path}: certificate {n} is not one rustls-webpki parses (X.509 v3, DER): {why}")]
    Unparsed {
        path: PathBuf,
        n: usize,
        why: webpki::Error,
    },
}

/// The certificates whose keys may sign identity documents: AWS's by default.
#[derive(Debug, Clone)]
pub struct Certificates {
    ders: Vec<CertificateDer<'static>>,
    /// Where they came from, for messages.
    pub source: String,
}

impl Certificates {
    /// AWS's own certificate, built in.
    pub fn aws() -> Certificates {
        // The built-in file parses: a unit test holds it to that.
        let ders = parse(AWS_RSA.as_bytes(), Path::new("aws-rsa.pem")).unwrap_or_default();
        Certificates {
            ders,
            source: "AWS's certificate (built in)".into(),
        }
    }

    /// The certificates in the PEM file at `path` (one or more).
    pub fn from_file(path: &Path) -> Result<Certificates, CertificateError> {
        let bytes = std::fs::read(path).map_err(|source| CertificateError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let ders = parse(&bytes, path)?;
        Ok(Certificates {
            ders,
            source: path.display().to_string(),
        })
    }

    /// The document, when one of the certificates' keys signed `document` (the bytes the
    /// metadata served, unchanged) with `signature` (base64, as the metadata serves it).
    pub fn verify(
        &self,
        document: &str,
        signature: &str,
    ) -> Result<IdentityDocument, IdentityError> {
        if document.len() > MAX_DOCUMENT_BYTES {
            return Err(IdentityError::TooLong);
        }
        let sig: String = signature.split_whitespace().collect();
        if sig.len() > MAX_SIGNATURE_BYTES {
            return Err(IdentityError::NotBase64);
        }
        let sig = B64.decode(sig).map_err(|_| IdentityError::NotBase64)?;
        let signed = self.ders.iter().any(|der| {
            webpki::EndEntityCert::try_from(der).is_ok_and(|cert| {
                cert.verify_signature(&RsaSha256, document.as_bytes(), &sig)
                    .is_ok()
            })
        });
        if !signed {
            return Err(IdentityError::BadSignature);
        }
        serde_json::from_str(document).map_err(|e| IdentityError::NotJson(e.to_string()))
    }
}

fn parse(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, CertificateError> {
    let ders: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .collect();
    if ders.is_empty() {
        return Err(CertificateError::None {
            path: path.to_path_buf(),
        });
    }
    for (n, der) in ders.iter().enumerate() {
        if let Err(why) = webpki::EndEntityCert::try_from(der) {
            return Err(CertificateError::Unparsed {
                path: path.to_path_buf(),
                n: n + 1,
                why,
            });
        }
    }
    Ok(ders)
}

/// SHA-256 with RSA (PKCS #1 v1.5), keys of 1024 bits and more: AWS's certificate for this
/// signature holds a 1024-bit key, which rustls-webpki's own algorithms (2048 bits and more,
/// for TLS) refuse. The certificate is AWS's, pinned in the config, not one a peer sends.
#[derive(Debug)]
struct RsaSha256;

impl SignatureVerificationAlgorithm for RsaSha256 {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        UnparsedPublicKey::new(&RSA_PKCS1_1024_8192_SHA256_FOR_LEGACY_USE_ONLY, public_key)
            .verify(message, signature)
            .map_err(|_| InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::RSA_ENCRYPTION
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::RSA_PKCS1_SHA256
    }
}

#[cfg(test)]
mod tests;
