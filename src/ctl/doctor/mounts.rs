//! Whether `shared_dir` is really a mount of the configured EFS file system, from this process's
//! mount table (`/proc/self/mountinfo`). A directory on the root disk looks the same to `dtd` until
//! the day the master is replaced and its state is gone.

use std::path::{Path, PathBuf};

use super::Check;
use crate::config::Config;

const TITLE: &str = "shared_dir mounted";
/// Where amazon-efs-utils keeps a state file per TLS mount, named
/// `<fs-id>.<mount point with / as .>.<local port>` (efs-utils, `get_mount_specific_filename`).
const EFS_UTILS_STATE: &str = "/var/run/efs";

#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    point: PathBuf,
    fstype: String,
    source: String,
    options: String,
}

/// A directory and the mount it is on: `/efs is fs-0123abcd:/ (nfs4) on /efs`.
#[derive(Debug)]
struct OnMount {
    dir: PathBuf,
    mount: Mount,
}

impl std::fmt::Display for OnMount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = &self.mount;
        let (dir, point) = (self.dir.display(), m.point.display());
        write!(f, "{dir} is {} ({}) on {point}", m.source, m.fstype)
    }
}

/// Why `shared_dir` is not on the configured file system.
#[derive(Debug, thiserror::Error)]
enum NotMounted {
    #[error("{0} is on no mount at all")]
    Nowhere(PathBuf),
    #[error("{dir} is on the root file system, not on {fs}")]
    RootDisk { dir: PathBuf, fs: String },
    #[error("{on}, not {fs}")]
    Elsewhere { on: Box<OnMount>, fs: String },
}

/// `region` is the one the SDK resolved (the config's, or the environment's): mount.efs names
/// the file system by its DNS name in that region.
pub fn check(cfg: &Config, region: &str) -> Check {
    let Some(fs) = cfg.shared_fs_id.as_deref() else {
        return Check::skip(
            "efs.mounted",
            TITLE,
            "no file system configured (shared_fs_id)",
        );
    };
    let fix = format!(
        "mount it: `mount -t efs -o tls,iam {fs}:/ {}` (the stack's bootstrap puts it in \
         /etc/fstab)",
        cfg.shared_dir.display()
    );
    let dir = match cfg.shared_dir.canonicalize() {
        Ok(d) => d,
        Err(e) => {
            let detail = format!("{}: {e}", cfg.shared_dir.display());
            return Check::fail("efs.mounted", TITLE, detail, fix);
        }
    };
    let table = match std::fs::read_to_string("/proc/self/mountinfo") {
        Ok(t) => t,
        Err(e) => {
            let detail = format!("cannot read the mount table /proc/self/mountinfo: {e}");
            return Check::skip("efs.mounted", TITLE, detail);
        }
    };
    match verdict(&table, &dir, fs, region, Path::new(EFS_UTILS_STATE)) {
        Ok(on) => Check::pass("efs.mounted", TITLE, on.to_string()),
        Err(e) => Check::fail("efs.mounted", TITLE, e.to_string(), fix),
    }
}

fn verdict(
    table: &str,
    dir: &Path,
    fs: &str,
    region: &str,
    state: &Path,
) -> Result<OnMount, NotMounted> {
    let mounts: Vec<Mount> = table.lines().filter_map(parse_line).collect();
    // The longest mount point above `dir`; of equal ones the last, which hides the others.
    let Some(m) = mounts
        .iter()
        .filter(|m| dir.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count())
    else {
        return Err(NotMounted::Nowhere(dir.to_path_buf()));
    };
    if m.point == Path::new("/") {
        let (dir, fs) = (dir.to_path_buf(), fs.to_string());
        return Err(NotMounted::RootDisk { dir, fs });
    }
    let host = m
        .source
        .split_once(':')
        .map_or(m.source.as_str(), |(h, _)| h);
    let matches = names_file_system(host, fs, region) || tls_tunnel_of(m, host, fs, state);
    let on = OnMount {
        dir: dir.to_path_buf(),
        mount: m.clone(),
    };
    match matches {
        true => Ok(on),
        false => Err(NotMounted::Elsewhere {
            on: Box::new(on),
            fs: fs.to_string(),
        }),
    }
}

/// `fs-…:/` as typed, or the DNS name mount.efs resolves it to: `fs-….efs.<region>.amazonaws.com`
/// or, for a One Zone mount target, `<az>.fs-….efs.<region>.amazonaws.com` (Amazon EFS User
/// Guide, "Mounting with a DNS name").
fn names_file_system(host: &str, fs: &str, region: &str) -> bool {
    if host == fs {
        return true;
    }
    let Some(rest) = host
        .strip_suffix(".amazonaws.com")
        .or_else(|| host.strip_suffix(".amazonaws.com.cn"))
    else {
        return false;
    };
    let Some(head) = rest.strip_suffix(&format!(".efs.{region}")) else {
        return false;
    };
    head == fs || head.ends_with(&format!(".{fs}"))
}

