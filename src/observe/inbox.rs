//! The event queue's messages between passes: received on their own task, kept until a pass
//! heeds them, then deleted (or kept for the next pass when it deferred them).

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::act;
use crate::model::*;
use crate::observe::eventbridge::Parsed;
use crate::observe::queue::{self, QueueUpdate, Received};

#[derive(Default)]
pub struct Inbox {
    queue: Option<Queue>,
    kept: Vec<Received>,
    error: Option<String>,
    /// Messages arrived since `take_fresh` was last asked.
    fresh: bool,
}

struct Queue {
    updates: mpsc::Receiver<QueueUpdate>,
    sqs: aws_sdk_sqs::Client,
    url: String,
}

impl Inbox {
    pub fn listen(&mut self, sqs: aws_sdk_sqs::Client, url: String, wait: Duration) {
        let updates = queue::spawn(sqs.clone(), url.clone(), wait);
        self.queue = Some(Queue { updates, sqs, url });
    }

    /// The next update; never, without a queue.
    pub async fn recv(&mut self) -> Option<QueueUpdate> {
        match &mut self.queue {
            Some(q) => q.updates.recv().await,
            None => std::future::pending().await,
        }
    }

    pub fn take(&mut self, update: QueueUpdate) {
        match update {
            QueueUpdate::Messages(m) => {
                self.error = None;
                self.fresh = true;
                keep(&mut self.kept, m);
            }
            QueueUpdate::Failed(e) => self.error = Some(e),
        }
    }

    /// Everything else already waiting joins this pass.
    pub fn take_waiting(&mut self) {
        while let Some(Ok(update)) = self.queue.as_mut().map(|q| q.updates.try_recv()) {
            self.take(update);
        }
    }

    /// Whether messages arrived since the last call.
    pub fn take_fresh(&mut self) -> bool {
        std::mem::take(&mut self.fresh)
    }

    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The instances this pass's events name, to be read again before it decides.
    pub fn instances(&self) -> BTreeSet<String> {
        let named = self.kept.iter().flat_map(|r| match &r.parsed {
            Parsed::Wake { instances, .. } => instances.clone(),
            _ => Vec::new(),
        });
        named.collect()
    }

    /// This pass's notices: the queue's and the agents' markers'.
    pub fn notices(&self, markers: &Result<Markers, String>) -> Vec<Notice> {
        let from_queue = self.kept.iter().flat_map(|r| match &r.parsed {
            Parsed::Notices(n) => n.clone(),
            Parsed::Wake { why, .. } => {
                tracing::info!("event: {why}");
                Vec::new()
            }
            Parsed::Ignored(why) => {
                tracing::debug!("event ignored: {why}");
                Vec::new()
            }
        });
        let from_agents = markers.iter().flat_map(|m| m.notices.iter().cloned());
        from_queue.chain(from_agents).collect()
    }

    /// Deletes the messages this pass heeded; kept for the next pass if deleting failed or the
    /// pass deferred them. Returns why the queue could not be read, and why deleting failed.
    pub async fn settle(&mut self, deferred: &[String]) -> (Option<String>, Option<String>) {
        let read = self.error.clone();
        let Some(q) = &self.queue else {
            return (read, None);
        };
        let is_deferred = |r: &Received| matches!(&r.parsed, Parsed::Notices(n) if n.iter().any(|n| deferred.contains(&n.id)));
        let (keep, heeded): (Vec<Received>, Vec<Received>) = std::mem::take(&mut self.kept)
            .into_iter()
            .partition(is_deferred);
        self.kept = keep;
        if heeded.is_empty() {
            return (read, None);
        }
        let receipts: Vec<String> = heeded.iter().map(|r| r.receipt.clone()).collect();
        let (deleted, err) = act::queue::delete(&q.sqs, &q.url, &receipts).await;
        if deleted < receipts.len() {
            self.kept.extend(heeded);
        }
        (read, err)
    }
}

/// Adds received messages to the inbox. One redelivered while kept (a stall, a deferral) keeps
/// one copy with its newest receipt: SQS deletes a message only by the receipt of its latest
/// delivery ("DeleteMessage", Amazon SQS API Reference), and a long stall must not grow the inbox
/// by a copy every visibility timeout.
fn keep(inbox: &mut Vec<Received>, received: Vec<Received>) {
    for r in received {
        match inbox.iter_mut().find(|kept| kept.parsed == r.parsed) {
            Some(kept) => kept.receipt = r.receipt,
            None => inbox.push(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(receipt: &str, body: &str) -> Received {
        Received {
            receipt: receipt.into(),
            parsed: crate::observe::eventbridge::parse(body),
        }
    }

    #[test]
    fn a_redelivered_message_is_kept_once_with_its_newest_receipt() {
        let warning = r#"{"id":"e-1","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":"i-1"}}"#;
        let other = r#"{"id":"e-2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":"i-2"}}"#;
        let mut inbox = Vec::new();
        keep(
            &mut inbox,
            vec![received("r1", warning), received("r2", other)],
        );
        for n in 3..10 {
            keep(&mut inbox, vec![received(&format!("r{n}"), warning)]);
        }
        let receipts: Vec<&str> = inbox.iter().map(|r| r.receipt.as_str()).collect();
        assert_eq!(receipts, ["r9", "r2"]);
    }
}
