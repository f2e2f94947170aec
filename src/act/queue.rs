//! Deletes heeded messages from the event queue, ten per call (the SQS batch limit).

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use aws_sdk_sqs::Client;

use crate::aws::describe_error;

/// Returns how many were deleted and the first failure; a message not deleted comes back
/// after its visibility timeout and is recognised by its event id.
pub async fn delete(client: &Client, url: &str, receipts: &[String]) -> (usize, Option<String>) {
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
        let sent = client
            .delete_message_batch()
            .queue_url(url)
            .set_entries(Some(entries.collect()))
            .send()
            .await;
        match sent {
            Ok(out) => {
                deleted += out.successful().len();
                if let Some(f) = out.failed().first() {
                    failure.get_or_insert(format!("deleting a message: {}", f.code()));
                }
            }
            Err(e) => {
                failure.get_or_insert(format!("deleting messages: {}", describe_error(&e)));
            }
        }
    }
    (deleted, failure)
}
