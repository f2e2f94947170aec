//! Applying an outcome without the daemon's loop (`act::apply`), against moto: the host files,
//! the generation file, the job's notification, status tags, and a termination confirmed in
//! the state so that it is never sent again.

use std::time::Duration;

use dt::act::apply::{apply, Actuators};
use dt::config::Config;
use dt::deadline::Deadline;
use dt::model::*;
use dt::protocol::host_files::Host;

use crate::support::*;

#[test]
fn an_outcome_is_applied_and_its_termination_confirmed_without_the_loop() {
    let c = Cluster::new();
    let launched = c.launch(2);
    let ((stay, stay_ip), (leave, leave_ip)) = (&launched[0], &launched[1]);
    let notified = c.efs().join("notified");
    let job = format!(
        "  notify: {{ command: [/bin/bash, -c, 'echo $DT_GENERATION > \"$1\"', hook, {}] }}",
        notified.display()
    );
    c.write_config(&c.config(0, 4, &[], &job));
    let cfg = Config::load(&c.config_path()).expect("config");
    let notification = Notification {
        generation: 7,
        added: vec![],
        removed: vec![leave_ip.parse().expect("ip")],
        notices: vec![],
    };
    let mut state = State {
        generation: 7,
        pending_notification: Some(notification.clone()),
        removals: vec![Removal {
            id: leave.clone(),
            ip: leave_ip.parse().expect("ip"),
            generation: 7,
            queued_at: 0,
            deadline: 0,
            log_mark: 0,
            reason: "elastic tag deleted".into(),
            stage: Stage::Ending(Ending::Terminate),
        }],
        ..State::default()
    };
    let outcome = Outcome {
        hosts: vec![Host {
            ip: stay_ip.parse().expect("ip"),
            slots: 1,
        }],
        notify: Some(notification),
        actions: vec![
            Action::Tag {
                status: WorkerStatus::Added,
                instances: vec![stay.clone()],
            },
            Action::Terminate {
                instance: leave.clone(),
            },
        ],
        ..Outcome::default()
    };
    let actuators = Actuators::new(&cfg, c.ec2.clone(), None, None, None);
    let mut shared_fs = Deadline::new("shared directory".into(), Duration::from_secs(10));
    let generation = state.generation;
    let now = dt::clock::now_millis();
    let applied = c.rt.block_on(apply(
        &actuators,
        &outcome,
        generation,
        &mut shared_fs,
        None,
        now,
    ));
    // Act changes no state; decide settles what it reported.
    let rules = dt::decide::Rules::from_config(&cfg, None);
    let settled = dt::decide::settle(&rules, &mut state, &applied, now);

    let failed: Vec<_> = (applied.results.iter())
        .filter(|(_, e)| e.is_some())
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(c.hosts(), std::slice::from_ref(stay_ip));
    let generation = std::fs::read_to_string(&cfg.generation_file).expect("generation file");
    assert_eq!(generation.trim(), "7");
    let told = std::fs::read_to_string(&notified).expect("the notify command ran");
    assert_eq!(told.trim(), "7");
    assert_eq!(state.pending_notification, None, "delivered, so forgotten");
    assert_eq!(c.tag(stay, STATUS_TAG).as_deref(), Some("ADDED"));
    assert!(
        ["shutting-down", "terminated"].contains(&c.state_of(leave).as_str()),
        "{leave} is {}",
        c.state_of(leave)
    );
    assert_eq!(state.removals[0].stage, Stage::Ended, "never sent again");
    let kinds: Vec<(&str, Option<&str>)> = (applied.events.iter().chain(&settled))
        .map(|e| (e.kind.as_str(), e.instance.as_deref()))
        .collect();
    assert_eq!(
        kinds,
        [("notified", None), ("terminated", Some(leave.as_str()))]
    );
}
