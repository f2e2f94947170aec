//! Worker Auto Scaling groups against moto: `dtctl scale` up and down, a scale-in and a Standby
//! ordered by a person with the AWS CLI, and workers whose prepare-data keeps failing.
//! moto keeps every group instance `InService` and has no lifecycle actions, so the hooks are
//! tested in tests/lifecycle_actions.rs (a stand-in for those two calls) and tests/decide_rules.rs.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

pub(crate) const GROUP: &str = "itest-workers";

/// The worker group, launching from the cluster's template with the worker and elastic tags.
pub(crate) fn create_group(c: &Cluster, desired: u32) {
    let template = format!("LaunchTemplateId={},Version=$Latest", c.template_id);
    let tags = format!(
        "ResourceId={GROUP},ResourceType=auto-scaling-group,Key=NodeType,Value=Worker,PropagateAtLaunch=true \
         ResourceId={GROUP},ResourceType=auto-scaling-group,Key={ELASTIC},Value=true,PropagateAtLaunch=true"
    );
    let mut args = vec![
        "autoscaling",
        "create-auto-scaling-group",
        "--auto-scaling-group-name",
        GROUP,
        "--launch-template",
        &template,
        "--min-size",
        "0",
        "--max-size",
        "4",
        "--availability-zones",
        "us-east-1a",
        "--tags",
    ];
    args.extend(tags.split(' '));
    let desired = desired.to_string();
    args.extend(["--desired-capacity", &desired]);
    c.aws(&args);
}

/// Instance id to private IP, for the group's instances that are running.
pub(crate) fn group_instances(c: &Cluster) -> BTreeMap<String, String> {
    let out = c.aws(&[
        "ec2",
        "describe-instances",
        "--filters",
        &format!("Name=tag:aws:autoscaling:groupName,Values={GROUP}"),
        "Name=instance-state-name,Values=running",
        "--query",
        "Reservations[].Instances[].[InstanceId,PrivateIpAddress]",
        "--output",
        "text",
    ]);
    out.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.to_string(), f.next()?.to_string()))
        })
        .collect()
}

pub(crate) fn desired_capacity(c: &Cluster) -> String {
    c.aws(&[
        "autoscaling",
        "describe-auto-scaling-groups",
        "--auto-scaling-group-names",
        GROUP,
        "--query",
        "AutoScalingGroups[0].DesiredCapacity",
        "--output",
        "text",
    ])
}

/// Plays every new group instance's prepare-data: a success marker (or a failure report).
pub(crate) fn prepare_new(c: &Cluster, ok: bool) {
    for ip in group_instances(c).values() {
        let (mine, other) = match ok {
            true => ("prepare_data_success_", "prepare_data_failed_"),
            false => ("prepare_data_failed_", "prepare_data_success_"),
        };
        let marker = c.efs().join(format!("{mine}{ip}"));
        if marker.exists() || c.efs().join(format!("{other}{ip}")).exists() {
            continue;
        }
        let body =
            r#"{"exit_code": 7, "attempts": 3, "output_tail": ["download: checksum mismatch"]}"#;
        // Whole or not at all, and signed, as the agent writes it.
        match ok {
            true => c.marker(ip),
            false => c.report_json(ip, MarkerKind::Failed, body),
        }
    }
}

fn group_cluster(desired: u32, extra_workers: &str) -> Cluster {
    let mut c = Cluster::new();
    create_group(&c, desired);
    let efs = c.efs().display().to_string();
    let job = format!(
        "  notify: {{ signal: SIGUSR1, pidfile: {efs}/job.pid }}\n  ack: {{ host_worker_log: {efs}/host_worker_log, timeout: 10m }}"
    );
    c.worker_extra = format!("  auto_scaling_group: {GROUP}\n{extra_workers}");
    c.write_config(&c.config(1, 4, &[], &job));
    c
}

