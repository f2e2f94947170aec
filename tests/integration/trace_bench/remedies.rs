//! What `dtd` is asked to do beyond following the market in a replay, and the job it runs.

use crate::in_place::Lighthouse;
use crate::support::free_port;
use crate::torchrun::Script;

/// What `dtd` does beyond following the market: the replacement launched at the warning
/// (`workers.replace_interrupted`, and `replace_unhealthy` for what it drains), stragglers and
/// hung nodes drained (`job.stragglers`, `job.stall.action`). `Off`: none of them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Remedies {
    Off,
    On,
}

impl Remedies {
    pub(super) fn from_env() -> Remedies {
        match std::env::var("DT_TRACE_REMEDIES").as_deref() {
            Ok("on") => Remedies::On,
            Ok("off") | Err(_) => Remedies::Off,
            Ok(other) => panic!("DT_TRACE_REMEDIES: on or off, not {other:?}"),
        }
    }

    /// The column's name: the strategy, with `+remedies` when on.
    pub(super) fn name(self, strategy: &str) -> String {
        match self {
            Remedies::Off => strategy.to_string(),
            Remedies::On => format!("{strategy}+remedies"),
        }
    }

    /// Lines under `workers:` in `subnet` (the loopback one, so what dtd launches is reachable).
    pub(super) fn workers(self, subnet: &str) -> String {
        match self {
            Remedies::Off => String::new(),
            Remedies::On => format!(
                "  replace_interrupted: true\n  replace_unhealthy: true\n  capacity: {{ choices: [ {{ instance_type: p3.2xlarge, gpus: 1, subnet: {subnet} }} ] }}\n"
            ),
        }
    }

    /// Lines under `job:`; a stall is one of ten minutes on the real market, compressed.
    pub(super) fn job(self, speed: f64) -> String {
        match self {
            Remedies::Off => "  stragglers: { action: 'off' }\n".into(),
            Remedies::On => format!(
                "  stragglers: {{ action: drain }}\n  stall: {{ after: {}ms, action: drain }}\n",
                (600_000.0 / speed).round()
            ),
        }
    }
}

/// What a warned node's leave takes in real seconds here (a pass, its agent reading the plan,
/// its step finished, the quorum formed again without it: 2 to 4 s on this machine), which no
/// compression shortens.
const LEAVE_REAL_MS: f64 = 6_000.0;

/// The job and the strategy's part of `job.launcher`, with a Lighthouse to clean up under
/// `in_place`, whose default `leave_before_loss` (30 s, what a user gets, not a remedy turned
/// on) is compressed like the trace, but never below the leave's own real seconds: a lead
/// shorter than the leave would end in the loss, which the real market's 30 s never does.
pub(super) fn job(strategy: &str, speed: f64) -> (Script, String, Option<Lighthouse>) {
    let steps = "'10000000'";
    match strategy {
        "in_place" => {
            let port = free_port();
            let script = Script {
                files: &["examples/in_place_job.py"],
                args: format!("--dir, {{efs}}, --steps, {steps}, --step-sleep, '0.05', --checkpoint-every, '100', --eval-every, '1000', --stop-timeout, '30', --count-trained, {{efs}}/trained"),
            };
            let lead = (30_000.0 / speed).clamp(LEAVE_REAL_MS, 120_000.0).round();
            let yaml = format!(
                "    strategy: in_place\n    in_place: {{ lighthouse: '127.0.0.100:{port}', leave_before_loss: {lead}ms }}\n"
            );
            (
                script,
                yaml,
                Some(Lighthouse(format!("bind=127.0.0.1:{port}"))),
            )
        }
        "generation" => {
            let script = Script {
                files: &["examples/torch_job.py"],
                args: format!("--dir, {{efs}}, --steps, {steps}, --step-sleep, '0.05', --checkpoint-every, '20', --stop-timeout, '3', --count-trained, {{efs}}/trained"),
            };
            (script, String::new(), None)
        }
        other => panic!("DT_TRACE_STRATEGY: in_place or generation, not {other:?}"),
    }
}
