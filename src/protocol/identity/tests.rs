use super::*;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{RsaKeyPair, RSA_PKCS1_SHA256};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/identity");

fn stand_in() -> (Certificates, RsaKeyPair) {
    let certs = Certificates::from_file(&Path::new(FIXTURES).join("signer.pem")).unwrap();
    let key = std::fs::read(Path::new(FIXTURES).join("signer.pk8")).unwrap();
    (certs, RsaKeyPair::from_pkcs8(&key).unwrap())
}

fn sign(key: &RsaKeyPair, doc: &str) -> String {
    let mut sig = vec![0; key.public_modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        doc.as_bytes(),
        &mut sig,
    )
    .unwrap();
    B64.encode(sig)
}

/// As EC2 serves it: pretty-printed, with members dtd does not read.
const DOC: &str = r#"{
  "accountId" : "123456789012",
  "architecture" : "x86_64",
  "availabilityZone" : "us-east-1a",
  "imageId" : "ami-0abcdef1234567890",
  "instanceId" : "i-0123456789abcdef0",
  "instanceType" : "p4d.24xlarge",
  "pendingTime" : "2026-11-28T04:00:00Z",
  "privateIp" : "10.0.1.5",
  "region" : "us-east-1",
  "version" : "2017-09-30"
}"#;

#[test]
fn a_document_signed_by_a_trusted_key_verifies_and_names_its_instance() {
    let (certs, key) = stand_in();
    let doc = certs.verify(DOC, &sign(&key, DOC)).unwrap();
    assert_eq!(doc.instance_id, "i-0123456789abcdef0");
    assert_eq!(doc.private_ip, "10.0.1.5".parse::<IpAddr>().unwrap());
    assert_eq!(
        (doc.account_id.as_str(), doc.region.as_str()),
        ("123456789012", "us-east-1")
    );
    // The metadata wraps the signature's base64 over lines.
    let wrapped = sign(&key, DOC)
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(certs.verify(DOC, &wrapped).is_ok());
}

#[test]
fn a_changed_document_or_another_signer_does_not_verify() {
    let (certs, key) = stand_in();
    let sig = sign(&key, DOC);
    let other = DOC.replace("10.0.1.5", "10.0.1.6");
    assert_eq!(certs.verify(&other, &sig), Err(IdentityError::BadSignature));
    // AWS's certificate does not take the stand-in's signature, nor the stand-in AWS's.
    assert_eq!(
        Certificates::aws().verify(DOC, &sig),
        Err(IdentityError::BadSignature)
    );
    let junk = RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
    assert_eq!(
        certs.verify(DOC, &sign(&junk, DOC)),
        Err(IdentityError::BadSignature)
    );
    assert_eq!(
        certs.verify(DOC, "not base64!"),
        Err(IdentityError::NotBase64)
    );
    let long = " ".repeat(MAX_DOCUMENT_BYTES + 1);
    assert_eq!(certs.verify(&long, &sig), Err(IdentityError::TooLong));
}

#[test]
fn a_signed_document_that_is_not_ec2s_json_is_refused() {
    let (certs, key) = stand_in();
    let e = certs.verify("{}", &sign(&key, "{}")).unwrap_err();
    assert!(matches!(e, IdentityError::NotJson(_)), "{e}");
}

#[test]
fn the_built_in_aws_certificate_parses_and_a_file_without_one_is_refused() {
    assert_eq!(Certificates::aws().ders.len(), 1);
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "no certificate here\n").unwrap();
    let e = Certificates::from_file(&empty).unwrap_err().to_string();
    assert!(e.contains("no PEM certificate"), "{e}");
    let missing = Certificates::from_file(&dir.path().join("nope.pem"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("cannot read"), "{missing}");
}
