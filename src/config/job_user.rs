//! `job.launcher.user`: who torchrun and the training it starts run as. Never root: the agent
//! runs as root on a worker, and the job is user code.

use serde::{Deserialize, Deserializer};

use super::owner::JobOwner;
use super::users::{is_user_name, lookup, NoUser};

/// A user name (its uid and primary gid from the passwd database, looked up on the worker), a
/// uid (with the gid of the same number), or both numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobUser {
    Ids { uid: u32, gid: u32 },
    Name(String),
}

impl JobUser {
    /// The default: `job.owner`'s user, when it is set.
    pub fn from_owner(owner: &JobOwner) -> JobUser {
        match owner {
            JobOwner::Uid(uid) => JobUser::Ids {
                uid: *uid,
                gid: *uid,
            },
            JobOwner::Name(n) => JobUser::Name(n.clone()),
        }
    }

    /// The uid and gid, a name looked up here.
    pub fn ids(&self) -> Result<(u32, u32), NoUser> {
        match self {
            JobUser::Ids { uid, gid } => Ok((*uid, *gid)),
            JobUser::Name(name) => lookup(name).map(|u| (u.uid.as_raw(), u.gid.as_raw())),
        }
    }
}

impl<'de> Deserialize<'de> for JobUser {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Uid(u32),
            Name(String),
            Ids { uid: u32, gid: u32 },
        }
        let user = match Form::deserialize(d)? {
            Form::Uid(uid) => JobUser::Ids { uid, gid: uid },
            Form::Ids { uid, gid } => JobUser::Ids { uid, gid },
            Form::Name(n) if is_user_name(&n) => JobUser::Name(n),
            Form::Name(n) => {
                return Err(D::Error::custom(format!(
                    "job.launcher.user: `{n}` is neither a uid nor a user name"
                )))
            }
        };
        if matches!(
            user,
            JobUser::Ids { uid: 0, .. } | JobUser::Ids { gid: 0, .. }
        ) {
            return Err(D::Error::custom(
                "job.launcher.user: not root (uid or gid 0): the job is user code and never runs as root",
            ));
        }
        Ok(user)
    }
}
