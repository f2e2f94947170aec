use super::*;
use crate::model::EventKind;
use std::fs::OpenOptions;

fn line(time: u64) -> String {
    let e = Event::new(time, EventKind::Joined, format!("joined at {time}"));
    format!("{}\n", serde_json::to_string(&e).unwrap())
}

fn append(path: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

/// The times of the events a poll read, and what else it said.
fn read(f: &mut Follower) -> (Vec<u64>, usize, bool) {
    match f.poll().unwrap() {
        Poll::Read {
            events,
            skipped,
            restarted,
            more: false,
            ..
        } => (events.iter().map(|e| e.time).collect(), skipped, restarted),
        other => panic!("{other:?}"),
    }
}

#[test]
fn only_new_complete_lines_are_read_and_a_partial_one_waits_for_its_newline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let mut f = Follower::new(&path);
    assert_eq!(f.poll().unwrap(), Poll::Missing);
    append(&path, line(1).as_bytes());
    assert_eq!(read(&mut f), (vec![1], 0, false));
    assert_eq!(read(&mut f), (vec![], 0, false), "nothing new");

    let two = line(2);
    let (start, end) = two.split_at(10);
    append(&path, format!("{}{start}", line(3)).as_bytes());
    assert_eq!(read(&mut f), (vec![3], 0, false), "half a line is held");
    append(&path, end.as_bytes());
    assert_eq!(read(&mut f), (vec![2], 0, false));
}

#[test]
fn a_line_over_the_limit_or_not_an_event_is_skipped_and_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let mut f = Follower::new(&path);
    // Written in pieces, as a slow writer would: it is skipped, never held whole.
    append(&path, &vec![b'x'; EVENT_LINE_LIMIT]);
    assert_eq!(read(&mut f), (vec![], 0, false));
    append(&path, &vec![b'x'; EVENT_LINE_LIMIT]);
    assert_eq!(read(&mut f), (vec![], 0, false));
    assert!(
        f.partial.capacity() <= EVENT_LINE_LIMIT,
        "held {}",
        f.partial.capacity()
    );
    append(&path, format!("x\nnot json\n\n{}", line(4)).as_bytes());
    assert_eq!(read(&mut f), (vec![4], 2, false));
}

#[test]
fn a_journal_that_shrinks_or_is_replaced_is_read_again_from_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let mut f = Follower::new(&path);
    append(&path, format!("{}{}", line(1), line(2)).as_bytes());
    assert_eq!(read(&mut f), (vec![1, 2], 0, false));

    std::fs::write(&path, line(5)).unwrap();
    assert_eq!(read(&mut f), (vec![5], 0, true), "truncated and rewritten");

    // Replaced by another file, longer than what was read.
    let other = dir.path().join("new.jsonl");
    std::fs::write(&other, format!("{}{}{}", line(6), line(7), line(8))).unwrap();
    std::fs::rename(&other, &path).unwrap();
    assert_eq!(read(&mut f), (vec![6, 7, 8], 0, true));
    assert_eq!(read(&mut f), (vec![], 0, false));

    std::fs::remove_file(&path).unwrap();
    assert_eq!(f.poll().unwrap(), Poll::Missing);
    append(&path, line(9).as_bytes());
    assert_eq!(
        read(&mut f),
        (vec![9], 0, false),
        "a new journal, from its start"
    );
}

#[test]
fn a_rotated_journal_is_read_to_its_end_then_the_new_one_from_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let mut f = Follower::new(&path);
    append(&path, line(1).as_bytes());
    assert_eq!(read(&mut f), (vec![1], 0, false));
    // dtd appends, then rotates before its next append: the line after the last poll is
    // in the rotated file.
    append(&path, line(2).as_bytes());
    let limits = crate::config::JournalConfig {
        max_size: 1,
        keep: 3,
    };
    let two = [Event::new(3, EventKind::Joined, "three".into())];
    assert!(journal::append(&path, &two, limits).unwrap());
    let Poll::Read {
        events,
        rotated,
        more,
        restarted,
        ..
    } = f.poll().unwrap()
    else {
        panic!("not read");
    };
    assert_eq!(
        (events.len(), events[0].time, rotated, restarted, more),
        (1, 2, false, false, true)
    );
    let Poll::Read {
        events,
        rotated,
        restarted,
        ..
    } = f.poll().unwrap()
    else {
        panic!("not read");
    };
    let times: Vec<u64> = events.iter().map(|e| e.time).collect();
    assert_eq!((times, rotated, restarted), (vec![3], true, false));
    assert_eq!(read(&mut f), (vec![], 0, false));
}

#[test]
fn a_fifo_in_its_place_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let mut f = Follower::new(&path);
    assert!(matches!(f.poll(), Err(ReadError::NotRegular("a FIFO"))));
}

#[test]
fn a_long_journal_is_read_a_bounded_piece_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let lines: String = (0..20_000).map(line).collect();
    assert!(lines.len() as u64 > READ_LIMIT);
    append(&path, lines.as_bytes());
    let mut f = Follower::new(&path);
    let mut times = Vec::new();
    let mut polls = 0;
    loop {
        polls += 1;
        let Ok(Poll::Read { events, more, .. }) = f.poll() else {
            panic!("not read");
        };
        times.extend(events.iter().map(|e| e.time));
        if !more {
            break;
        }
    }
    assert!(polls > 1);
    assert_eq!(times, (0..20_000).collect::<Vec<u64>>());
}
