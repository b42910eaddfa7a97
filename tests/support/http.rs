//! The operations endpoints as a test sees them: a free port, a GET, a metric's value.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A free local port for an instance's endpoints, never the same one twice in this process
/// (tests of one binary run side by side; see [`eosflow_verify::free_local_port`]).
pub fn free_addr() -> String {
    let port = eosflow_verify::free_local_port().expect("a free local port");
    format!("127.0.0.1:{port}")
}

/// `(status code, body)` of a GET, or `None` while nothing listens.
pub fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut c = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_millis(500)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    c.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .ok()?;
    let mut text = String::new();
    c.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// Sum of the samples of `name` whose labels contain every `labels` fragment.
pub fn metric(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let matches = series == name || series.starts_with(&format!("{name}{{"));
        if matches && labels.iter().all(|l| series.contains(l)) {
            *found.get_or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
        }
    }
    found
}
