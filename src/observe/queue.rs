//! The EventBridge -> SQS queue, long-polled in a task of its own so that an event wakes the
//! control loop at once instead of at the next interval. Messages are deleted by the loop only
//! after the pass that heeded them (`act::queue`), so a daemon that dies first sees them again.

use std::time::Duration;

use aws_sdk_sqs::Client;
use tokio::sync::mpsc;

use super::eventbridge::{parse, Parsed};
use crate::aws::AwsError;

/// Why the queue could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("receiving from {url}: {why}")]
pub struct ReceiveError {
    url: String,
    why: AwsError,
}

pub struct Received {
    pub receipt: String,
    pub parsed: Parsed,
}

pub enum QueueUpdate {
    Messages(Vec<Received>),
    Failed(ReceiveError),
}

/// Starts the poller; it stops when the receiver is dropped.
pub fn spawn(client: Client, url: String, wait: Duration) -> mpsc::Receiver<QueueUpdate> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(poll(client, url, wait, tx));
    rx
}

async fn poll(client: Client, url: String, wait: Duration, tx: mpsc::Sender<QueueUpdate>) {
    let mut backoff = Duration::from_secs(1);
    loop {
        let update = match receive(&client, &url, wait).await {
            Ok(messages) => {
                backoff = Duration::from_secs(1);
                if messages.is_empty() {
                    continue;
                }
                QueueUpdate::Messages(messages)
            }
            Err(e) => QueueUpdate::Failed(e),
        };
        let failed = matches!(update, QueueUpdate::Failed(_));
        if tx.send(update).await.is_err() {
            return;
        }
        if failed {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
    }
}

async fn receive(
    client: &Client,
    url: &str,
    wait: Duration,
) -> Result<Vec<Received>, ReceiveError> {
    let out = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(wait.as_secs() as i32)
        .send()
        .await
        .map_err(|e| ReceiveError {
            url: url.to_string(),
            why: AwsError::of(&e),
        })?;
    Ok(out
        .messages()
        .iter()
        .filter_map(|m| {
            Some(Received {
                receipt: m.receipt_handle()?.to_string(),
                parsed: parse(m.body().unwrap_or_default()),
            })
        })
        .collect())
}
