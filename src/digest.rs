//! SHA-256 digests as people write them (64 hex digits, what `sha256sum` prints): the pins a
//! config puts on the programs `dtd agent` runs, and the digest of what it read.

use std::fmt;
use std::io::{self, Read};
use std::str::FromStr;

use sha2::Digest;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sha256([u8; 32]);

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a SHA-256 digest: write its 64 hex digits, as `sha256sum` prints them")]
pub struct BadDigest(String);

impl Sha256 {
    pub fn of(bytes: &[u8]) -> Sha256 {
        Sha256(sha2::Sha256::digest(bytes).into())
    }

    /// The digest of everything `reader` yields, read in pieces (a program may be large).
    pub fn of_reader(mut reader: impl Read) -> io::Result<Sha256> {
        let mut hasher = sha2::Sha256::new();
        let mut buf = [0u8; 64 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => return Ok(Sha256(hasher.finalize().into())),
                Ok(n) => hasher.update(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl FromStr for Sha256 {
    type Err = BadDigest;

    fn from_str(s: &str) -> Result<Sha256, BadDigest> {
        let bad = || BadDigest(s.chars().take(80).collect());
        if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(s.as_bytes().chunks(2)) {
            *byte = (hex_value(pair[0]) << 4) | hex_value(pair[1]);
        }
        Ok(Sha256(out))
    }
}

/// The value of one ASCII hex digit (the caller checked it is one).
fn hex_value(b: u8) -> u8 {
    char::from(b).to_digit(16).unwrap_or(0) as u8
}

impl fmt::Display for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // `printf abc | sha256sum` (FIPS 180-2's first example).
    const ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn digests_what_it_reads_and_prints_it_as_sha256sum_does() {
        let d = Sha256::of_reader(&b"abc"[..]).unwrap();
        assert_eq!(d.to_string(), ABC);
        assert_eq!(ABC.parse::<Sha256>().unwrap(), d);
        assert_eq!(ABC.to_uppercase().parse::<Sha256>().unwrap(), d);
    }

    #[test]
    fn anything_but_64_hex_digits_is_refused() {
        for bad in [
            "",
            &ABC[1..],
            &format!("{ABC}0"),
            &format!("sha256:{}", &ABC[7..]),
            &ABC.replace('b', "g"),
            &format!("{}é", &ABC[..62]),
            &format!("+{}", &ABC[1..]),
        ] {
            let e = bad.parse::<Sha256>().unwrap_err();
            assert!(e.to_string().contains("64 hex digits"), "{bad}: {e}");
        }
    }
}
