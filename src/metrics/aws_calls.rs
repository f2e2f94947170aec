//! AWS calls and their errors by service and operation, counted by an interceptor on every
//! client, so that the background listing, the queue's long polls and `act`'s calls all count
//! without each call site keeping score.

use aws_sdk_ec2::config::ConfigBag;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
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

/// Cheap to clone: the counters are shared.
#[derive(Clone, Debug, Default)]
pub struct AwsCalls {
    calls: Family<Operation, Counter>,
    errors: Family<Operation, Counter>,
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

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(meta) = cfg.load::<Metadata>() else {
            return Ok(());
        };
        let key = Operation {
            service: meta.service().to_string(),
            operation: meta.name().to_string(),
        };
        self.calls.get_or_create(&key).inc();
        if matches!(context.output_or_error(), Some(Err(_)) | None) {
            self.errors.get_or_create(&key).inc();
        }
        Ok(())
    }
}
