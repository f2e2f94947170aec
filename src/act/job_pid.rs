//! Whether the PID in the job's pidfile is the job: the pidfile lives on the shared file system,
//! which every worker can write, so it may name `dtd` itself, its parents, `sshd`, or a process
//! that took over the PID of a job that died.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::clock::millis;
use crate::model::Millis;
use crate::untrusted::{self, ReadError};

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

/// Why the pidfile's PID is not known to be the job's: nothing is signalled.
#[derive(Debug, thiserror::Error)]
pub enum PidError {
    #[error("pidfile {} does not exist", .0.display())]
    NoPidfile(PathBuf),
    #[error("pidfile {} {why}", path.display())]
    PidfileRefused { path: PathBuf, why: ReadError },
    #[error("pidfile {} holds {size} bytes, not a PID", path.display())]
    PidfileTooLarge { path: PathBuf, size: u64 },
    #[error("cannot read pidfile {}: {why}", path.display())]
    PidfileUnreadable { path: PathBuf, why: io::Error },
    #[error("pidfile {} does not hold a PID", .0.display())]
    NotAPid(PathBuf),
    #[error("pidfile {}: no modification time: {why}", path.display())]
    NoModified { path: PathBuf, why: io::Error },
    #[error("PID {0} is not a job (process groups and init are never signalled)")]
    Special(i32),
    #[error("PID {0} is dtd itself")]
    Dtd(i32),
    #[error("PID {pid} is an ancestor of dtd (PID {me})")]
    Ancestor { pid: i32, me: i32 },
    #[error("PID {pid} from {}: {why}", pidfile.display())]
    Process {
        pid: i32,
        pidfile: PathBuf,
        why: ProcError,
    },
    #[error("PID {pid} runs as uid {uid}, not the job's user (uid {owner})")]
    NotOwner { pid: i32, uid: u32, owner: u32 },
    // No durations in the words: they are logged and journaled once while they stay the same.
    #[error("PID {pid} started after {} was last written: the pidfile is stale and its PID reused", pidfile.display())]
    Stale { pid: i32, pidfile: PathBuf },
    #[error("PID {pid}'s command line `{cmdline}` does not contain job.notify.expect `{want}`")]
    NotExpected {
        pid: i32,
        cmdline: String,
        want: String,
    },
    #[error(transparent)]
    Proc(#[from] ProcError),
}

/// What `/proc` would not tell.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("no such process")]
    Gone,
    #[error("cannot read {}: {why}", path.display())]
    Unreadable { path: PathBuf, why: io::Error },
    /// The process's directory could not be looked at.
    #[error("{0}")]
    Metadata(io::Error),
    #[error("cannot read the process's start time from /proc")]
    NoStartTime,
    #[error("cannot read the boot time (btime) from /proc/stat")]
    NoBootTime,
}

/// The PID the pidfile names, checked to be the job's: `Err` says why it is not. With `owner`
/// (the job's uid) the pidfile must be the job user's, and so must the process.
pub fn job_pid(pidfile: &Path, expect: Option<&str>, owner: Option<u32>) -> Result<i32, PidError> {
    let (pid, written) = read_pidfile(pidfile, owner)?;
    refuse_special(pid)?;
    let proc_dir = format!("/proc/{pid}");
    let of_pid = |why| PidError::Process {
        pid,
        pidfile: pidfile.to_path_buf(),
        why,
    };
    if let Some(owner) = owner {
        let uid = std::fs::metadata(&proc_dir)
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .map_err(|e| of_pid(ProcError::Metadata(e)))?;
        if uid != owner {
            return Err(PidError::NotOwner { pid, uid, owner });
        }
    }
    let stat = read_proc(&proc_dir, "stat", 4096).map_err(of_pid)?;
    let started = started_at(&stat)?;
    if started > written.saturating_add(millis(START_SLACK)) {
        let pidfile = pidfile.to_path_buf();
        return Err(PidError::Stale { pid, pidfile });
    }
    if let Some(want) = expect {
        let cmdline = read_proc(&proc_dir, "cmdline", CMDLINE_LIMIT)?.replace('\0', " ");
        if !cmdline.contains(want) {
            return Err(PidError::NotExpected {
                pid,
                cmdline: cmdline.trim().to_string(),
                want: want.to_string(),
            });
        }
    }
    Ok(pid)
}

