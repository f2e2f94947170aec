//! The loopback HTTP server the stand-ins share: bound to a free port on 127.0.0.1, a thread per
//! connection running the stand-in's `serve` over its state, stopped when dropped.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub struct Server<S> {
    pub port: u16,
    name: &'static str,
    state: Arc<Mutex<S>>,
    stop: Arc<AtomicBool>,
}

impl<S: Default + Send + 'static> Server<S> {
    pub fn start(name: &'static str, serve: fn(TcpStream, &Mutex<S>)) -> Server<S> {
        Server::start_at(name, 0, serve)
    }

    /// On a given loopback port (0: any free one), e.g. one a client was already pointed at.
    pub fn start_at(name: &'static str, port: u16, serve: fn(TcpStream, &Mutex<S>)) -> Server<S> {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("binding the {name}: {e}"));
        let port = listener.local_addr().expect("local addr").port();
        let state = Arc::new(Mutex::new(S::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(conn) = conn {
                    let s = s.clone();
                    std::thread::spawn(move || serve(conn, &s));
                }
            }
        });
        Server {
            port,
            name,
            state,
            stop,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, S> {
        (self.state.lock()).unwrap_or_else(|_| panic!("{} state", self.name))
    }
}

impl<S> Drop for Server<S> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}
