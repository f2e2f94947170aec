//! The event queue's messages between passes: received on their own task, kept until a pass
//! heeds them, then handed over to be deleted (`act::queue`), or kept for the next pass when it
//! deferred them or they could not be deleted.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::model::*;
use crate::observe::eventbridge::Parsed;
use crate::observe::queue::{self, QueueUpdate, ReceiveError, Received};

#[derive(Default)]
pub struct Inbox {
    updates: Option<mpsc::Receiver<QueueUpdate>>,
    kept: Vec<Received>,
    error: Option<ReceiveError>,
    /// Messages arrived since `take_fresh` was last asked.
    fresh: bool,
}

/// The messages a pass heeded, taken out of the inbox to be deleted.
pub struct Heeded(Vec<Received>);

impl Heeded {
    /// What deletes them: each message's latest receipt.
    pub fn receipts(&self) -> Vec<String> {
        self.0.iter().map(|r| r.receipt.clone()).collect()
    }
}

impl Inbox {
    pub fn listen(&mut self, sqs: aws_sdk_sqs::Client, url: String, wait: Duration) {
        self.updates = Some(queue::spawn(sqs, url, wait));
    }

    /// The next update; never, without a queue.
    pub async fn recv(&mut self) -> Option<QueueUpdate> {
        match &mut self.updates {
            Some(updates) => updates.recv().await,
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
        while let Some(Ok(update)) = self.updates.as_mut().map(|u| u.try_recv()) {
            self.take(update);
        }
    }

    /// Whether messages arrived since the last call.
    pub fn take_fresh(&mut self) -> bool {
        std::mem::take(&mut self.fresh)
    }

    /// Why the queue could not be read, while it cannot.
    pub fn error(&self) -> Option<&ReceiveError> {
        self.error.as_ref()
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
    pub fn notices<E>(&self, markers: &Result<Markers, E>) -> Vec<Notice> {
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

    /// Takes out the messages this pass heeded, to be deleted once what they said is recorded;
    /// those it deferred (by notice id) stay for the next pass.
    pub fn heeded(&mut self, deferred: &[String]) -> Heeded {
        let is_deferred = |r: &Received| matches!(&r.parsed, Parsed::Notices(n) if n.iter().any(|n| deferred.contains(&n.id)));
        let (keep, heeded): (Vec<Received>, Vec<Received>) = std::mem::take(&mut self.kept)
            .into_iter()
            .partition(is_deferred);
        self.kept = keep;
        Heeded(heeded)
    }

    /// Heeded messages not all deleted: kept for the next pass, which heeds them again (once,
    /// by their ids) and deletes them then.
    pub fn undeleted(&mut self, heeded: Heeded) {
        self.kept.extend(heeded.0);
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
