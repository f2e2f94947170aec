//! Deletes heeded messages from the event queue, ten per call (the SQS batch limit). The loop
//! deletes them only after the pass that heeded them is recorded, so a daemon that dies first
//! receives them again.

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use aws_sdk_sqs::Client;

use crate::aws::AwsError;

/// The queue the events come from.
pub struct EventQueue {
    client: Client,
    url: String,
}

/// Why some heeded messages were not deleted: they come back after their visibility timeout and
/// are recognised by their event ids.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeleteError {
    /// SQS's code for one message it did not delete.
    #[error("deleting a message: {0}")]
    Refused(String),
    #[error("deleting messages: {0}")]
    Call(AwsError),
    /// SQS named neither a success nor a failure for some of them.
    #[error("deleting messages: {0} not confirmed")]
    Unconfirmed(usize),
}

impl EventQueue {
    pub fn new(client: Client, url: String) -> EventQueue {
        EventQueue { client, url }
    }
}

/// Deletes the messages `receipts` name from `queue`, if there is one. `Err`: the first failure,
/// once every batch was tried.
pub async fn delete(queue: Option<&EventQueue>, receipts: &[String]) -> Result<(), DeleteError> {
    let Some(q) = queue.filter(|_| !receipts.is_empty()) else {
        return Ok(());
    };
    let mut deleted = 0;
    let mut failure = None;
    for chunk in receipts.chunks(10) {
        let entries = chunk.iter().enumerate().filter_map(|(i, r)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(r)
                .build()
                .ok()
        });
        let sent = (q.client.delete_message_batch())
            .queue_url(&q.url)
            .set_entries(Some(entries.collect()))
            .send()
            .await;
        match sent {
            Ok(out) => {
                deleted += out.successful().len();
                if let Some(f) = out.failed().first() {
                    failure.get_or_insert(DeleteError::Refused(f.code().to_string()));
                }
            }
            Err(e) => {
                failure.get_or_insert(DeleteError::Call(AwsError::of(&e)));
            }
        }
    }
    match failure {
        Some(e) => Err(e),
        None if deleted < receipts.len() => Err(DeleteError::Unconfirmed(receipts.len() - deleted)),
        None => Ok(()),
    }
}
