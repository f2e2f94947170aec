//! Who torchrun and the training it starts run as: `job.launcher.user`, else `job.owner`'s user,
//! else the agent's own. Never root: the training script is user code, and the agent runs as root
//! on a worker. The process is given the user's uid and gid before it execs, and, as root, no
//! supplementary groups (the standard library's `Command::uid` drops them).

use std::ffi::OsString;

use crate::config::{Config, JobUser, Launcher, NoUser};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
    /// The user's name and home, when the passwd database knows the uid: torch keeps caches
    /// under `$HOME`, which must be the job user's, not the agent's.
    pub name: Option<String>,
    pub home: Option<OsString>,
}

/// Why the launcher cannot start as the job's user.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunAsError {
    #[error("job.launcher.user: {0}")]
    User(NoUser),
    #[error(
        "the job would run as uid {uid}, gid {gid}: set job.launcher.user (or job.owner) to the \
         job's user; user code never runs as root"
    )]
    Root { uid: u32, gid: u32 },
    #[error(
        "dtd agent runs as uid {}, gid {}: only root can start the job as uid {uid}, gid {gid}",
        .agent.0, .agent.1
    )]
    NotRoot {
        agent: (u32, u32),
        uid: u32,
        gid: u32,
    },
}

/// The user the launcher runs as, or why it cannot start.
pub fn resolve(cfg: &Config, launcher: &Launcher) -> Result<RunAs, RunAsError> {
    let agent = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    let configured =
        (launcher.user.clone()).or_else(|| cfg.job.owner.as_ref().map(JobUser::from_owner));
    let (uid, gid) = match configured {
        Some(user) => user.ids().map_err(RunAsError::User)?,
        None => agent,
    };
    if uid == 0 || gid == 0 {
        return Err(RunAsError::Root { uid, gid });
    }
    if agent.0 != 0 && (uid, gid) != agent {
        return Err(RunAsError::NotRoot { agent, uid, gid });
    }
    let entry = nix::unistd::User::from_uid(uid.into()).ok().flatten();
    Ok(RunAs {
        uid,
        gid,
        name: entry.as_ref().map(|u| u.name.clone()),
        home: entry.map(|u| u.dir.into_os_string()),
    })
}

/// Where torchrun runs: `job.launcher.workdir`, else the job's user's home when it is a
/// directory (a script that saves `snapshot.pt` beside it needs a place it may write), else the
/// agent's own.
pub fn workdir(launcher: &Launcher, u: &RunAs) -> Option<std::path::PathBuf> {
    let home = || {
        let dir = std::path::PathBuf::from(u.home.as_ref()?);
        dir.is_dir().then_some(dir)
    };
    launcher.workdir.clone().or_else(home)
}

/// `HOME`, `USER` and `LOGNAME` of the job's user (the agent's are root's), unless the config's
/// `env` sets them.
pub fn add_env(env: &mut Vec<super::EnvVar>, u: &RunAs) {
    let ours = [
        ("HOME", u.home.clone()),
        ("USER", u.name.clone().map(OsString::from)),
        ("LOGNAME", u.name.clone().map(OsString::from)),
    ];
    for (key, value) in ours {
        if let Some(v) = value.filter(|_| !env.iter().any(|(k, _)| k == key)) {
            env.push((key.into(), v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(launcher: &str, owner: &str) -> Config {
        let text = format!(
            "cluster: t\nworkers: {{ launch_template: lt-1, max: 2 }}\nshared_dir: /efs\n\
             job:\n{owner}  launcher:\n    torchrun: [/opt/torchrun]\n    script: [/efs/train.py]\n{launcher}"
        );
        Config::parse(&text).unwrap()
    }

    fn resolved(launcher: &str, owner: &str) -> Result<RunAs, RunAsError> {
        let cfg = config(launcher, owner);
        resolve(&cfg, cfg.job.launcher.as_ref().unwrap())
    }

    #[test]
    fn the_user_is_the_launchers_else_the_owners_else_the_agents_and_never_root() {
        let me = nix::unistd::geteuid().as_raw();
        let as_root = me == 0;
        let user = resolved("    user: { uid: 50000, gid: 50001 }\n", "  owner: 50002\n");
        let owner = resolved("", "  owner: 50002\n");
        if as_root {
            assert_eq!(user.map(|u| (u.uid, u.gid)), Ok((50000, 50001)));
            assert_eq!(owner.map(|u| (u.uid, u.gid)), Ok((50002, 50002)));
            let e = resolved("", "").unwrap_err().to_string();
            assert!(e.contains("user code never runs as root"), "{e}");
        } else {
            let e = user.unwrap_err().to_string();
            assert!(
                e.contains("only root can start the job as uid 50000"),
                "{e}"
            );
            assert_eq!(resolved("", "").map(|u| u.uid), Ok(me));
        }
        let e = Config::parse(
            "cluster: t\nworkers: { launch_template: lt-1, max: 2 }\nshared_dir: /efs\njob:\n  launcher:\n    torchrun: [/opt/torchrun]\n    script: [/x]\n    user: 0\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("never runs as root"), "{e}");
    }
}
