//! `TorchrunStrategy=in_place`: the stack made with `create-stack --template-url` from the
//! template in S3, its configs naming the master's Lighthouse (filled in by node.sh at boot;
//! tests/python/test_in_place_bootstrap.py runs that part), and the workers let in to it.

use super::deploy::{make_bucket, outputs, parameter_overrides, parameters, TEMPLATE_BUCKET};
use super::launch_templates::bash_syntax_ok;
use super::security_groups::{security_group, sources};
use super::support::{
    assert_user_data_fits, aws, config_in, dtctl, master_user_data, template_path,
    worker_user_data, STACK,
};
use crate::support::Moto;

const LAUNCHER: &str = "\n  launcher: { torchrun: [/opt/pytorch/bin/torchrun], \
    script: [/myEFSvolume/job/train.py,--steps,1000], strategy: in_place, \
    in_place: { lighthouse: '@MASTER_IP@:29510', collective_timeout: 45s }, \
    env: { PYTHONPATH: /usr/local/lib/dt } }\n";

#[test]
fn an_in_place_stack_from_s3_points_every_node_at_the_masters_lighthouse() {
    let moto = Moto::start();
    make_bucket(&moto);
    let key = "dynamic-training.yaml";
    let template = template_path().display().to_string();
    aws(
        &moto,
        &[
            "s3",
            "cp",
            &template,
            &format!("s3://{TEMPLATE_BUCKET}/{key}"),
        ],
    );
    // AWS's virtual-hosted URL of the object; moto finds it in its own S3 (no network).
    let url = format!("https://{TEMPLATE_BUCKET}.s3.amazonaws.com/{key}");
    let mut overrides = parameter_overrides();
    overrides.extend([
        "TrainingScript=/myEFSvolume/job/train.py,--steps,1000".to_string(),
        "TorchrunStrategy=in_place".to_string(),
        "CollectiveTimeout=45s".to_string(),
    ]);
    let params = parameters(&overrides);
    aws(
        &moto,
        &[
            "cloudformation",
            "create-stack",
            "--stack-name",
            STACK,
            "--template-url",
            &url,
            "--capabilities",
            "CAPABILITY_IAM",
            "--parameters",
            &params,
        ],
    );
    let out = outputs(&moto);

    let dir = tempfile::tempdir().unwrap();
    for (node, user_data) in [
        ("master", master_user_data(&moto, &out)),
        ("worker", worker_user_data(&moto, &out)),
    ] {
        assert_user_data_fits(node, &user_data);
        bash_syntax_ok(&user_data);
        let config = config_in(&user_data);
        assert!(config.contains(LAUNCHER), "{node}: {config}");
        assert!(config.contains("\n  owner: 50000\n"), "{node}: {config}");
        // Unfilled, the config is refused: no node starts dtd without the master's IP.
        let path = dir.path().join(format!("{node}.yaml"));
        let check = |body: &str| {
            std::fs::write(&path, body).unwrap();
            dtctl(
                &moto,
                &path,
                &["config", "check", &path.display().to_string()],
            )
        };
        let unfilled = check(&config);
        assert!(!unfilled.status.success(), "{node}: accepted {config}");
        let filled = check(&config.replace("@MASTER_IP@", "10.0.16.5"));
        assert!(
            filled.status.success(),
            "{node}: {}",
            String::from_utf8_lossy(&filled.stderr)
        );
        // torchft beside the stack's torchrun, before the config is checked.
        let install = user_data
            .find("\"$(dirname '/opt/pytorch/bin/torchrun')/python3\" -m pip install")
            .unwrap_or_else(|| panic!("{node}: no torchft install"));
        assert!(install < user_data.find("dtctl config check").unwrap());
    }

    // The workers reach dtd's front for the Lighthouse on the master.
    let (_, master_in) = security_group(&moto, &format!("{STACK}-master"));
    let (workers, _) = security_group(&moto, &format!("{STACK}-workers"));
    let lighthouse = (workers, "tcp".to_string(), Some(29510), Some(29510));
    assert!(sources(&master_in).contains(&lighthouse), "{master_in:?}");
}
