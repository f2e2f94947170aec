//! Running a hook command of the config: an argv (never through a shell), its environment
//! given, stdin closed, killed past a time limit, so a hook can neither hang nor stall a pass
//! for long.

use std::time::Duration;

/// A hook that runs longer than this is killed (a membership notification is retried next pass).
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `argv` with `env` added to dtd's environment; `Ok` with what ran when it exits 0.
pub async fn run(argv: &[String], env: &[(&str, String)]) -> Result<String, String> {
    let (program, args) = argv.split_first().ok_or("empty hook command")?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting hook {program}: {e}"))?;
    match tokio::time::timeout(HOOK_TIMEOUT, child.wait()).await {
        Err(_) => Err(format!(
            "hook {program} did not finish within {HOOK_TIMEOUT:?}"
        )),
        Ok(Err(e)) => Err(format!("waiting for hook {program}: {e}")),
        Ok(Ok(status)) if status.success() => Ok(format!("hook {program} ran")),
        Ok(Ok(status)) => Err(format!("hook {program} failed: {status}")),
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
        assert_eq!(ran, Ok("hook /bin/sh ran".into()));
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "stalled");
        let failed = run(&argv(&["/bin/sh", "-c", "exit 3"]), &[]).await;
        assert!(failed.unwrap_err().contains("exit status: 3"));
        let missing = run(&argv(&["/nonexistent/hook"]), &[]).await;
        assert!(missing
            .unwrap_err()
            .starts_with("starting hook /nonexistent/hook"));
    }
}
