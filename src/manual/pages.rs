//! What a man page says beyond the CLI definition: EXIT STATUS, ENVIRONMENT and EXAMPLES, per
//! binary and, for examples, per command. The examples are the ones docs/operating.md gives.

/// The page's name (`dtctl`, `dtctl-add`, `dtd-agent`) and what follows its generated sections.
pub fn sections(page: &str) -> String {
    let (binary, command) = page.split_once('-').unwrap_or((page, ""));
    let mut out = String::new();
    section(&mut out, "EXIT STATUS", &exit_status(binary, command));
    section(&mut out, "ENVIRONMENT", &environment(binary, command));
    let examples = examples(page);
    if !examples.is_empty() {
        section(&mut out, "EXAMPLES", &examples);
    }
    out
}

fn section(out: &mut String, title: &str, items: &[(&str, &str)]) {
    out.push_str(&format!(".SH \"{title}\"\n"));
    for (term, text) in items {
        out.push_str(&format!(".TP\n.B {}\n{}\n", escape(term), escape(text)));
    }
}

fn exit_status(binary: &str, command: &str) -> Vec<(&'static str, &'static str)> {
    let failed = match (binary, command) {
        ("dtctl", "doctor") => "A check failed (its line starts with ✖ and says what to do), or the checks could not run; the reason is on standard error.",
        ("dtctl", _) => "It could not do what was asked; the reason is on standard error, after `dtctl:`.",
        ("dtd", "run") => "It could not start (a refused configuration, a state directory another dtd holds, AWS unreachable at start) or stopped on an error it cannot go on from; the reason is on standard error.",
        _ => "It could not start or stopped on an error; the reason is on standard error.",
    };
    let done = match (binary, command) {
        ("dtd", "run") | ("dtd", "agent") => {
            "Stopped by SIGTERM or SIGINT, after the pass (run) or at once (agent)."
        }
        ("dtctl", "doctor") => "Every check passed.",
        _ => "It did what was asked.",
    };
    vec![
        ("0", done),
        ("1", failed),
        ("2", "The command line was refused (an unknown option, a missing or malformed argument); the usage is printed."),
    ]
}

fn environment(binary: &str, command: &str) -> Vec<(&'static str, &'static str)> {
    let mut vars = Vec::new();
    if binary == "dtctl" {
        vars.push((
            "DT_CONFIG",
            "The configuration file when --config is not given (default /etc/dt/dtd.yaml).",
        ));
    }
    let calls_aws = matches!(
        (binary, command),
        ("dtd", "")
            | ("dtd", "run")
            | ("dtctl", "")
            | ("dtctl", "add" | "remove" | "scale" | "doctor")
    );
    if calls_aws {
        vars.push(("AWS_REGION, AWS_PROFILE, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL", "Read by the AWS SDK: the region when the configuration has no `region`, the credentials (else the instance profile), and an endpoint other than AWS's (an emulator)."));
    }
    if binary == "dtd" && matches!(command, "" | "agent") {
        vars.push((
            "AWS_EC2_METADATA_SERVICE_ENDPOINT",
            "Where dtd agent reads the instance metadata (IMDSv2), when not at 169.254.169.254.",
        ));
    }
    if binary == "dtd" {
        vars.push(("RUST_LOG", "What is logged to standard error (default `info`; `debug` for more, `dt::agent::program_output=debug` for the programs' output lines)."));
    }
    vars
}

fn examples(page: &str) -> Vec<(&'static str, &'static str)> {
    match page {
        "dtctl" | "dtctl-doctor" => vec![("dtctl doctor", "Can this cluster work? A line per check, ✔ or ✖ with the fix.")],
        "dtctl-status" => vec![
            ("dtctl status", "The cluster, its generation, every worker and what each waits for."),
            ("dtctl status -o json", "The same as JSON (status.json)."),
        ],
        "dtctl-add" => vec![("dtctl add --count 2", "Launch 2 workers from workers.launch_template.")],
        "dtctl-remove" => vec![("dtctl remove 10.0.1.6 i-0abc", "Delete the elastic tag of two workers, by private IP or instance id: they leave once the job acknowledges.")],
        "dtctl-hosts" => vec![("dtctl hosts --format horovod", "The membership as of dtd's last pass, as a Horovod discovery script prints it.")],
        "dtctl-events" => vec![
            ("dtctl events --since 10m", "The events journal of the last ten minutes (-o json for JSON lines)."),
            ("dtctl events --follow", "Then each event as dtd journals it, until Ctrl-C."),
        ],
        "dtctl-explain" => vec![("dtctl explain 10.0.1.6", "That worker's story: launched, prepared, joined, trained, why and when it left.")],
        "dtctl-scale" => vec![("dtctl scale --replicas 8 --wait", "Eight workers, with progress until the job trains on them.")],
        "dtctl-ack" => vec![("dtctl ack 7", "Acknowledge generation 7 for a job that cannot (writes the ack file).")],
        "dtctl-config-check" => vec![("dtctl config check /etc/dt/dtd.yaml", "Whether dtd would accept the file; an error names the key and the line.")],
        "dtd" | "dtd-run" => vec![("dtd run --config /etc/dt/dtd.yaml", "The control loop, on the master node (the stack runs it as the systemd unit dtd).")],
        "dtd-agent" => vec![("dtd agent --config /etc/dt/dtd.yaml", "On a worker, from its user data: prepare its data, report, watch its notices.")],
        _ => Vec::new(),
    }
}

/// Text as roff shows it: a backslash is `\e`, and a line cannot start a request.
fn escape(text: &str) -> String {
    let text = text.replace('\\', "\\e").replace('-', "\\-");
    match text.starts_with(['.', '\'']) {
        true => format!("\\&{text}"),
        false => text,
    }
}
