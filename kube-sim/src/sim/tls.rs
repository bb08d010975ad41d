//! A certificate authority made at start and a server certificate for 127.0.0.1 and
//! localhost signed by it. Clients trust the CA through the kubeconfig.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating the simulator's certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("building the TLS server configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The CA and the server's certificate and key.
pub struct ServerIdentity {
    /// PEM of the CA certificate (what goes into `certificate-authority-data`).
    pub ca_pem: String,
    pub config: Arc<rustls::ServerConfig>,
}

/// Makes a CA and a server certificate valid for 127.0.0.1 and localhost.
pub fn generate() -> Result<ServerIdentity, TlsError> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "kube-sim-ca");
    ca_params.distinguished_name = dn;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate()?;
    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "kube-apiserver");
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = params.signed_by(&server_key, &issuer)?;

    let chain = vec![
        CertificateDer::from(server_cert.der().to_vec()),
        CertificateDer::from(ca_cert.der().to_vec()),
    ];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(ServerIdentity {
        ca_pem: ca_cert.pem(),
        config: Arc::new(config),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn makes_a_ca_and_config() {
        let id = super::generate().unwrap();
        assert!(id.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(id.config.alpn_protocols.len(), 2);
    }
}
