//! A hung node, end to end (`job.stall.action: drain`): a real PyTorch job under torchrun on
//! three loopback nodes (`dtd agent` each, `dtd run`, moto). One node's training process is
//! stopped with SIGSTOP while its agent and torchrun live on, as a process stuck outside the
//! job's collectives would be: the others wait in gloo's allreduce (30 minutes by default). The
//! agent reports the stopped process, the stall names that node, it leaves the job and is
//! terminated once its launcher stopped, and the other two train again from their checkpoint
//! without a person, within `stall.after` plus a generation change.

use std::time::Duration;

use crate::agent::process_gone;
use crate::support::{self, signal, wait_until};
use crate::torchrun::{Script, Story, PHASE, STORIES};

/// `job.stall.after` for this story: a few progress writes (once a second) and passes.
const STALL_AFTER: Duration = Duration::from_secs(8);

fn long_job() -> Script {
    Script {
        files: &["examples/torch_job.py"],
        args: "--dir, {efs}, --steps, '6000', --step-sleep, '0.05', --checkpoint-every, '20', \
               --stop-timeout, '3'"
            .into(),
    }
}

#[test]
fn a_node_whose_training_process_stopped_is_drained_and_the_others_train_again() {
    let _turn = STORIES.enter();
    let venv = support::torch_venv();
    let stall = format!(
        "  stall: {{ after: {}s, action: drain }}\n",
        STALL_AFTER.as_secs()
    );
    let s = Story::with(&venv, &long_job(), &stall);
    let a = s.node("127.0.0.2", false);
    let b = s.node("127.0.0.3", false);
    let c = s.node("127.0.0.4", false);
    let g1 = s.wait_world(3, 0, "a world of 3 training");

    // The training processes below c's torchrun stopped; torchrun and the agent live on.
    let workers: Vec<i32> = s.processes(&c).into_iter().skip(1).collect();
    assert!(!workers.is_empty(), "c's training processes");
    let before = s.before(&[&a, &b]);
    for pid in &workers {
        signal(*pid, "STOP");
    }
    let g = s.wait_world(2, g1, "the other two training again without the hung node");
    let back = before.t.elapsed();
    s.after(before, &[&a, &b], g, "generation", HANG);
    assert!(
        back < STALL_AFTER + Duration::from_secs(60),
        "trained again after {back:?}"
    );

    // Named on the stalled line, drained for it, and gone once its launcher stopped.
    let stalled: Vec<String> = (s.c.journal().iter())
        .filter(|e| e["kind"] == "stalled")
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(stalled.len(), 1, "{stalled:?}");
    let named = "held back by 127.0.0.4 (its process ";
    assert!(stalled[0].contains(named), "{}", stalled[0]);
    assert!(
        stalled[0].ends_with("drained (job.stall.action: drain)"),
        "{}",
        stalled[0]
    );
    let hung = s.c.journal_of(&c.id);
    let queued = hung.iter().filter(|e| e["kind"] == "removal_queued");
    assert_eq!(
        queued.filter(|e| e["cause"] == "hung").count(),
        1,
        "{hung:?}"
    );
    wait_until("the hung node terminated", PHASE, || {
        s.c.state_of(&c.id) == "terminated"
    });
    assert!(
        workers.iter().all(|p| process_gone(*p)),
        "its stopped processes were killed"
    );
    let explain = support::stdout(&s.c.dtctl(&["explain", &c.id]));
    assert!(
        explain.contains("stopped while the job stalled at step"),
        "{explain}"
    );
    for node in [&a, &b] {
        assert_eq!(s.c.state_of(&node.id), "running", "{} kept", node.ip);
    }
}

/// The change scripts/bench-torchrun reports beside the others.
pub(crate) const HANG: &str = "hung node (SIGSTOP of its training process)";
