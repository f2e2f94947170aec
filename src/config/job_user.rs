//! `job.launcher.user`: who torchrun and the training it starts run as. Never root: the agent
//! runs as root on a worker, and the job is user code.

use serde::{Deserialize, Deserializer};

use super::de::{any_form, form_of, mapping_form, uid};
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
        use serde_yaml::Value;
        /// Exactly these two: a `groups` key would be silently ignored, and the job runs with
        /// no supplementary groups whatever it says.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Ids {
            uid: u32,
            gid: u32,
        }
        const KEY: &str = "job.launcher.user";
        let fail = |why: String| D::Error::custom(format!("{KEY}: {why}"));
        let user = match any_form(d)? {
            Value::Number(n) => {
                let uid = uid(&n).map_err(fail)?;
                JobUser::Ids { uid, gid: uid }
            }
            Value::String(n) if is_user_name(&n) => JobUser::Name(n),
            Value::String(n) => {
                return Err(fail(format!("`{n}` is neither a uid nor a user name")))
            }
            v @ Value::Mapping(_) => {
                let Ids { uid, gid } = mapping_form(KEY, v)?;
                JobUser::Ids { uid, gid }
            }
            v => {
                let form = form_of(&v);
                return Err(fail(format!(
                    "{form} is not a uid, a user name or {{ uid, gid }}"
                )));
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
