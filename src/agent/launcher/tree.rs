//! The processes a launcher started. torchrun starts each worker in a session of its own
//! (`start_new_session`), so SIGKILL to torchrun's process group does not reach them: the agent
//! notes torchrun's descendants from `/proc` while torchrun lives, and kills each one's group
//! after, so that "stopped" means no process of the launcher is left.

use std::collections::HashMap;

/// A process as `/proc/<pid>/stat` shows it: its start time tells it from a later process that
/// reuses the PID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Proc {
    pub pid: i32,
    start: u64,
}

/// The processes below a launcher, as far as they have been looked at; what is left of them is
/// killed when this is dropped (the agent stopping with the launcher still running).
pub struct Tree {
    root: Option<i32>,
    procs: Vec<Proc>,
}

impl Tree {
    pub fn new(root: Option<i32>) -> Tree {
        Tree {
            root,
            procs: Vec::new(),
        }
    }

    /// Notes the root's descendants now, keeping those noted before (a worker that exits is
    /// no harm to remember: it is killed only if the same process still runs).
    pub fn look(&mut self) {
        let Some(root) = self.root else { return };
        for p in descendants(root) {
            if !self.procs.contains(&p) {
                self.procs.push(p);
            }
        }
    }

    pub fn kill(&self) {
        kill(&self.procs);
    }

    pub fn any_alive(&self) -> bool {
        any_alive(&self.procs)
    }

    /// The first process noted, still the same one, that a signal stopped (`T`): it takes no
    /// part in the job's steps until someone continues it. One a debugger holds (`t`) is not
    /// named: a person looking at a process is not a hang.
    pub fn stopped(&self) -> Option<i32> {
        let same_and_stopped = |p: &&Proc| {
            fields(p.pid).is_some_and(|(state, _, start)| state == 'T' && start == p.start)
        };
        self.procs.iter().find(same_and_stopped).map(|p| p.pid)
    }

    /// See [`signal_children`].
    pub fn signal_children(&self, signal: nix::sys::signal::Signal) -> usize {
        self.root.map_or(0, |root| signal_children(root, signal))
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        self.look();
        self.kill();
    }
}

/// Every live process's parent and start time.
fn table() -> HashMap<i32, (i32, u64)> {
    let mut parent_of = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return parent_of;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some((ppid, start)) = stat(pid) {
            parent_of.insert(pid, (ppid, start));
        }
    }
    parent_of
}

/// Sends `signal` to `root`'s children (torchrun's workers), not to `root`: torchrun sees its
/// workers fail and starts a new rendezvous round. Returns how many were signalled.
pub fn signal_children(root: i32, signal: nix::sys::signal::Signal) -> usize {
    use nix::unistd::Pid;
    let children = table().into_iter().filter(|(_, (ppid, _))| *ppid == root);
    children
        .filter(|(pid, _)| nix::sys::signal::kill(Pid::from_raw(*pid), signal).is_ok())
        .count()
}

/// Every process below `root`, found by walking each process's parent in `/proc`.
pub fn descendants(root: i32) -> Vec<Proc> {
    let parent_of = table();
    let below = |mut pid: i32| {
        // A chain longer than the table is a loop a racing read made: not below.
        for _ in 0..=parent_of.len() {
            match parent_of.get(&pid) {
                Some((ppid, _)) if *ppid == root => return true,
                Some((ppid, _)) if *ppid > 1 => pid = *ppid,
                _ => return false,
            }
        }
        false
    };
    let mut found: Vec<Proc> = (parent_of.iter())
        .filter(|(pid, _)| below(**pid))
        .map(|(pid, (_, start))| Proc {
            pid: *pid,
            start: *start,
        })
        .collect();
    found.sort_by_key(|p| p.pid);
    found
}

/// SIGKILL to each process still alive as the same process, and to its process group.
pub fn kill(procs: &[Proc]) {
    use nix::sys::signal::{kill, killpg, Signal};
    use nix::unistd::Pid;
    for p in procs {
        if stat(p.pid).is_none_or(|(_, start)| start != p.start) {
            continue;
        }
        let pid = Pid::from_raw(p.pid);
        let _ = killpg(pid, Signal::SIGKILL);
        let _ = kill(pid, Signal::SIGKILL);
    }
}

/// Whether any of them is still alive as the same process.
pub fn any_alive(procs: &[Proc]) -> bool {
    procs
        .iter()
        .any(|p| stat(p.pid).is_some_and(|(_, start)| start == p.start))
}

/// The parent and the start time of `pid`. A zombie counts as gone.
fn stat(pid: i32) -> Option<(i32, u64)> {
    let (state, ppid, start) = fields(pid)?;
    (state != 'Z').then_some((ppid, start))
}

/// The state, the parent and the start time of `pid` (fields 3, 4 and 22 of
/// `/proc/<pid>/stat`; the command name before them is in parentheses and may hold spaces and
/// parentheses itself).
fn fields(pid: i32) -> Option<(char, i32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, ppid, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_kills_a_grandchild_in_a_session_of_its_own() {
        // sh starts a sleep in a new session (setsid), as torchrun starts its workers.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 60 & wait"])
            .spawn()
            .unwrap();
        let root = child.id() as i32;
        let mut found = Vec::new();
        for _ in 0..100 {
            found = descendants(root);
            if !found.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!found.is_empty(), "the sleep below sh");
        assert!(any_alive(&found));
        kill(&found);
        let _ = child.wait();
        for _ in 0..100 {
            if !any_alive(&found) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("still alive: {found:?}");
    }

    #[test]
    fn names_a_process_a_signal_stopped_until_it_is_continued() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 60 & wait"])
            .spawn()
            .unwrap();
        let mut tree = Tree::new(Some(child.id() as i32));
        let sleep = wait_for("the sleep below sh", || {
            tree.look();
            tree.procs.first().map(|p| p.pid)
        });
        assert_eq!(tree.stopped(), None, "a running sleep is not stopped");
        signal(sleep, "STOP");
        assert_eq!(wait_for("the sleep stopped", || tree.stopped()), sleep);
        signal(sleep, "CONT");
        wait_for("the sleep running again", || {
            tree.stopped().is_none().then_some(())
        });
        tree.kill();
        let _ = child.wait();
    }

    fn signal(pid: i32, name: &str) {
        let ok = std::process::Command::new("kill")
            .args([&format!("-{name}"), &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} {pid}");
    }

    /// What `probe` finds, within 5 s: the state changes when the kernel gets to it.
    fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            if let Some(found) = probe() {
                return found;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: not within 5 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
