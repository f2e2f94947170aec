use std::os::unix::fs::{symlink, PermissionsExt};

use nix::sys::stat::Mode;

use super::walk::*;
use super::*;

fn owners(me: u32) -> Owners {
    Owners { me }
}

fn entry(uid: u32, mode: u32, links: u64) -> Entry {
    Entry { uid, mode, links }
}

/// A directory below the system's temporary one: / and /tmp are root's (and /tmp sticky), the
/// directory this process's own, 0755.
fn place() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o755);
    dir
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn program(dir: &Path, name: &str, mode: u32) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, "#!/bin/sh\necho ran\n").unwrap();
    chmod(&path, mode);
    path
}

fn refusal(path: &Path, pin: Option<&Sha256>) -> Unsafe {
    match open(path, pin) {
        Err(OpenError::Refused { why, .. }) => why,
        other => panic!("{} was not refused: {other:?}", path.display()),
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[test]
fn only_root_and_the_agents_own_user_may_own_what_it_runs() {
    let p = Path::new("/x/prep");
    assert!(check_program(p, entry(0, 0o100755, 1), owners(0)).is_ok());
    assert!(check_program(p, entry(1000, 0o100755, 1), owners(1000)).is_ok());
    assert!(check_program(p, entry(0, 0o100755, 1), owners(1000)).is_ok());
    let e = check_program(p, entry(65534, 0o100755, 1), owners(0)).unwrap_err();
    assert_eq!(e.to_string(), "/x/prep is owned by uid 65534, not root");
    let e = check_dir(p, entry(65534, 0o40755, 2), owners(1000)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "/x/prep is owned by uid 65534, not root or uid 1000 (dtd agent's own user)"
    );
}

#[test]
fn nothing_anyone_else_can_write_and_no_second_name_in_a_sticky_directory() {
    let p = Path::new("/x/prep");
    for mode in [0o100775, 0o100757, 0o100722] {
        let e = check_program(p, entry(0, mode, 1), owners(0)).unwrap_err();
        assert!(matches!(e, Unsafe::Writable { .. }), "{mode:o}: {e}");
    }
    let e = check_dir(p, entry(0, 0o40777, 2), owners(0)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "/x/prep is writable by its group or others and not sticky (mode 0777)"
    );
    // On the way, sticky will do; as the program's own directory, it will not.
    assert!(check_dir(p, entry(0, 0o41777, 2), owners(0)).is_ok());
    assert_eq!(
        check_home(p, 0o41775).unwrap_err().to_string(),
        "/x/prep is writable by its group or others (mode 1775): a program's own directory \
         must be written by no one else, sticky or not"
    );
    assert!(check_home(p, 0o41755).is_ok());
    let link = entry(0, 0o120777, 2);
    assert!(check_link(p, link, false, owners(0)).is_ok());
    let e = check_link(p, link, true, owners(0)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "/x/prep has 2 hard links in a directory others can add names to"
    );
}

#[test]
fn a_program_no_one_else_can_change_is_opened() {
    let dir = place();
    let prog = program(dir.path(), "prep", 0o755);
    let v = open(&prog, None).unwrap();
    assert_eq!(v.path, prog);
    // Through a link on the way (a checked one: the test's own).
    let alias = place();
    let via = alias.path().join("d");
    symlink(dir.path(), &via).unwrap();
    assert_eq!(
        open(&via.join("prep"), None).unwrap().path,
        via.join("prep")
    );
    let dotted = dir.path().join("..").join(dir.path().file_name().unwrap());
    assert!(open(&dotted.join("prep"), None).is_ok());
}

#[test]
fn a_group_or_world_writable_program_is_refused() {
    let dir = place();
    let prog = program(dir.path(), "prep", 0o775);
    let why = refusal(&prog, None);
    assert_eq!(
        why,
        Unsafe::Writable {
            path: prog.clone(),
            mode: 0o775
        }
    );
    chmod(&prog, 0o757);
    assert!(matches!(
        refusal(&prog, None),
        Unsafe::Writable { mode: 0o757, .. }
    ));
}

#[test]
fn a_directory_others_can_write_is_refused_on_the_way_unless_sticky_and_as_home_always() {
    let dir = place();
    let open_dir = dir.path().join("shared");
    std::fs::create_dir(&open_dir).unwrap();
    let prog = program(&open_dir, "prep", 0o755);
    chmod(&open_dir, 0o777);
    assert_eq!(
        refusal(&prog, None),
        Unsafe::WritableDir {
            path: open_dir.clone(),
            mode: 0o777
        }
    );
    // Deeper down too: every directory on the way counts.
    let deeper = open_dir.join("sub");
    std::fs::create_dir(&deeper).unwrap();
    chmod(&deeper, 0o755);
    let inner = program(&deeper, "prep", 0o755);
    assert!(matches!(refusal(&inner, None), Unsafe::WritableDir { .. }));
    // Sticky: others cannot replace what is not theirs, so it will do on the way, but not
    // as the program's own directory, where they could add what the program loads.
    chmod(&open_dir, 0o1777);
    assert!(open(&inner, None).is_ok());
    assert_eq!(
        refusal(&prog, None),
        Unsafe::OpenHome {
            path: open_dir.clone(),
            mode: 0o1777
        }
    );
    // A link there that is a second name of another (trusted) link is refused.
    let elsewhere = place();
    let original = elsewhere.path().join("to-deeper");
    symlink(&deeper, &original).unwrap();
    let linked = open_dir.join("linked");
    std::fs::hard_link(&original, &linked).unwrap();
    assert_eq!(
        refusal(&linked.join("prep"), None),
        Unsafe::HardLinks {
            path: linked.clone(),
            links: 2
        }
    );
    assert!(open(&original.join("prep"), None).is_ok());
}

#[test]
fn a_symbolic_link_to_a_good_program_is_refused_and_names_its_target() {
    let dir = place();
    let prog = program(dir.path(), "prep", 0o755);
    let link = dir.path().join("link");
    symlink(&prog, &link).unwrap();
    let why = refusal(&link, None);
    assert_eq!(
        why.to_string(),
        format!(
            "{} is a symbolic link (to {}): name the program itself",
            link.display(),
            prog.display()
        )
    );
}

#[test]
fn a_pinned_digest_must_match_the_bytes_opened() {
    let dir = place();
    let prog = program(dir.path(), "prep", 0o755);
    let actual = Sha256::of_reader(std::fs::File::open(&prog).unwrap()).unwrap();
    assert_eq!(open(&prog, Some(&actual)).unwrap().path, prog);
    let expected: Sha256 = "00".repeat(32).parse().unwrap();
    let e = open(&prog, Some(&expected)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "refused {}: its sha256 is {actual}, not the pinned {expected}",
            prog.display()
        )
    );
}

#[test]
fn a_program_or_directory_owned_by_another_user_is_refused() {
    if !is_root() {
        // Without root no file can belong to a third user; the rule itself is tested above.
        eprintln!("NOTE: not root: files of another user cannot be made; see only_root_and_...");
        return;
    }
    let nobody = Some(nix::unistd::Uid::from_raw(65534));
    let dir = place();
    let prog = program(dir.path(), "prep", 0o755);
    nix::unistd::chown(&prog, nobody, None).unwrap();
    assert_eq!(
        refusal(&prog, None).to_string(),
        format!("{} is owned by uid 65534, not root", prog.display())
    );
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    let inner = program(&theirs, "prep", 0o755);
    nix::unistd::chown(&theirs, nobody, None).unwrap();
    assert!(matches!(
        refusal(&inner, None),
        Unsafe::Owner { uid: 65534, .. }
    ));
    // A link on the way is checked like the rest.
    let good = program(dir.path(), "good", 0o755);
    let link = dir.path().join("via");
    symlink(dir.path(), &link).unwrap();
    nix::unistd::fchownat(
        nix::fcntl::AT_FDCWD,
        &link,
        nobody,
        None,
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .unwrap();
    let why = refusal(&link.join("good"), None);
    assert_eq!(
        why,
        Unsafe::Owner {
            path: link,
            uid: 65534,
            allowed: owners(0)
        }
    );
    assert!(open(&good, None).is_ok());
}

#[test]
fn a_name_is_looked_up_on_path_and_a_missing_program_is_not_found() {
    let dir = place();
    program(dir.path(), "dt-test-prep", 0o755);
    // The agent's own PATH is not changed: the other tests' threads share it.
    let search = format!("relative:{}:/usr/bin", dir.path().display());
    let found = locate(Path::new("dt-test-prep"), search.as_ref()).unwrap();
    assert_eq!(found, dir.path().join("dt-test-prep"));
    // Relative entries are skipped: the working directory must not choose what runs as root
    // (cargo runs the tests in the crate's directory, where this one would find the check).
    assert!(Path::new("templates/health/gpu_health.py").is_file());
    assert!(matches!(
        locate(Path::new("gpu_health.py"), "templates/health".as_ref()),
        Err(OpenError::NotFound(_))
    ));
    assert!(matches!(
        open(Path::new("dt-no-such-program-anywhere"), None),
        Err(OpenError::NotFound(_))
    ));
    let missing = dir.path().join("nope/prep");
    assert_eq!(
        open(&missing, None).unwrap_err().to_string(),
        format!("program not found: {}", missing.display())
    );
    // A system program by its usual name: on merged-/usr systems /bin is a link, followed.
    assert!(open(Path::new("/bin/true"), None).is_ok());
}

#[test]
fn what_is_not_a_program_file_is_refused() {
    let dir = place();
    assert!(matches!(
        refusal(dir.path(), None),
        Unsafe::NotFile {
            what: "a directory",
            ..
        }
    ));
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o755)).unwrap();
    assert!(matches!(
        refusal(&fifo, None),
        Unsafe::NotFile { what: "a FIFO", .. }
    ));
    let prog = program(dir.path(), "prep", 0o755);
    assert!(matches!(
        refusal(&prog.join("more"), None),
        Unsafe::NotDir { .. }
    ));
}
