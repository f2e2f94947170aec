//! The instance's own metadata service, through the AWS SDK's IMDS client (IMDSv2 session tokens,
//! retries of 5xx and 401, `AWS_EC2_METADATA_SERVICE_ENDPOINT` honoured).

use aws_config::imds::client::error::{ImdsError, TokenError};

const META: &str = "/latest/meta-data/";

#[derive(Debug, thiserror::Error)]
#[error("IMDS {path}: {message}")]
pub struct ImdsFailure {
    pub path: String,
    /// What kind of failure (`HTTP 500`, `no session token`, ...): logs say when it changes.
    pub class: String,
    pub message: String,
}

pub struct Imds {
    client: aws_config::imds::Client,
}

impl Imds {
    pub fn new() -> Imds {
        // Two attempts per read, not the SDK's four: the watch polls again a second later anyway,
        // and the SDK's backoff between four attempts could hold a Spot warning back for seconds.
        Imds {
            client: aws_config::imds::Client::builder().max_attempts(2).build(),
        }
    }

    /// A metadata value, or `None` when IMDS says 404 (nothing there: the usual "no notice").
    pub async fn get(&self, path: &str) -> Result<Option<String>, ImdsFailure> {
        let full = format!("{META}{path}");
        match self.client.get(full.as_str()).await {
            Ok(v) => Ok(Some(String::from(v))),
            Err(ImdsError::ErrorResponse(r)) if r.response().status().as_u16() == 404 => Ok(None),
            Err(e) => Err(failure(full, &e)),
        }
    }

    /// A value under `/latest/dynamic/` (the instance identity document and its signature),
    /// which must be there.
    pub async fn dynamic(&self, path: &str) -> Result<String, ImdsFailure> {
        let full = format!("/latest/dynamic/{path}");
        match self.client.get(full.as_str()).await {
            Ok(v) => Ok(String::from(v)),
            Err(e) => Err(failure(full, &e)),
        }
    }

    /// A value that must be there (the instance's identity): 404 is a failure too.
    pub async fn require(&self, path: &str) -> Result<String, ImdsFailure> {
        self.get(path).await?.ok_or_else(|| ImdsFailure {
            path: format!("{META}{path}"),
            class: "HTTP 404".into(),
            message: "not found".into(),
        })
    }
}

impl Default for Imds {
    fn default() -> Self {
        Imds::new()
    }
}

fn failure(path: String, e: &ImdsError) -> ImdsFailure {
    let (class, message) = match e {
        ImdsError::ErrorResponse(r) => {
            let class = format!("HTTP {}", r.response().status().as_u16());
            (class.clone(), class)
        }
        ImdsError::FailedToLoadToken(_) => match token_status(e) {
            Some(status) => (
                format!("token HTTP {status}"),
                format!("cannot get an IMDSv2 session token: HTTP {status}"),
            ),
            None => ("no session token".into(), chain(e)),
        },
        ImdsError::IoError(_) => ("I/O error".into(), chain(e)),
        _ => ("unexpected error".into(), chain(e)),
    };
    ImdsFailure {
        path,
        class,
        message,
    }
}

/// The status IMDS answered the token request with, when it answered.
fn token_status(e: &ImdsError) -> Option<u16> {
    let source = std::error::Error::source(e)?;
    let sdk = source.downcast_ref::<aws_sdk_ec2::error::SdkError<TokenError>>()?;
    Some(sdk.raw_response()?.status().as_u16())
}

/// The error and its causes on one line (the SDK's own rendering dumps raw responses).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut next = e.source();
    while let Some(cause) = next {
        parts.push(cause.to_string());
        next = cause.source();
    }
    parts.join(": ")
}