/// Runs `dtctl scale` while the test plays prepare-data for the instances the group launches.
fn scale_and_wait(c: &Cluster, replicas: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dtctl"))
        .arg("--config")
        .arg(c.config_path())
        .args([
            "scale",
            "--replicas",
            replicas,
            "--wait",
            "--timeout",
            "60s",
        ])
        .envs(aws_env(&c.moto.endpoint()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dtctl scale");
    let status = loop {
        prepare_new(c, true);
        if let Some(status) = child.try_wait().expect("waiting for dtctl") {
            break status;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = child.wait_with_output().expect("dtctl output");
    assert!(
        status.success(),
        "dtctl scale {replicas}: {}{}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

#[test]
fn dtctl_scale_grows_and_shrinks_the_job_and_refuses_outside_the_group() {
    let mut c = group_cluster(1, "");
    prepare_new(&c, true);
    c.start_dtd();
    c.wait_hosts("the group's first worker", |h| h.len() == 1);
    let _job = start_example_job(&c);

    let up = scale_and_wait(&c, "3");
    assert!(
        up.contains("desired capacity 1 -> 3") && up.contains("3/3 in the job"),
        "{up}"
    );
    assert_eq!(c.hosts().len(), 3);
    let status = c.status_json();
    assert_eq!(
        (
            status["min"].clone(),
            status["desired"].clone(),
            status["max"].clone()
        ),
        (0.into(), 3.into(), 4.into())
    );
    let protected = c.aws(&[
        "autoscaling",
        "describe-auto-scaling-groups",
        "--auto-scaling-group-names",
        GROUP,
        "--query",
        "AutoScalingGroups[0].Instances[?ProtectedFromScaleIn].InstanceId",
        "--output",
        "text",
    ]);
    assert_eq!(
        protected.split_whitespace().count(),
        3,
        "workers in the job are protected: {protected}"
    );

    let before = group_instances(&c);
    let down = scale_and_wait(&c, "1");
    assert!(down.contains("1/1 in the job"), "{down}");
    assert_eq!(c.hosts().len(), 1);
    wait_until(
        "the drained workers to be terminated",
        Duration::from_secs(20),
        || group_instances(&c).len() == 1,
    );
    let drained: Vec<&String> = before
        .keys()
        .filter(|id| !group_instances(&c).contains_key(*id))
        .collect();
    for id in drained {
        // Journaled once the group API answered, which can be just after moto acted.
        c.wait_events("terminated", id, 1);
        assert_eq!(
            c.events_of("acknowledged", id),
            1,
            "{id} left only after the job let it go"
        );
    }
    assert_eq!(desired_capacity(&c), "1");

    let refused = c.dtctl(&["scale", "--replicas", "9"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("allows 0 to 4"),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn a_person_scaling_in_removing_or_putting_a_worker_in_standby_is_drained_first() {
    let mut c = group_cluster(3, "");
    prepare_new(&c, true);
    c.start_dtd();
    c.wait_hosts("three group workers", |h| h.len() == 3);
    let _job = start_example_job(&c);
    // The host file is written before dtd's first status report: poll the report.
    c.wait_status("three ADDED workers, protected from scale-in", |s| {
        s["workers"]
            .as_array()
            .is_some_and(|w| w.len() == 3 && w.iter().all(|w| w["status"] == "ADDED"))
    });

    // The group itself is asked to shrink: it cannot pick a protected worker, dtd drains one.
    c.aws(&[
        "autoscaling",
        "set-desired-capacity",
        "--auto-scaling-group-name",
        GROUP,
        "--desired-capacity",
        "2",
    ]);
    c.wait_hosts("one worker drained", |h| h.len() == 2);
    wait_until("its termination", Duration::from_secs(30), || {
        group_instances(&c).len() == 2
    });

    // A person removes a group worker: drained, then terminated with the group shrinking.
    let (removed, removed_ip) = group_instances(&c).into_iter().next().unwrap();
    let out = c.dtctl(&["remove", &removed]);
    assert!(out.status.success(), "{}", stderr(&out));
    c.wait_hosts("the removed worker to leave", |h| !h.contains(&removed_ip));
    wait_until("its termination", Duration::from_secs(30), || {
        c.events_of("terminated", &removed) == 1
    });
    assert_eq!(c.events_of("acknowledged", &removed), 1);
    assert_eq!(
        desired_capacity(&c),
        "1",
        "not replaced: the desired capacity went down"
    );

    // Standby: out of the job, acknowledged, and left running.
    let (standby, ip) = group_instances(&c).into_iter().next().unwrap();
    c.aws(&[
        "autoscaling",
        "enter-standby",
        "--auto-scaling-group-name",
        GROUP,
        "--instance-ids",
        &standby,
        "--should-decrement-desired-capacity",
    ]);
    c.wait_hosts("the Standby worker to leave", |h| !h.contains(&ip));
    // Once the job let it go, a terminated instance would follow within a pass or two.
    c.wait_events("acknowledged", &standby, 1);
    c.wait_passes(3);
    assert_eq!(c.state_of(&standby), "running");
    assert_eq!(c.events_of("terminated", &standby), 0);
}

#[test]
fn workers_failing_prepare_data_are_replaced_until_the_limit_and_resume_rearms() {
    let mut c = group_cluster(1, "  max_prepare_failures: 2\n");
    c.start_dtd();
    wait_until(
        "two failed workers replaced, then a stop",
        Duration::from_secs(60),
        || {
            prepare_new(&c, false);
            c.try_status()["replacing_stopped"].is_string()
        },
    );
    let text = stdout(&c.dtctl(&["status"]));
    assert!(
        text.contains("Replacing:   stopped after 2 prepare-data failures"),
        "{text}"
    );
    assert!(
        text.contains("checksum mismatch"),
        "the last failure's output: {text}"
    );
    let terminated = |c: &Cluster| {
        let journal = c.journal();
        journal.iter().filter(|e| e["kind"] == "terminated").count()
    };
    wait_for(
        "the two replaced workers' terminations in the journal",
        Duration::from_secs(10),
        || terminated(&c),
        |n| *n >= 2,
    );
    let stuck = group_instances(&c);
    assert_eq!(stuck.len(), 1, "the third is left for a person");
    c.wait_passes(3);
    assert_eq!(group_instances(&c), stuck);
    assert_eq!(terminated(&c), 2);

    let out = c.dtctl(&["resume"]);
    assert!(
        out.status.success() && stdout(&out).contains("re-armed"),
        "{}",
        stderr(&out)
    );
    let (id, _) = stuck.into_iter().next().unwrap();
    wait_until(
        "the stuck worker to be replaced",
        Duration::from_secs(20),
        || c.events_of("terminated", &id) == 1,
    );
}
