//! `job.owner`: the user whose files the job's are (`ack`, `host_worker_log`, `job.pid`,
//! `progress`). Any worker can create those files before the job does and keep them; `dtd`
//! believes one only when this user owns it (docs/shared-directory.md, "What a worker can put there").

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::{Deserialize, Deserializer};

use super::de::{any_form, form_of, uid};
use super::users::{is_user_name, lookup, NoUser};
use super::{Job, Notify};

/// A uid, or a user name looked up when `dtd` starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOwner {
    Uid(u32),
    Name(String),
}

impl<'de> Deserialize<'de> for JobOwner {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        use serde_yaml::Value;
        let why = match any_form(d)? {
            Value::Number(n) => match uid(&n) {
                Ok(uid) => return Ok(JobOwner::Uid(uid)),
                Err(why) => why,
            },
            Value::String(n) if is_user_name(&n) => return Ok(JobOwner::Name(n)),
            Value::String(n) => {
                format!("`{n}` is neither a uid nor a user name (letters, digits, `_`, `-`, `.`)")
            }
            v => format!("{} is neither a uid nor a user name", form_of(&v)),
        };
        Err(D::Error::custom(format!("job.owner: {why}")))
    }
}

impl Job {
    /// The job's uid: `job.owner`, else the owner of the directory that holds the pidfile
    /// (signal mode) or else the ack file: the job's user created it (the stack's bootstrap
    /// does), and workers cannot create files in it.
    pub fn owner_uid(&self) -> Result<u32, JobOwnerError> {
        match &self.owner {
            Some(JobOwner::Uid(uid)) => Ok(*uid),
            Some(JobOwner::Name(name)) => Ok(lookup(name)?.uid.as_raw()),
            None => {
                let file = match &self.notify {
                    Notify::Signal { pidfile, .. } => pidfile,
                    _ => &self.ack.file,
                };
                let dir = file.parent().unwrap_or(Path::new("/"));
                std::fs::metadata(dir)
                    .map(|m| m.uid())
                    .map_err(|error| JobOwnerError::Directory {
                        dir: dir.to_path_buf(),
                        error,
                    })
            }
        }
    }
}

/// Why the job's user is not known.
#[derive(Debug, thiserror::Error)]
pub enum JobOwnerError {
    #[error("job.owner: {0}")]
    User(NoUser),
    #[error(
        "job.owner is not set and the owner of {dir} (the job's files' directory) cannot be \
         read: {error}"
    )]
    Directory {
        dir: std::path::PathBuf,
        error: std::io::Error,
    },
}

// By hand rather than `#[from]`, which would also make it the source: `dtctl` prints a source
// after the message, which already holds it.
impl From<NoUser> for JobOwnerError {
    fn from(e: NoUser) -> Self {
        JobOwnerError::User(e)
    }
}
