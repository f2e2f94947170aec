//! Whether the PID in the job's pidfile is the job: the pidfile lives on the shared file system,
//! which every worker can write, so it may name `dtd` itself, its parents, `sshd`, or a process
//! that took over the PID of a job that died.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::untrusted;

/// A PID and its newline; anything longer is not a pidfile.
const PIDFILE_LIMIT: u64 = 32;
/// Linux reports process start times in USER_HZ ticks, which is 100 on every architecture.
const TICKS_PER_SECOND: f64 = 100.0;
/// The job starts, then writes its pidfile; a process that started more than this after the
/// pidfile was written is not the one that wrote it (the slack covers clock granularity and the
/// shared file system's own timestamps).
const START_SLACK: Duration = Duration::from_secs(2);
/// A command line is read only this far.
const CMDLINE_LIMIT: u64 = 64 * 1024;

/// The PID the pidfile names, checked to be the job's: `Err` says why it is not. With `owner`
/// (the job's uid) the pidfile must be the job user's, and so must the process.
pub fn job_pid(pidfile: &Path, expect: Option<&str>, owner: Option<u32>) -> Result<i32, String> {
    let (pid, written) = read_pidfile(pidfile, owner)?;
    refuse_special(pid)?;
    let proc_dir = format!("/proc/{pid}");
    if let Some(owner) = owner {
        let uid = std::fs::metadata(&proc_dir)
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .map_err(|e| format!("PID {pid} from {}: {e}", pidfile.display()))?;
        if uid != owner {
            return Err(format!(
                "PID {pid} runs as uid {uid}, not the job's user (uid {owner})"
            ));
        }
    }
    let stat = read_proc(&proc_dir, "stat", 4096)
        .map_err(|e| format!("PID {pid} from {}: {e}", pidfile.display()))?;
    let started = started_at(&stat)?;
    if started > written + START_SLACK {
        // No durations in the words: they are logged and journaled once while they stay the same.
        return Err(format!(
            "PID {pid} started after {} was last written: the pidfile is stale and its PID reused",
            pidfile.display()
        ));
    }
    if let Some(want) = expect {
        let cmdline = read_proc(&proc_dir, "cmdline", CMDLINE_LIMIT)?.replace('\0', " ");
        if !cmdline.contains(want) {
            return Err(format!(
                "PID {pid}'s command line `{}` does not contain job.notify.expect `{want}`",
                cmdline.trim()
            ));
        }
    }
    Ok(pid)
}

/// The PID, and when the pidfile was last written.
fn read_pidfile(pidfile: &Path, owner: Option<u32>) -> Result<(i32, SystemTime), String> {
    let (file, meta) = match untrusted::open_owned(pidfile, owner) {
        Ok(Some(opened)) => opened,
        Ok(None) => return Err(format!("pidfile {} does not exist", pidfile.display())),
        Err(e) => return Err(format!("pidfile {} {e}", pidfile.display())),
    };
    if meta.len() > PIDFILE_LIMIT {
        return Err(format!(
            "pidfile {} holds {} bytes, not a PID",
            pidfile.display(),
            meta.len()
        ));
    }
    let bytes = untrusted::read_at_most(file, PIDFILE_LIMIT)
        .map_err(|e| format!("cannot read pidfile {}: {e}", pidfile.display()))?;
    let pid = String::from_utf8_lossy(&bytes)
        .trim()
        .parse()
        .map_err(|_| format!("pidfile {} does not hold a PID", pidfile.display()))?;
    let written = meta
        .modified()
        .map_err(|e| format!("pidfile {}: no modification time: {e}", pidfile.display()))?;
    Ok((pid, written))
}

