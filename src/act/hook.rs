//! Running a hook command of the config: an argv (never through a shell), its environment
//! given, stdin closed, killed past a time limit, so a hook can neither hang nor stall a pass
//! for long.

use std::time::Duration;

/// A hook that runs longer than this is killed (a membership notification is retried next pass).
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a hook did not run to a successful end.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("empty hook command")]
    Empty,
    #[error("starting hook {program}: {why}")]
    Start {
        program: String,
        why: std::io::Error,
    },
    #[error("hook {0} did not finish within {limit:?}", limit = HOOK_TIMEOUT)]
    TimedOut(String),
    #[error("waiting for hook {program}: {why}")]
    Wait {
        program: String,
        why: std::io::Error,
    },
    #[error("hook {program} failed: {status}")]
    Failed {
        program: String,
        status: std::process::ExitStatus,
    },
}

/// Runs `argv` with `env` added to dtd's environment; `Ok` with what ran when it exits 0.
pub async fn run(argv: &[String], env: &[(&str, String)]) -> Result<String, HookError> {
    let (program, args) = argv.split_first().ok_or(HookError::Empty)?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|why| HookError::Start {
            program: program.clone(),
            why,
        })?;
    let program = program.clone();
    match tokio::time::timeout(HOOK_TIMEOUT, child.wait()).await {
        Err(_) => Err(HookError::TimedOut(program)),
        Ok(Err(why)) => Err(HookError::Wait { program, why }),
        Ok(Ok(status)) if status.success() => Ok(format!("hook {program} ran")),
        Ok(Ok(status)) => Err(HookError::Failed { program, status }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[tokio::test]
    async fn its_environment_is_given_and_its_exit_status_is_the_verdict() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env");
        let script = format!("printf %s \"$DT_EVENT\" > {}", out.display());
        let env = [("DT_EVENT", "stalled".to_string())];
        let ran = run(&argv(&["/bin/sh", "-c", &script]), &env).await;
        assert_eq!(
            ran.map_err(|e| e.to_string()),
            Ok("hook /bin/sh ran".into())
        );
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "stalled");
        let failed = run(&argv(&["/bin/sh", "-c", "exit 3"]), &[]).await;
        assert!(failed.unwrap_err().to_string().contains("exit status: 3"));
        let missing = run(&argv(&["/nonexistent/hook"]), &[]).await;
        assert!(missing
            .unwrap_err()
            .to_string()
            .starts_with("starting hook /nonexistent/hook"));
    }
}
