//! A TCP proxy in front of a private broker that can lose the answer to one transaction commit:
//! it forwards the next `EndTxn` request (so the commit lands on the coordinator) and then
//! withholds that connection's responses for a while before cutting it. The client sees its
//! commit time out with the outcome unknown — the fault a lost response or a partition between
//! client and coordinator produces — on a real broker, at a known moment.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Kafka's `EndTxn` API key.
const END_TXN: i16 = 26;

/// The proxy: listens on `listen`, forwards to `upstream`.
pub struct Proxy {
    armed: Arc<Mutex<Option<Duration>>>,
    cut: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    /// Starts forwarding `127.0.0.1:listen` → `127.0.0.1:upstream`.
    pub fn start(listen: u16, upstream: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", listen)).expect("proxy port");
        listener.set_nonblocking(true).expect("nonblocking");
        let armed: Arc<Mutex<Option<Duration>>> = Arc::new(Mutex::new(None));
        let cut = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (armed, cut, stop) = (armed.clone(), cut.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            let _ = client.set_nonblocking(false);
                            let Ok(broker) = TcpStream::connect(("127.0.0.1", upstream)) else {
                                continue;
                            };
                            relay(client, broker, armed.clone(), cut.clone());
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            });
        }
        Self { armed, cut, stop }
    }

    /// The next `EndTxn` request goes through, and its connection's answers are withheld for
    /// `hold`, then the connection is cut.
    pub fn lose_next_commit_answer(&self, hold: Duration) {
        if let Ok(mut a) = self.armed.lock() {
            *a = Some(hold);
        }
    }

    /// How many commit answers were lost so far.
    pub fn commits_cut(&self) -> u32 {
        self.cut.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Two threads per connection: requests are read frame by frame (to see `EndTxn`), answers
/// are copied until the connection is held.
fn relay(
    client: TcpStream,
    broker: TcpStream,
    armed: Arc<Mutex<Option<Duration>>>,
    cut: Arc<AtomicU32>,
) {
    let held: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let (Ok(mut c_in), Ok(mut b_out)) = (client.try_clone(), broker.try_clone()) else {
        return;
    };
    {
        let held = held.clone();
        std::thread::spawn(move || loop {
            let mut len = [0u8; 4];
            if c_in.read_exact(&mut len).is_err() {
                let _ = b_out.shutdown(Shutdown::Both);
                return;
            }
            let n = i32::from_be_bytes(len).max(0) as usize;
            let mut frame = vec![0u8; n];
            if c_in.read_exact(&mut frame).is_err() {
                let _ = b_out.shutdown(Shutdown::Both);
                return;
            }
            let api_key = frame
                .get(0..2)
                .map(|b| i16::from_be_bytes([b[0], b[1]]))
                .unwrap_or(-1);
            if api_key == END_TXN {
                if let Some(hold) = armed.lock().ok().and_then(|mut a| a.take()) {
                    if let Ok(mut h) = held.lock() {
                        *h = Some(Instant::now() + hold);
                    }
                    cut.fetch_add(1, Ordering::Relaxed);
                }
            }
            if b_out.write_all(&len).is_err() || b_out.write_all(&frame).is_err() {
                return;
            }
        });
    }
    let (mut b_in, mut c_out) = (broker, client);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match b_in.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = c_out.shutdown(Shutdown::Both);
                    return;
                }
                Ok(n) => n,
            };
            let until = held.lock().ok().and_then(|h| *h);
            if let Some(until) = until {
                // The answer (and whatever follows) never reaches the client.
                std::thread::sleep(until.saturating_duration_since(Instant::now()));
                let _ = c_out.shutdown(Shutdown::Both);
                let _ = b_in.shutdown(Shutdown::Both);
                return;
            }
            if c_out.write_all(&buf[..n]).is_err() {
                return;
            }
        }
    });
}
