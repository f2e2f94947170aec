//! How long a launch takes to fall over from an instance type EC2 has no capacity for to the
//! next `workers.capacity` choice: `act::capacity::launch` against moto, through the capacity
//! STAND-IN of the integration tests (tests/integration/support/ec2_capacity.rs), which answers
//! RunInstances of p5.48xlarge as EC2 does when it has none (HTTP 500,
//! InsufficientInstanceCapacity), and a RunInstances into a full Capacity Block as EC2 does
//! (ReservationCapacityExceeded). For contrast, the time to the same refusal with the SDK's
//! standard retries, as dtd's other calls have them. `cargo bench --bench capacity` prints the
//! figures of BENCHMARKS.md; moto comes from scripts/setup (`.venv`, or `DT_MOTO_SERVER`).

// The tests' stand-in, whole; what only the tests call is unused here.
#[allow(dead_code)]
#[path = "../tests/integration/support/ec2_capacity.rs"]
mod ec2_capacity;
#[allow(dead_code)]
#[path = "../tests/integration/support/server.rs"]
mod server;

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_ec2::types::RequestLaunchTemplateData;
use dt::act::capacity::launch;
use dt::config::TemplateRef;
use dt::model::{Choice, LaunchChoice};

const RUNS: usize = 15;
const TEMPLATE: &str = "bench-capacity";
const FULL_BLOCK: &str = "cr-0f0110000000000b1";

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let moto = MotoServer::start();
    let stand_in = ec2_capacity::Ec2CapacityStandIn::start(moto.port);
    stand_in.refuse("p5.48xlarge", "InsufficientInstanceCapacity");
    // A Capacity Block with no instance left: ReservationCapacityExceeded.
    stand_in.reserve(
        FULL_BLOCK,
        "p5en.48xlarge",
        0,
        Duration::from_secs(3600),
        true,
    );
    let rt = (tokio::runtime::Builder::new_current_thread().enable_all())
        .build()
        .expect("runtime");
    let once = client(
        &stand_in.endpoint(),
        RetryConfig::standard().with_max_attempts(1),
    );
    let retried = client(
        &stand_in.endpoint(),
        RetryConfig::standard().with_max_attempts(3),
    );
    rt.block_on(create_template(&once));
    let template = TemplateRef::parse(TEMPLATE);
    let (p5, p4d) = (choice("p5.48xlarge"), choice("p4d.24xlarge"));

    let launches = |choices: Vec<LaunchChoice>| {
        let (once, template) = (&once, &template);
        move || {
            let choices = choices.clone();
            async move {
                let tried = launch(once, template, &choices, None, 1).await;
                assert!(tried.launched.is_ok(), "{:?}", tried.launched);
            }
        }
    };
    let direct = time(&rt, launches(vec![p4d.clone()]));
    let over = time(&rt, launches(vec![p5, p4d.clone()]));
    let mut full = choice("p5en.48xlarge");
    full.choice.reservation = Some(FULL_BLOCK.into());
    full.capacity_block = true;
    let from_full = time(&rt, launches(vec![full, p4d]));
    let with_retries = time(&rt, || async {
        let call = (retried.run_instances())
            .launch_template(dt::act::ec2::template_spec(&template))
            .instance_type("p5.48xlarge".into())
            .min_count(1)
            .max_count(1);
        assert!(
            call.send().await.is_err(),
            "the stand-in refuses p5.48xlarge"
        );
    });
    println!("capacity fallover, {RUNS} launches each, median (p90):");
    println!(
        "  the second type asked first:             {}",
        figure(direct)
    );
    println!(
        "  the first refused, then the second:      {}",
        figure(over)
    );
    println!(
        "  a full Capacity Block, then the second:  {}",
        figure(from_full)
    );
    println!(
        "  one refusal with the SDK's 3 attempts:   {}",
        figure(with_retries)
    );
}

fn choice(instance_type: &str) -> LaunchChoice {
    let choice = Choice {
        instance_type: instance_type.into(),
        gpus: 8,
        subnet: None,
        reservation: None,
    };
    LaunchChoice {
        choice,
        capacity_block: false,
    }
}

fn client(endpoint: &str, retry: RetryConfig) -> aws_sdk_ec2::Client {
    let conf = aws_sdk_ec2::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("testing", "testing", None, None, "bench"))
        .endpoint_url(endpoint)
        .retry_config(retry)
        .build();
    aws_sdk_ec2::Client::from_conf(conf)
}

async fn create_template(ec2: &aws_sdk_ec2::Client) {
    let data = (RequestLaunchTemplateData::builder())
        .image_id("ami-12c6146b")
        .build();
    (ec2.create_launch_template().launch_template_name(TEMPLATE))
        .launch_template_data(data)
        .send()
        .await
        .expect("CreateLaunchTemplate");
}

/// Each run's wall time, sorted.
fn time<F: std::future::Future>(rt: &tokio::runtime::Runtime, f: impl Fn() -> F) -> Vec<Duration> {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            rt.block_on(f());
            start.elapsed()
        })
        .collect();
    times.sort();
    times
}

fn figure(sorted: Vec<Duration>) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p90 = sorted[(sorted.len() * 9).div_ceil(10) - 1];
    format!(
        "{:7.1} ms ({:.1} ms)",
        ms(sorted[sorted.len() / 2]),
        ms(p90)
    )
}

/// moto's server on a free loopback port, killed when dropped.
struct MotoServer {
    port: u16,
    child: Child,
}

impl MotoServer {
    fn start() -> MotoServer {
        let path = std::env::var_os("DT_MOTO_SERVER").map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/moto_server"),
            PathBuf::from,
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let child = Command::new(&path)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}; run scripts/setup", path.display()));
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "moto did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        MotoServer { port, child }
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
