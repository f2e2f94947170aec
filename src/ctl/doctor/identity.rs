//! Credentials, region and clock: whose credentials these are (STS GetCallerIdentity, which needs
//! no permission), and how far the local clock is from AWS's (the `Date` of that answer).

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_sts::config::interceptors::BeforeDeserializationInterceptorContextRef;
use aws_sdk_sts::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_sts::error::BoxError;

use super::{Check, Context};
use crate::aws::describe_error;
use crate::time::parse_gmt_date;

/// AWS refuses a request signed more than 5 minutes off its clock ("Signature expired"); dtd's
/// deadlines (a Spot warning gives two minutes) need far less. A synchronized clock (chrony with
/// the Amazon Time Sync Service) is within milliseconds; `Date` has whole seconds.
const MAX_SKEW_MS: i64 = 10_000;

pub async fn checks(cx: &Context<'_>) -> Vec<Check> {
    let mut out = vec![region(cx)];
    let client = aws_sdk_sts::Client::new(&cx.sdk);
    let date = DateHeader::default();
    let before = now_ms();
    let answer = client
        .get_caller_identity()
        .customize()
        .interceptor(date.clone())
        .send()
        .await;
    let after = now_ms();
    match answer {
        Ok(who) => {
            let detail = format!(
                "account {} as {}",
                who.account().unwrap_or("?"),
                who.arn().unwrap_or("?")
            );
            out.push(Check::pass("credentials", "credentials", detail));
            out.push(clock(date.get(), (before + after) / 2));
        }
        Err(e) => {
            out.push(Check::fail(
                "credentials",
                "credentials",
                format!("GetCallerIdentity failed: {}", describe_error(&e)),
                "give this machine credentials: the instance role on AWS, or AWS_PROFILE / \
                 AWS_ACCESS_KEY_ID elsewhere (`aws sts get-caller-identity` must work)",
            ));
            out.push(Check::skip("clock", "clock", "needs an answer from AWS"));
        }
    }
    out
}

fn region(cx: &Context<'_>) -> Check {
    match cx.sdk.region() {
        Some(r) => Check::pass("region", "region", r.to_string()),
        None => Check::fail(
            "region",
            "region",
            "no region in the config, the environment or the AWS profile",
            "set `region:` in the config (the stack does), or AWS_REGION",
        ),
    }
}

fn clock(date: Option<String>, local_ms: i64) -> Check {
    let Some(aws_ms) = date.as_deref().and_then(parse_gmt_date) else {
        return Check::skip("clock", "clock", "AWS's answer carried no Date header");
    };
    let skew = local_ms - aws_ms as i64;
    let detail = format!("{} AWS's clock", describe_skew(skew));
    Check::verdict("clock", "clock", skew.abs() <= MAX_SKEW_MS, detail, || {
        "synchronize the clock: `chronyc tracking` (Amazon Linux uses the Amazon Time Sync \
         Service at 169.254.169.123 by default)"
            .into()
    })
}

fn describe_skew(skew_ms: i64) -> String {
    let s = skew_ms.abs() / 1000;
    match skew_ms {
        d if d.abs() < 1000 => "within a second of".into(),
        d if d > 0 => format!("{s} s ahead of"),
        _ => format!("{s} s behind"),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Keeps the `Date` header of the response it sees.
#[derive(Debug, Default, Clone)]
struct DateHeader(Arc<Mutex<Option<String>>>);

impl DateHeader {
    fn get(&self) -> Option<String> {
        self.0.lock().ok().and_then(|d| d.clone())
    }
}

impl Intercept for DateHeader {
    fn name(&self) -> &'static str {
        "DateHeader"
    }

    fn read_before_deserialization(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let date = context.response().headers().get("date");
        if let (Some(date), Ok(mut slot)) = (date, self.0.lock()) {
            *slot = Some(date.to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_beyond_ten_seconds_fails() {
        let aws = "Mon, 23 Nov 2026 10:00:00 GMT".to_string();
        let at = parse_gmt_date(&aws).unwrap() as i64;
        assert_eq!(
            clock(Some(aws.clone()), at + 400).outcome,
            super::super::Outcome::Pass
        );
        let ahead = clock(Some(aws.clone()), at + 42_000);
        assert_eq!(ahead.outcome, super::super::Outcome::Fail);
        assert_eq!(ahead.detail, "42 s ahead of AWS's clock");
        let behind = clock(Some(aws), at - 11_000);
        assert_eq!(behind.detail, "11 s behind AWS's clock");
        assert_eq!(clock(None, at).outcome, super::super::Outcome::Skip);
    }
}
