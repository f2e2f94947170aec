//! `dtd run`'s passes in process, on a clock the test moves (`dt::clock::ManualClock`), against
//! moto: a leaving worker whose job never acknowledges is terminated when the daemon's clock
//! passes the ack timeout, ten minutes the test moves the clock through instead of waiting.

use std::time::Duration;

use dt::aws::Clients;
use dt::clock::{now_millis, ManualClock, SharedClock};
use dt::config::Config;
use dt::daemon::{lock_state_dir, Daemon, Lock};
use dt::metrics::AwsCalls;

use crate::support::*;

const ACK_TIMEOUT_MS: u64 = 600_000;

/// A `dtd run` on `clock`, as started again: it lists every instance at its first pass. It
/// holds the state directory's lock, as `dtd run` does, while it lives.
fn daemon(c: &Cluster, clock: SharedClock) -> (Daemon, Lock) {
    let cfg = Config::load(&c.config_path()).expect("config");
    let lock = lock_state_dir(&cfg).expect("the state directory");
    let clients = Clients {
        ec2: c.ec2.clone(),
        sqs: None,
        autoscaling: None,
        efs: None,
        calls: AwsCalls::default(),
    };
    let mut daemon = (c.rt)
        .block_on(async { Daemon::new(cfg, clients, clock) })
        .expect("daemon");
    c.rt.block_on(daemon.take_reports())
        .expect("the agents' port");
    (daemon, lock)
}

/// Passes (a real tenth of a second apart, the clock standing still) until `done`.
fn pass_until(c: &Cluster, d: &mut Daemon, what: &str, done: impl Fn() -> bool) {
    for _ in 0..50 {
        c.rt.block_on(d.pass());
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what}: not after 50 passes; journal: {:?}", c.journal());
}

#[test]
fn a_leaving_worker_is_terminated_when_the_injected_clock_passes_the_ack_timeout() {
    let c = Cluster::new();
    let launched = c.launch(2);
    let ((_, stay_ip), (leave, leave_ip)) = (&launched[0], &launched[1]);
    c.marker(stay_ip);
    c.marker(leave_ip);
    let job = "  notify: { command: [/bin/true] }\n  ack: { timeout: 10m }";
    c.write_config(&c.config(0, 4, &[], job));
    let clock = ManualClock::starting_at(now_millis());
    let (mut first, lock) = daemon(&c, clock.clone());
    pass_until(&c, &mut first, "both workers joined", || {
        c.hosts().len() == 2 && c.journal().len() >= 2
    });
    drop((first, lock));
    // Its port closes when its runtime next runs (this one runs only inside `block_on`).
    c.rt.block_on(async { tokio::time::sleep(Duration::from_millis(50)).await });

    // Seen by the next daemon's first listing (a running one hears of it from EventBridge, or
    // at its next resync).
    c.delete_elastic_tag(leave);
    let (mut d, _lock) = daemon(&c, clock.clone());
    pass_until(&c, &mut d, "the leaving worker unlisted", || {
        c.hosts() == [stay_ip.clone()]
    });
    // The job never acknowledges (its notify command is /bin/true): the worker waits for it.
    clock.advance(ACK_TIMEOUT_MS - 1_000);
    c.rt.block_on(d.pass());
    assert_eq!(c.state_of(leave), "running", "{:?}", c.journal_of(leave));
    assert_eq!(c.events_of("ack_timeout", leave), 0);

    clock.advance(2_000);
    c.rt.block_on(d.pass());
    assert_eq!(
        c.events_of("ack_timeout", leave),
        1,
        "{:?}",
        c.journal_of(leave)
    );
    let ended = c.state_of(leave);
    assert!(
        ["shutting-down", "terminated"].contains(&ended.as_str()),
        "{ended}"
    );
}
