//! What one line on a proved connection means: a ping or a report of the hello's instance,
//! believed only when signed with the key the hello proved, at a time near dtd's clock, and
//! newer than the one kept. Anything else is refused; a line no agent of this instance would
//! send ends the connection.

use std::net::{IpAddr, SocketAddr};

use super::board::{Proof, Refusal};
use super::ctx::Ctx;
use super::hello;
use crate::model::Millis;
use crate::observe::markers::read;
use crate::protocol::channel::{self, Answer, Frame};
use crate::protocol::markers::MarkerName;

/// The answer to a line, and whether the connection goes on.
pub enum Said {
    Goes(Answer),
    Ends(Answer, String),
}

pub fn said(ctx: &Ctx, proof: &Proof, peer: SocketAddr, line: &[u8]) -> Said {
    let now = ctx.clock.now();
    match channel::parse(line) {
        Ok(Frame::Ping) => {
            ctx.board.heard(&proof.instance_id, now);
            Said::Goes(Answer::ok(now))
        }
        Ok(Frame::Report { name, signed }) if name.ip == proof.ip => {
            match report(ctx, proof, name, signed, now) {
                Ok(()) => Said::Goes(Answer::ok(now)),
                Err((class, why)) => {
                    let why = format!("{name} {why}");
                    keep(
                        ctx,
                        peer,
                        name.ip,
                        &name.to_string(),
                        class,
                        why.clone(),
                        now,
                    );
                    Said::Goes(Answer::refused(now, why))
                }
            }
        }
        Ok(Frame::Report { name, .. }) => {
            let why = format!("{name} came on the connection of {} ({}): an agent speaks only for its own instance", proof.instance_id, proof.ip);
            ends(ctx, peer, proof.ip, &name.to_string(), "other-ip", why, now)
        }
        Ok(Frame::Hello { .. }) => {
            Said::Goes(Answer::refused(now, "one hello per connection".into()))
        }
        Err(e) => {
            let why = format!(
                "connection from {}: a line from {}'s agent is refused: {e}",
                peer.ip(),
                proof.instance_id
            );
            let file = format!("connection from {}", peer.ip());
            ends(ctx, peer, proof.ip, &file, "garbled", why, now)
        }
    }
}

fn ends(
    ctx: &Ctx,
    peer: SocketAddr,
    ip: IpAddr,
    file: &str,
    class: &str,
    why: String,
    now: Millis,
) -> Said {
    keep(ctx, peer, ip, file, class, why.clone(), now);
    Said::Ends(Answer::refused(now, why.clone()), format!("refused: {why}"))
}

/// Logs a refusal and keeps it on the board for `dtctl status`.
pub fn keep(
    ctx: &Ctx,
    peer: SocketAddr,
    ip: IpAddr,
    file: &str,
    class: &str,
    why: String,
    now: Millis,
) {
    tracing::warn!(%peer, "{why}");
    ctx.board.refuse(Refusal {
        ip,
        file: file.to_string(),
        class: class.to_string(),
        why,
        last: now,
    });
}

/// A report on a proved connection: kept on the board, or why not (its class and words).
fn report(
    ctx: &Ctx,
    proof: &Proof,
    name: MarkerName,
    signed: &[u8],
    now: Millis,
) -> Result<(), (&'static str, String)> {
    let read = read::from_bytes(&name, signed, None, None);
    let signed_at = match &read.signed {
        Ok(s) if s.key == proof.key => s.signed_at,
        Ok(s) => {
            let why = format!(
                "is signed with key {}…, not with the key {}'s hello proved ({}…): ignored",
                s.key.short(),
                proof.instance_id,
                proof.key.short()
            );
            return Err(("other-key", why));
        }
        Err(e) => return Err(("signature", format!("is refused: {e}"))),
    };
    hello::fresh(signed_at, now, ctx.skew).map_err(|e| ("time", e.to_string()))?;
    let named = read.body.as_ref().ok().and_then(|b| b.instance_id());
    if named.is_some_and(|n| n != proof.instance_id) {
        let why = format!(
            "names {:?}, but comes from {}'s agent: ignored",
            named.unwrap_or(""),
            proof.instance_id
        );
        return Err(("names", why));
    }
    (ctx.board)
        .report(&proof.instance_id, name, read, signed_at, now)
        .map_err(|newer| {
            let why = format!(
                "signed at {} is older than the one kept (signed at {}): sent again by someone; ignored",
                crate::model::rfc3339(signed_at),
                crate::model::rfc3339(newer)
            );
            ("older", why)
        })
}
