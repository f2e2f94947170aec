//! A counting gate: at most N holders at once, the others wait their turn (tests that would
//! crowd two cores).

use std::sync::{Condvar, Mutex};

pub struct Gate {
    inside: Mutex<usize>,
    freed: Condvar,
    most: usize,
}

/// A place inside the gate, given back when dropped (also by a test that panics).
pub struct Turn<'a>(&'a Gate);

impl Gate {
    pub const fn new(most: usize) -> Gate {
        Gate {
            inside: Mutex::new(0),
            freed: Condvar::new(),
            most,
        }
    }

    pub fn enter(&self) -> Turn<'_> {
        let mut inside = self.inside.lock().unwrap_or_else(|e| e.into_inner());
        while *inside >= self.most {
            inside = (self.freed.wait(inside)).unwrap_or_else(|e| e.into_inner());
        }
        *inside += 1;
        Turn(self)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut inside = (self.0.inside.lock()).unwrap_or_else(|e| e.into_inner());
        *inside -= 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn never_more_than_its_number_inside() {
        static GATE: Gate = Gate::new(2);
        static INSIDE: AtomicUsize = AtomicUsize::new(0);
        static MOST: AtomicUsize = AtomicUsize::new(0);
        let threads: Vec<_> = (0..6)
            .map(|_| {
                std::thread::spawn(|| {
                    let _turn = GATE.enter();
                    let now = INSIDE.fetch_add(1, Ordering::SeqCst) + 1;
                    MOST.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(30));
                    INSIDE.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(MOST.load(Ordering::SeqCst), 2);
    }
}
