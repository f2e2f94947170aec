//! Running a hook command of the config (`job.notify.command`, `job.stall.command`). `dtd run`
//! runs it as its own user, root on the master, so it goes through the runner `dtd agent` uses
//! for the programs it runs as root ([`program`](crate::program)): nothing runs
//! unless no one but root (or dtd's own user) can have put the program there or changed it (the
//! walk from `/`, docs/shared-directory.md "The programs dtd agent runs"), and what runs is the
//! descriptor that was checked. An argv, never through a shell, with its environment given and
//! stdin closed, in its own process group, killed whole past a time limit, so a hook can neither
//! hang nor stall a pass for long; its output goes to dtd's log.

use std::path::Path;
use std::time::Duration;

use crate::program::{self, Program, Status};

/// A hook that runs longer than this is killed (a membership notification is retried next pass).
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a hook did not run to a successful end.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("empty hook command")]
    Empty,
    /// Someone other than root (or dtd's own user) could have put the program there or changed
    /// it: it was not run. The reason names the path at fault (`refused PATH: ...`).
    #[error("hook {0}")]
    Refused(String),
    #[error("starting hook {program}: {why}")]
    Start { program: String, why: String },
    #[error("hook {0} did not finish within {limit:?}, killed", limit = HOOK_TIMEOUT)]
    TimedOut(String),
    #[error("hook {program} failed: {how}")]
    Failed { program: String, how: String },
}

/// Runs `argv` with `env` added to dtd's environment; `Ok` with what ran when it exits 0.
pub async fn run(argv: &[String], env: &[(&'static str, String)]) -> Result<String, HookError> {
    let (path, args) = argv.split_first().ok_or(HookError::Empty)?;
    let hook = Program {
        path: Path::new(path),
        sha256: None,
        args,
        env: (env.iter()).map(|(k, v)| ((*k).into(), v.into())).collect(),
        timeout: HOOK_TIMEOUT,
        what: "hook",
        echo: true,
        user: None,
        dir: None,
    };
    let program = path.clone();
    match program::run(&hook).await.status {
        Status::Exited(0) => Ok(format!("hook {program} ran")),
        Status::Refused(why) => Err(HookError::Refused(why)),
        Status::NotStarted(why) => Err(HookError::Start { program, why }),
        Status::TimedOut => Err(HookError::TimedOut(program)),
        ended => Err(HookError::Failed {
            program,
            how: ended.describe(HOOK_TIMEOUT),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[tokio::test]
    async fn its_environment_is_given_and_its_exit_status_is_the_verdict() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env");
        let script = format!("printf %s \"$DT_EVENT\" > {}", out.display());
        let env = [("DT_EVENT", "stalled".to_string())];
        let ran = run(&argv(&["/bin/bash", "-c", &script]), &env).await;
        assert_eq!(
            ran.map_err(|e| e.to_string()),
            Ok("hook /bin/bash ran".into())
        );
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "stalled");
        let failed = run(&argv(&["/bin/bash", "-c", "exit 3"]), &[]).await;
        assert_eq!(
            failed.unwrap_err().to_string(),
            "hook /bin/bash failed: exit code 3"
        );
        let missing = run(&argv(&["/nonexistent/hook"]), &[]).await;
        assert_eq!(
            missing.unwrap_err().to_string(),
            "starting hook /nonexistent/hook: program not found: /nonexistent/hook"
        );
    }

    /// As root the hook would give whoever can write its directory root on the master: it is
    /// checked as `dtd agent` checks what it runs, and not run at all.
    #[tokio::test]
    async fn a_hook_others_could_have_changed_is_refused_and_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("hooks");
        std::fs::create_dir(&home).unwrap();
        let ran = dir.path().join("ran");
        let hook = home.join("notify.sh");
        std::fs::write(&hook, format!("#!/bin/bash\ntouch {}\n", ran.display())).unwrap();
        chmod(&hook, 0o755);
        chmod(&home, 0o777);
        let refused = run(&argv(&[&hook.display().to_string()]), &[]).await;
        let why = refused.unwrap_err();
        assert!(matches!(why, HookError::Refused(_)), "{why}");
        assert_eq!(
            why.to_string(),
            format!(
                "hook refused {}: {} is writable by its group or others and not sticky (mode 0777)",
                hook.display(),
                home.display()
            )
        );
        assert!(!ran.exists(), "a refused hook ran");

        chmod(&home, 0o755);
        let link = dir.path().join("link.sh");
        std::os::unix::fs::symlink(&hook, &link).unwrap();
        let through_link = run(&argv(&[&link.display().to_string()]), &[]).await;
        assert!(
            matches!(through_link, Err(HookError::Refused(_))),
            "{through_link:?}"
        );
        assert!(!ran.exists());

        let safe = run(&argv(&[&hook.display().to_string()]), &[]).await;
        assert_eq!(
            safe.map_err(|e| e.to_string()),
            Ok(format!("hook {} ran", hook.display()))
        );
        assert!(ran.exists());
    }
}
