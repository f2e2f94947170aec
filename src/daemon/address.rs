//! Where the agents find `dtd run`: the address it takes their reports at, published in the
//! shared directory (`protocol::channel::ADDRESS_FILE`) for agents whose config names none. On
//! AWS the master's address changes when the group replaces it; the file follows.
//!
//! The file is `dtd`'s own: written by rename from a temp name no worker can guess, and the
//! agents follow it only when their own user (root on AWS, as `dtd`) owns it. A directory some
//! worker planted at its name is moved aside, since it would keep every agent from finding
//! `dtd`.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::protocol::channel::ADDRESS_FILE;

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error(
        "workers.listen is {0}: the agents need an address to dial, and the instance metadata \
         did not say this machine's (local-ipv4): {1}; name the address in workers.listen"
    )]
    NoAddress(SocketAddr, String),
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
}

/// The address the agents dial: the one bound, or this instance's private IP (from its
/// metadata, as root reads it) when bound to every address.
pub async fn advertised(bound: SocketAddr) -> Result<SocketAddr, PublishError> {
    if !bound.ip().is_unspecified() {
        return Ok(bound);
    }
    let imds = aws_config::imds::Client::builder().build();
    let ip = match imds.get("/latest/meta-data/local-ipv4").await {
        Ok(text) => String::from(text)
            .trim()
            .parse::<IpAddr>()
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    ip.map(|ip| SocketAddr::new(ip, bound.port()))
        .map_err(|why| PublishError::NoAddress(bound, why))
}

/// Writes `addr` to the shared directory's address file, moving aside a directory in its way.
pub fn publish(shared_dir: &Path, addr: SocketAddr) -> Result<(), PublishError> {
    let path = shared_dir.join(ADDRESS_FILE);
    let body = format!("{addr}\n");
    let write = || crate::fsutil::write_atomic(&path, body.as_bytes());
    let failed = |source| PublishError::Write {
        path: path.clone(),
        source,
    };
    match write() {
        Ok(()) => Ok(()),
        Err(_) if is_dir(&path) => {
            let aside = shared_dir.join(format!(
                "{ADDRESS_FILE}.in-the-way-{}",
                crate::fsutil::random_hex()
            ));
            tracing::warn!(path = %path.display(), aside = %aside.display(), "a directory is in the way of dtd's address: moved aside");
            std::fs::rename(&path, &aside).map_err(failed)?;
            write().map_err(failed)
        }
        Err(e) => Err(failed(e)),
    }
}

fn is_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_is_written_and_a_directory_in_its_way_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let addr: SocketAddr = "10.0.0.5:7719".parse().unwrap();
        std::fs::create_dir(dir.path().join(ADDRESS_FILE)).unwrap();
        std::fs::write(dir.path().join(ADDRESS_FILE).join("x"), "planted").unwrap();
        publish(dir.path(), addr).unwrap();
        let body = std::fs::read(dir.path().join(ADDRESS_FILE)).unwrap();
        assert_eq!(crate::protocol::channel::parse_address(&body), Some(addr));
        let aside = std::fs::read_dir(dir.path()).unwrap().flatten();
        let names: Vec<String> = aside
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("dtd_address.in-the-way-")),
            "{names:?}"
        );
    }

    #[tokio::test]
    async fn a_specific_address_is_advertised_as_bound() {
        let addr: SocketAddr = "127.0.0.1:7719".parse().unwrap();
        assert_eq!(advertised(addr).await.unwrap(), addr);
    }
}