/// 0, 1 and negative numbers address process groups or init; `dtd` and its ancestors are never
/// the job (a signal would stop `dtd` or the service manager that runs it).
fn refuse_special(pid: i32) -> Result<(), String> {
    if pid <= 1 {
        return Err(format!(
            "PID {pid} is not a job (process groups and init are never signalled)"
        ));
    }
    let me = std::process::id() as i32;
    if pid == me {
        return Err(format!("PID {pid} is dtd itself"));
    }
    let mut ancestor = nix::unistd::getppid().as_raw();
    while ancestor > 1 {
        if ancestor == pid {
            return Err(format!("PID {pid} is an ancestor of dtd (PID {me})"));
        }
        ancestor = match parent_of(ancestor) {
            Some(p) => p,
            None => break,
        };
    }
    Ok(())
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = read_proc(&format!("/proc/{pid}"), "stat", 4096).ok()?;
    stat_fields(&stat)?.get(1)?.parse().ok()
}

/// The fields of `/proc/PID/stat` after the command name, which is in parentheses and may itself
/// hold spaces and parentheses: field 3 (state) is the first.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().collect())
}

/// When the process started, from its start tick (field 22) and the boot-based uptime.
fn started_at(stat: &str) -> Result<SystemTime, String> {
    let ticks: f64 = stat_fields(stat)
        .and_then(|f| f.get(19)?.parse().ok())
        .ok_or("cannot read the process's start time from /proc")?;
    let uptime = read_proc("/proc", "uptime", 256)?;
    let up: f64 = uptime
        .split_whitespace()
        .next()
        .and_then(|u| u.parse().ok())
        .ok_or("cannot read /proc/uptime")?;
    let age = Duration::from_secs_f64((up - ticks / TICKS_PER_SECOND).max(0.0));
    Ok(SystemTime::now() - age)
}

fn read_proc(dir: &str, name: &str, limit: u64) -> Result<String, String> {
    let path = Path::new(dir).join(name);
    let bytes = std::fs::File::open(&path)
        .and_then(|f| untrusted::read_at_most(f, limit))
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "no such process".to_string(),
            _ => format!("cannot read {}: {e}", path.display()),
        })?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn pidfile(dir: &Path, pid: impl std::fmt::Display) -> std::path::PathBuf {
        let p = dir.join("job.pid");
        std::fs::write(&p, format!("{pid}\n")).unwrap();
        p
    }

    #[test]
    fn dtd_itself_its_parent_and_init_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let e = job_pid(&pidfile(dir.path(), me), None, None).unwrap_err();
        assert!(e.contains("dtd itself"), "{e}");
        let parent = nix::unistd::getppid();
        let e = job_pid(&pidfile(dir.path(), parent), None, None).unwrap_err();
        assert!(e.contains("ancestor"), "{e}");
        for pid in ["1", "0", "-1"] {
            let e = job_pid(&pidfile(dir.path(), pid), None, None).unwrap_err();
            assert!(e.contains("not a job"), "{e}");
        }
    }

    #[test]
    fn a_process_started_after_the_pidfile_was_written_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        // Its command line is there once the exec has completed, which spawn does not wait for.
        let cmdline = format!("/proc/{}/cmdline", child.id());
        while std::fs::read(&cmdline).unwrap_or_default().is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let p = pidfile(dir.path(), child.id());
        assert_eq!(job_pid(&p, None, None).unwrap(), child.id() as i32);
        assert_eq!(job_pid(&p, Some("sleep"), None).unwrap(), child.id() as i32);
        let e = job_pid(&p, Some("train.py"), None).unwrap_err();
        assert!(e.contains("does not contain"), "{e}");
        let old = SystemTime::now() - Duration::from_secs(600);
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let e = job_pid(&p, None, None).unwrap_err();
        assert!(e.contains("stale"), "{e}");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_stat_line_with_parentheses_in_the_name_parses() {
        let stat = "42 (a (b) c) S 7 42 42 0 -1 4194304 1 0 0 0 0 0 0 0 20 0 1 0 12345 0 0";
        let f = stat_fields(stat).unwrap();
        assert_eq!((f[0], f[1], f[19]), ("S", "7", "12345"));
    }
}
