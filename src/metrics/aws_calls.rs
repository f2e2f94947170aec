//! AWS calls, their errors and the attempts AWS throttled, by service and operation, counted by
//! an interceptor on every client, so that the background listing, the queue's long polls and
//! `act`'s calls all count without each call site keeping score.

use aws_sdk_ec2::config::ConfigBag;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse as Response;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Operation {
    pub service: String,
    pub operation: String,
}

impl Operation {
    /// The call the SDK is making, as its metadata names it.
    fn of(cfg: &ConfigBag) -> Option<Operation> {
        let meta = cfg.load::<Metadata>()?;
        Some(Operation {
            service: meta.service().to_string(),
            operation: meta.name().to_string(),
        })
    }
}

/// Cheap to clone: the counters are shared.
#[derive(Clone, Debug, Default)]
pub struct AwsCalls {
    calls: Family<Operation, Counter>,
    errors: Family<Operation, Counter>,
    throttled: Family<Operation, Counter>,
}

impl AwsCalls {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "dt_aws_calls",
            "AWS API calls made, by service and operation (one per call, retries included in it)",
            self.calls.clone(),
        );
        registry.register(
            "dt_aws_call_errors",
            "AWS API calls that failed after their retries, by service and operation",
            self.errors.clone(),
        );
        registry.register(
            "dt_aws_throttled_attempts",
            "Attempts of AWS API calls that AWS throttled (the SDK's throttling error codes), by service and operation; the SDK retried each while it could",
            self.throttled.clone(),
        );
    }

    /// The calls made so far to `service`'s `operation` (for tests and benchmarks).
    pub fn calls(&self, service: &str, operation: &str) -> u64 {
        let key = Operation {
            service: service.into(),
            operation: operation.into(),
        };
        self.calls.get(&key).map_or(0, |c| c.get())
    }
}

impl Intercept for AwsCalls {
    fn name(&self) -> &'static str {
        "dt::metrics::AwsCalls"
    }

    /// Each attempt, retries included: a throttled one counts. Every operation called has its
    /// series, at 0 until AWS throttles it, so that a dashboard shows the calls it watches.
    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let was_throttled = context.response().is_some_and(throttled);
        if let Some(key) = Operation::of(cfg) {
            let counter = self.throttled.get_or_create(&key);
            if was_throttled {
                counter.inc();
            }
        }
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(key) = Operation::of(cfg) else {
            return Ok(());
        };
        self.calls.get_or_create(&key).inc();
        // Its series exists from the first call, at 0 until one fails.
        let errors = self.errors.get_or_create(&key);
        if matches!(context.output_or_error(), Some(Err(_)) | None) {
            errors.inc();
        }
        Ok(())
    }
}

/// Whether AWS's answer is one of the error codes the SDK's retry classifier treats as
/// throttling.
fn throttled(response: &Response) -> bool {
    if response.status().is_success() {
        return false;
    }
    let header = response.headers().get("x-amzn-errortype");
    let body = response.body().bytes().unwrap_or_default();
    error_code(header, body)
        .is_some_and(|code| aws_runtime::retries::classifiers::THROTTLING_ERRORS.contains(&code))
}

/// The error code of an AWS error answer: the `x-amzn-errortype` header (JSON protocols,
/// `Code:http://...`), the `<Code>` of the XML protocols (EC2, Auto Scaling, STS), or the JSON
/// body's `__type` (`com.amazonaws.sqs#QueueDoesNotExist`).
fn error_code<'a>(header: Option<&'a str>, body: &'a [u8]) -> Option<&'a str> {
    if let Some(h) = header {
        return h.split(':').next().filter(|c| !c.is_empty());
    }
    let text = std::str::from_utf8(body).ok()?;
    if let Some(rest) = text.split("<Code>").nth(1) {
        return rest.split("</Code>").next();
    }
    let typed = text.split("\"__type\"").nth(1)?;
    let value = typed.split('"').nth(1)?;
    value.rsplit('#').next()
}

#[cfg(test)]
mod tests {
    use super::error_code;

    #[test]
    fn the_error_code_of_each_protocol() {
        let ec2 = b"<Response><Errors><Error><Code>RequestLimitExceeded</Code>\
                    <Message>Request limit exceeded.</Message></Error></Errors></Response>";
        assert_eq!(error_code(None, ec2), Some("RequestLimitExceeded"));
        let json = br#"{"__type":"com.amazonaws.sqs#ThrottlingException","message":"slow"}"#;
        assert_eq!(error_code(None, json), Some("ThrottlingException"));
        let header = Some("ThrottlingException:http://internal.amazon.com/coral/");
        assert_eq!(error_code(header, b"{}"), Some("ThrottlingException"));
        assert_eq!(error_code(None, b"not an error"), None);
    }
}