/// The PID, and when the pidfile was last written.
fn read_pidfile(pidfile: &Path, owner: Option<u32>) -> Result<(i32, Millis), PidError> {
    let path = || pidfile.to_path_buf();
    let (file, meta) = match untrusted::open_owned(pidfile, owner) {
        Ok(Some(opened)) => opened,
        Ok(None) => return Err(PidError::NoPidfile(path())),
        Err(why) => return Err(PidError::PidfileRefused { path: path(), why }),
    };
    if meta.len() > PIDFILE_LIMIT {
        let size = meta.len();
        return Err(PidError::PidfileTooLarge { path: path(), size });
    }
    let bytes = untrusted::read_at_most(file, PIDFILE_LIMIT)
        .map_err(|why| PidError::PidfileUnreadable { path: path(), why })?;
    let pid = String::from_utf8_lossy(&bytes)
        .trim()
        .parse()
        .map_err(|_| PidError::NotAPid(path()))?;
    let written = meta
        .modified()
        .map_err(|why| PidError::NoModified { path: path(), why })?;
    Ok((pid, since_epoch(written)))
}

/// 0, 1 and negative numbers address process groups or init; `dtd` and its ancestors are never
/// the job (a signal would stop `dtd` or the service manager that runs it).
fn refuse_special(pid: i32) -> Result<(), PidError> {
    if pid <= 1 {
        return Err(PidError::Special(pid));
    }
    let me = std::process::id() as i32;
    if pid == me {
        return Err(PidError::Dtd(pid));
    }
    let mut ancestor = nix::unistd::getppid().as_raw();
    while ancestor > 1 {
        if ancestor == pid {
            return Err(PidError::Ancestor { pid, me });
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

/// A file's time on the clock's scale (0 before 1970).
fn since_epoch(at: SystemTime) -> Millis {
    at.duration_since(SystemTime::UNIX_EPOCH).map_or(0, millis)
}

/// When the process started: the boot time plus its start tick (field 22). Both are the kernel's
/// records of the wall clock, as the pidfile's modification time is, so no clock is read here: a
/// test's clock, moved ahead, does not make a fresh pidfile look older than its process. The boot
/// time is in whole seconds, so the start may read up to a second early: the check is that much
/// more lenient, never stricter.
fn started_at(stat: &str) -> Result<Millis, ProcError> {
    let ticks: f64 = stat_fields(stat)
        .and_then(|f| f.get(19)?.parse().ok())
        .ok_or(ProcError::NoStartTime)?;
    // A line per CPU comes before it: room for a few thousand.
    let boot = read_proc("/proc", "stat", 1 << 20)?;
    let btime: u64 = (boot.lines())
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
        .ok_or(ProcError::NoBootTime)?;
    let after_boot = Duration::from_secs_f64((ticks / TICKS_PER_SECOND).max(0.0));
    Ok(btime
        .saturating_mul(1000)
        .saturating_add(millis(after_boot)))
}

fn read_proc(dir: &str, name: &str, limit: u64) -> Result<String, ProcError> {
    let path = Path::new(dir).join(name);
    let bytes = std::fs::File::open(&path)
        .and_then(|f| untrusted::read_at_most(f, limit))
        .map_err(|why| match why.kind() {
            io::ErrorKind::NotFound => ProcError::Gone,
            _ => ProcError::Unreadable { path, why },
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
        let e = job_pid(&pidfile(dir.path(), me), None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("dtd itself"), "{e}");
        let parent = nix::unistd::getppid();
        let e = job_pid(&pidfile(dir.path(), parent), None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("ancestor"), "{e}");
        for pid in ["1", "0", "-1"] {
            let e = job_pid(&pidfile(dir.path(), pid), None, None)
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a job"), "{e}");
        }
    }

    #[test]
    fn a_process_started_after_the_pidfile_was_written_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        // spawn returns when the exec closes the child's descriptors, before the kernel has set
        // up the new command line: /proc shows the test's own, then none, then sleep's. Wait for
        // sleep's, the one the checks below read.
        let cmdline = format!("/proc/{}/cmdline", child.id());
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !std::fs::read(&cmdline)
            .unwrap_or_default()
            .starts_with(b"sleep\0")
        {
            assert!(std::time::Instant::now() < deadline, "sleep never exec'd");
            std::thread::sleep(Duration::from_millis(5));
        }
        let p = pidfile(dir.path(), child.id());
        assert_eq!(job_pid(&p, None, None).unwrap(), child.id() as i32);
        assert_eq!(job_pid(&p, Some("sleep"), None).unwrap(), child.id() as i32);
        let e = job_pid(&p, Some("train.py"), None).unwrap_err().to_string();
        assert!(e.contains("does not contain"), "{e}");
        let old = SystemTime::now() - Duration::from_secs(600);
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let e = job_pid(&p, None, None).unwrap_err().to_string();
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
