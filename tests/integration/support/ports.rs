//! Loopback ports for the tests' servers (moto, `dtd`'s report and metrics listeners, stand-ins).
//!
//! A port found by binding port 0 and letting it go lies in the kernel's ephemeral range: before
//! the server that was meant to have it binds it, any outgoing connection on the machine (an agent
//! dialling `dtd`, the CLI calling moto) may take it as its source port. CI failed so: `dtd` could
//! not listen on its report port. Ports below that range are never handed out as source ports, and
//! a lock file per port, held until the test process exits, keeps test processes running side by
//! side from handing out the same one.

use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Locks held for the life of the process: dropping one would hand its port to another process.
static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// A loopback port no other caller here or in another test process is given while this process
/// runs, free to bind now, and outside the ephemeral range.
pub fn free_port() -> u16 {
    let range = outside_ephemeral();
    let span = u32::from(range.end - range.start);
    let start = std::process::id().wrapping_mul(7919) % span;
    let dir = lock_dir();
    let mut held = HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for i in 0..span {
        let port = range.start + ((start + i) % span) as u16;
        if let Some(lock) = reserve(&dir, port) {
            held.push(lock);
            return port;
        }
    }
    panic!("no free loopback port in {range:?} (outside the ephemeral range)");
}

/// Ours when its lock file (in `dir`) is ours and nothing listens on it.
fn reserve(dir: &Path, port: u16) -> Option<File> {
    let path = dir.join(port.to_string());
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    file.try_lock().ok()?;
    TcpListener::bind(("127.0.0.1", port)).ok()?;
    Some(file)
}

fn lock_dir() -> PathBuf {
    let dir = std::env::temp_dir().join("dt-test-ports");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

/// The wider of the two stretches the kernel never picks source ports from, above 10000.
fn outside_ephemeral() -> Range<u16> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .unwrap_or_else(|_| "32768 60999".into());
    let mut bounds = text
        .split_whitespace()
        .filter_map(|n| n.parse::<u16>().ok());
    let (low, high) = (
        bounds.next().unwrap_or(32768),
        bounds.next().unwrap_or(60999),
    );
    let below = 10000..low.max(10000);
    let above = high.saturating_add(1).max(10000)..u16::MAX;
    let widest = if below.len() >= above.len() {
        below
    } else {
        above
    };
    assert!(
        widest.len() >= 100,
        "the ephemeral range {low}-{high} leaves no room for the tests' ports"
    );
    widest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_never_ephemeral() {
        let range = outside_ephemeral();
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "{ports:?}");
        for port in ports {
            assert!(range.contains(&port), "{port} outside {range:?}");
            TcpListener::bind(("127.0.0.1", port)).expect("bindable");
        }
    }
}