/// A TLS mount is NFS to a local stunnel port (`127.0.0.1:/`, option `port=N`); efs-utils' state
/// file for that port and mount point says which file system the tunnel reaches.
fn tls_tunnel_of(m: &Mount, host: &str, fs: &str, state: &Path) -> bool {
    if host != "127.0.0.1" || !m.fstype.starts_with("nfs") {
        return false;
    }
    let Some(port) = m.options.split(',').find_map(|o| o.strip_prefix("port=")) else {
        return false;
    };
    let dotted = m.point.to_string_lossy().replace('/', ".");
    let name = format!("{fs}.{}.{port}", dotted.trim_start_matches('.'));
    state.join(name).is_file()
}

/// One line of `/proc/<pid>/mountinfo` (proc(5)): fields 5 (mount point), then after the `-`
/// separator the type, the source and the super-block options.
fn parse_line(line: &str) -> Option<Mount> {
    let fields: Vec<&str> = line.split(' ').collect();
    let dash = fields.iter().position(|f| *f == "-")?;
    Some(Mount {
        point: PathBuf::from(unescape(fields.get(4)?)),
        fstype: unescape(fields.get(dash + 1)?),
        source: unescape(fields.get(dash + 2)?),
        options: unescape(fields.get(dash + 3).unwrap_or(&"")),
    })
}

/// The kernel writes space, tab, newline and backslash as `\040`, `\011`, `\012`, `\134`.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(c) => {
                out.push(c as char);
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const FS: &str = "fs-0123abcd";
    const ROOT: &str = "22 1 253:1 / / rw,relatime shared:1 - xfs /dev/nvme0n1p1 rw,attr2\n";

    fn table(extra: &str) -> String {
        format!("{ROOT}{extra}")
    }

    fn judge(t: &str, dir: &str, state: &Path) -> Result<OnMount, NotMounted> {
        verdict(t, Path::new(dir), FS, "us-east-1", state)
    }

    #[test]
    fn the_efs_dns_name_or_id_is_the_file_system() {
        let none = Path::new("/nonexistent");
        let dns = table("90 22 0:50 / /myEFSvolume rw,relatime shared:40 - nfs4 fs-0123abcd.efs.us-east-1.amazonaws.com:/ rw,vers=4.1\n");
        assert!(judge(&dns, "/myEFSvolume/.dt", none).is_ok());
        let zonal = dns.replace("fs-0123abcd.efs", "us-east-1a.fs-0123abcd.efs");
        assert!(judge(&zonal, "/myEFSvolume", none).is_ok());
        let other = dns.replace("fs-0123abcd", "fs-99999999");
        let e = judge(&other, "/myEFSvolume", none).unwrap_err().to_string();
        assert!(
            e.contains("fs-99999999.efs.us-east-1.amazonaws.com:/ (nfs4)")
                && e.ends_with("not fs-0123abcd"),
            "{e}"
        );
        let other_region = dns.replace("us-east-1", "eu-west-1");
        assert!(judge(&other_region, "/myEFSvolume", none).is_err());
    }

    #[test]
    fn the_root_disk_and_a_sibling_mount_are_not() {
        let none = Path::new("/nonexistent");
        let e = judge(&table(""), "/myEFSvolume", none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("root file system"), "{e}");
        let sibling = table(
            "90 22 0:50 / /myEFSvolume2 rw - nfs4 fs-0123abcd.efs.us-east-1.amazonaws.com:/ rw\n",
        );
        assert!(judge(&sibling, "/myEFSvolume", none)
            .unwrap_err()
            .to_string()
            .contains("root file system"));
    }

    #[test]
    fn a_tls_mount_is_known_by_efs_utils_state_file() {
        let state = tempfile::tempdir().unwrap();
        let tls = table("90 22 0:50 / /myEFSvolume rw - nfs4 127.0.0.1:/ rw,vers=4.1,port=20049,addr=127.0.0.1\n");
        assert!(judge(&tls, "/myEFSvolume", state.path()).is_err());
        std::fs::write(state.path().join("fs-0123abcd.myEFSvolume.20049"), "{}").unwrap();
        assert!(judge(&tls, "/myEFSvolume", state.path()).is_ok());
        std::fs::write(state.path().join("fs-0123abcd.myEFSvolume.20050"), "{}").unwrap();
        let other_port = tls.replace("port=20049", "port=20051");
        assert!(judge(&other_port, "/myEFSvolume", state.path()).is_err());
    }

    #[test]
    fn escaped_mount_points_and_the_last_overmount_count() {
        let none = Path::new("/nonexistent");
        let spaced = table("90 22 0:50 / /my\\040EFS rw - nfs4 fs-0123abcd:/ rw\n");
        assert!(judge(&spaced, "/my EFS/x", none).is_ok());
        let over = table(
            "90 22 0:50 / /efs rw - nfs4 fs-0123abcd:/ rw\n91 90 0:51 / /efs rw - tmpfs tmpfs rw\n",
        );
        assert!(judge(&over, "/efs", none)
            .unwrap_err()
            .to_string()
            .contains("tmpfs"));
    }
}
