//! The agent's signing key: made once per worker, kept where only the agent can read it
//! (`agent.key_file`, on the worker's own disk, never on the shared directory). Its public half
//! reaches `dtd` in the agent's hello, with the instance identity document that proves whose
//! it is (`agent::channel`).

use crate::protocol::signed::{SignError, SigningKey};
use crate::untrusted;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// A PKCS#8 Ed25519 key is 83 bytes; anything much larger is not one.
const MAX_KEY_BYTES: u64 = 1024;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read the agent's key {path}: {source}")]
    Read {
        path: PathBuf,
        source: untrusted::ReadError,
    },
    #[error("the agent's key {path} is {why}: only the agent's user may read it (chmod 600, chown it to uid {uid})")]
    Exposed {
        path: PathBuf,
        why: Exposure,
        uid: u32,
    },
    #[error("cannot write the agent's new key {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the agent's key {path}: {source}")]
    Invalid { path: PathBuf, source: SignError },
}

/// Who else could read or replace the key.
#[derive(Debug, thiserror::Error)]
pub enum Exposure {
    #[error("owned by uid {0}")]
    Owner(u32),
    #[error("mode {0:o}")]
    Mode(u32),
}

/// The key at `path`, made (mode 0600, in a directory made 0700) when there is none. Two
/// agents starting at once get the same key: one makes it, the other reads it.
pub fn load_or_create(path: &Path) -> Result<SigningKey, KeyError> {
    let bytes = match load(path)? {
        Some(bytes) => bytes,
        None => match create(path)? {
            Some(bytes) => bytes,
            None => load(path)?.ok_or_else(|| KeyError::Read {
                path: path.to_path_buf(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound).into(),
            })?,
        },
    };
    SigningKey::from_pkcs8(&bytes).map_err(|source| KeyError::Invalid {
        path: path.to_path_buf(),
        source,
    })
}

/// The key's bytes when it exists, and only when no one else could read or replace it.
fn load(path: &Path) -> Result<Option<Vec<u8>>, KeyError> {
    let read = untrusted::read(path, MAX_KEY_BYTES).map_err(|source| KeyError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if read.is_some() {
        check_private(path)?;
    }
    Ok(read)
}

/// Refuses a key another user owns or could read: it would let them sign as this worker.
fn check_private(path: &Path) -> Result<(), KeyError> {
    let meta = fs::symlink_metadata(path).map_err(|e| KeyError::Read {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    let uid = crate::fsutil::own_uid();
    let why = if meta.uid() != uid {
        Some(Exposure::Owner(meta.uid()))
    } else if meta.mode() & 0o077 != 0 {
        Some(Exposure::Mode(meta.mode() & 0o777))
    } else {
        None
    };
    match why {
        Some(why) => Err(KeyError::Exposed {
            path: path.to_path_buf(),
            why,
            uid,
        }),
        None => Ok(()),
    }
}

/// Makes the key whole under a name of its own, then links it in place: the key's name never
/// holds a part of a key, and only one of two agents making it at once wins (`None`: the other
/// one did; its key is the one to read).
fn create(path: &Path) -> Result<Option<Vec<u8>>, KeyError> {
    let failed = |source| KeyError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(failed)?;
    }
    let bytes = SigningKey::generate().map_err(|source| KeyError::Invalid {
        path: path.to_path_buf(),
        source,
    })?;
    match crate::fsutil::create_whole(path, &bytes, 0o600) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "made the agent's signing key");
            Ok(Some(bytes))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(failed(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_key_is_made_once_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/agent.key");
        let made = load_or_create(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        let again = load_or_create(&path).unwrap();
        assert_eq!(made.public(), again.public());
    }

    #[test]
    fn agents_starting_at_once_share_one_key_and_leave_nothing_behind() {
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("keys/agent.key");
            let keys: Vec<String> = std::thread::scope(|s| {
                let made: Vec<_> = (0..8)
                    .map(|_| {
                        s.spawn(|| load_or_create(&path).unwrap().public().as_str().to_string())
                    })
                    .collect();
                made.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
            let left: Vec<_> = fs::read_dir(dir.path().join("keys")).unwrap().collect();
            assert_eq!(left.len(), 1, "only the key: {left:?}");
        }
    }

    #[test]
    fn a_key_others_can_read_or_a_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.key");
        load_or_create(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_or_create(&path).err().unwrap().to_string();
        assert!(e.contains("mode 644") && e.contains("chmod 600"), "{e}");
        let link = dir.path().join("link.key");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let e = load_or_create(&link).err().unwrap().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        fs::write(dir.path().join("junk.key"), "not a key").unwrap();
        let junk = dir.path().join("junk.key");
        fs::set_permissions(&junk, fs::Permissions::from_mode(0o600)).unwrap();
        let e = load_or_create(&junk).err().unwrap().to_string();
        assert!(e.contains("PKCS#8"), "{e}");
    }
}
