//! The agents' port: every connection served on a task of its own, and a flood of them kept
//! from crowding out the agents. A connection that has not yet proved its instance holds one
//! of [`MAX_WAITING`] places, at most [`MAX_WAITING_PER_IP`] from one address, for at most a
//! few seconds (`conn::HELLO_WAIT`); one over either limit is closed at once. A proved
//! connection holds no place: there is one per instance, the newest.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;

use super::board::Refusal;
use super::conn;
use super::ctx::Ctx;
use super::proved::Door;

/// Connections waiting for their hello, in all.
const MAX_WAITING: usize = 512;
/// From one address: a worker's user code can hold these, never the others' places.
const MAX_WAITING_PER_IP: usize = 8;

#[derive(Default)]
struct Places {
    by_ip: HashMap<IpAddr, usize>,
    total: usize,
}

/// A place held by a connection until its hello is believed (or it ends).
struct Place {
    places: Arc<Mutex<Places>>,
    ip: IpAddr,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut p = self.places.lock().unwrap_or_else(|e| e.into_inner());
        p.total = p.total.saturating_sub(1);
        if let Some(n) = p.by_ip.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                p.by_ip.remove(&self.ip);
            }
        }
    }
}

fn admit(places: &Arc<Mutex<Places>>, ip: IpAddr) -> Option<Place> {
    let mut p = places.lock().unwrap_or_else(|e| e.into_inner());
    let from_ip = p.by_ip.get(&ip).copied().unwrap_or(0);
    if p.total >= MAX_WAITING || from_ip >= MAX_WAITING_PER_IP {
        return None;
    }
    p.total += 1;
    p.by_ip.insert(ip, from_ip + 1);
    Some(Place {
        places: Arc::clone(places),
        ip,
    })
}

/// Accepts connections for as long as the daemon runs.
pub async fn accept(listener: TcpListener, ctx: Arc<Ctx>, door: Door) {
    let places = Arc::new(Mutex::new(Places::default()));
    let mut closed = ctx.closed.clone();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = closed.changed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, say: the agents retry; a pause keeps this from spinning.
                tracing::warn!("accepting an agent's connection: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(place) = admit(&places, peer.ip()) else {
            crowded(&ctx, peer);
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(conn::serve(
            stream,
            peer,
            Arc::clone(&ctx),
            door.clone(),
            place,
        ));
    }
}

/// A connection over the limits is closed unanswered, and the address is shown once.
fn crowded(ctx: &Ctx, peer: SocketAddr) {
    let file = format!("connection from {}", peer.ip());
    let why = format!(
        "{file} closed unanswered: the connections from it that have not said hello are over \
         the limit ({MAX_WAITING_PER_IP} from one address, {MAX_WAITING} in all)"
    );
    ctx.board.refuse(Refusal {
        ip: peer.ip(),
        file,
        class: "crowded".into(),
        why,
        last: ctx.clock.now(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_holds_only_its_own_places_and_they_come_back() {
        let places = Arc::new(Mutex::new(Places::default()));
        let a: IpAddr = "10.0.1.5".parse().unwrap();
        let b: IpAddr = "10.0.1.6".parse().unwrap();
        let held: Vec<Place> = (0..MAX_WAITING_PER_IP)
            .map(|_| admit(&places, a).unwrap())
            .collect();
        assert!(admit(&places, a).is_none());
        let other = admit(&places, b);
        assert!(other.is_some());
        drop(held);
        assert!(admit(&places, a).is_some());
        drop(other);
        assert_eq!(places.lock().unwrap().total, 0);
    }
}
