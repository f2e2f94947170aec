//! AWS clients from the standard SDK configuration chain (environment, profile, instance role).
//!
//! Nothing here knows about the emulator the tests use: `AWS_ENDPOINT_URL` is the SDK's own.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_ec2::error::ProvideErrorMetadata;

use crate::metrics::AwsCalls;

/// A hung endpoint must not stall the control loop for long: a pass that times out holds its
/// ground and the next one tries again.
fn timeouts(per_attempt: Duration) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(3).min(per_attempt))
        .operation_attempt_timeout(per_attempt)
        .operation_timeout(per_attempt * ATTEMPTS)
        .build()
}

const ATTEMPTS: u32 = 3;

pub async fn sdk_config(region: Option<&str>, per_attempt: Duration) -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(timeouts(per_attempt))
        .retry_config(RetryConfig::standard().with_max_attempts(ATTEMPTS));
    if let Some(r) = region {
        loader = loader.region(Region::new(r.to_string()));
    }
    loader.load().await
}

pub async fn ec2_client(cfg: &crate::config::Config) -> aws_sdk_ec2::Client {
    aws_sdk_ec2::Client::new(&sdk_config(cfg.region.as_deref(), cfg.api_timeout).await)
}

pub async fn autoscaling_client(cfg: &crate::config::Config) -> aws_sdk_autoscaling::Client {
    aws_sdk_autoscaling::Client::new(&sdk_config(cfg.region.as_deref(), cfg.api_timeout).await)
}

/// What a person reads of a failed call: AWS's own code and message when AWS answered
/// (`UnauthorizedOperation: You are not authorized to perform this operation.`), else the SDK's
/// chain of causes (a timeout, a connection refused). The SDK's `Display` of a service error
/// it has no variant for is its whole `Debug`, raw response included, about 1.5 KB.
pub fn describe_error<E: ProvideErrorMetadata + std::error::Error>(e: &E) -> String {
    match (e.code(), e.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_string(),
        _ => aws_sdk_ec2::error::DisplayErrorContext(e).to_string(),
    }
}

/// A failed AWS call as [`describe_error`] words it, carried in the stages' error types: the
/// SDK's error holds the raw response and is neither `Clone` nor cheap to keep.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AwsError(String);

impl AwsError {
    pub fn of<E: ProvideErrorMetadata + std::error::Error>(e: &E) -> AwsError {
        AwsError(describe_error(e))
    }
}

/// Every client the daemon uses; the queue, group and file-system clients only when the config
/// names them. Each counts its calls in `calls`.
#[derive(Clone)]
pub struct Clients {
    pub ec2: aws_sdk_ec2::Client,
    pub sqs: Option<aws_sdk_sqs::Client>,
    pub autoscaling: Option<aws_sdk_autoscaling::Client>,
    pub efs: Option<aws_sdk_efs::Client>,
    pub calls: AwsCalls,
}

/// A service client from `shared` with the call counter on it.
macro_rules! counted {
    ($service:ident, $shared:expr, $calls:expr) => {
        $service::Client::from_conf(
            $service::config::Builder::from($shared)
                .interceptor($calls.clone())
                .build(),
        )
    };
}

pub async fn clients(cfg: &crate::config::Config) -> Clients {
    let region = cfg.region.as_deref();
    let shared = sdk_config(region, cfg.api_timeout).await;
    let calls = AwsCalls::default();
    // A long poll holds the call open for `events.wait`: its attempt timeout must cover it.
    let sqs = match cfg.events.queue_url {
        Some(_) => {
            let polling = sdk_config(region, cfg.api_timeout + cfg.events.wait).await;
            Some(counted!(aws_sdk_sqs, &polling, calls))
        }
        None => None,
    };
    Clients {
        ec2: counted!(aws_sdk_ec2, &shared, calls),
        sqs,
        autoscaling: (cfg.workers.auto_scaling_group.as_ref())
            .map(|_| counted!(aws_sdk_autoscaling, &shared, calls)),
        efs: (cfg.shared_fs_id.as_ref()).map(|_| counted!(aws_sdk_efs, &shared, calls)),
        calls,
    }
}

#[cfg(test)]
mod tests {
    use super::describe_error;
    use aws_sdk_ec2::error::{ErrorMetadata, SdkError};
    use aws_sdk_ec2::operation::run_instances::RunInstancesError;

    /// What AWS answered, its raw response left out (a unit): what matters is it is not shown.
    fn answered(code: Option<&str>, message: Option<&str>) -> SdkError<RunInstancesError, ()> {
        let mut meta = ErrorMetadata::builder();
        if let Some(c) = code {
            meta = meta.code(c);
        }
        if let Some(m) = message {
            meta = meta.message(m);
        }
        SdkError::service_error(RunInstancesError::generic(meta.build()), ())
    }

    #[test]
    fn aws_code_and_message_and_nothing_of_the_raw_response() {
        let e = answered(
            Some("UnauthorizedOperation"),
            Some("You are not authorized."),
        );
        assert_eq!(
            describe_error(&e),
            "UnauthorizedOperation: You are not authorized."
        );
        assert_eq!(describe_error(&answered(Some("Blocked"), None)), "Blocked");
        let bare = describe_error(&answered(None, None));
        assert!(bare.contains("service error"), "{bare}");
    }

    #[test]
    fn a_failure_to_reach_aws_keeps_its_causes() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused here");
        let e: SdkError<RunInstancesError, ()> = SdkError::dispatch_failure(
            aws_smithy_runtime_api::client::result::ConnectorError::io(Box::new(io)),
        );
        let text = describe_error(&e);
        assert!(text.contains("refused here"), "{text}");
    }
}
