//! An open-loop HTTP load generator for the web benchmark: `rate` GET requests per
//! second to one path for `seconds`, over `connections` keep-alive connections.
//! Latency is measured from each request's *scheduled* time, so a stall is charged to
//! every request it delays (no coordinated omission).
//!
//!   cargo run --release -p flexrun-web --example loadgen -- HOST:PORT PATH RATE SECONDS [CONNECTIONS]

use hdrhistogram::Histogram;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

async fn one_connection(
    addr: String,
    path: String,
    rate: f64,
    secs: f64,
    offset: f64,
    start: Instant,
) -> (Histogram<u64>, u64) {
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let mut errors = 0;
    let stream = TcpStream::connect(&addr).await.expect("connect");
    stream.set_nodelay(true).unwrap();
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    let n = (rate * secs) as u64;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    for i in 0..n {
        let due = start + Duration::from_secs_f64(offset + i as f64 / rate);
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(d).await;
        }
        w.write_all(req.as_bytes()).await.expect("write");
        let mut len = 0usize;
        let mut status = String::new();
        loop {
            let mut line = String::new();
            r.read_line(&mut line).await.expect("read");
            if status.is_empty() {
                status = line.clone();
            }
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).await.expect("body");
        if !status.contains(" 200 ") {
            errors += 1;
        }
        h.record(due.elapsed().as_micros().max(1) as u64).unwrap();
    }
    (h, errors)
}

#[tokio::main]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 5 {
        eprintln!("usage: loadgen HOST:PORT PATH RATE SECONDS [CONNECTIONS]");
        std::process::exit(2);
    }
    let (addr, path, rate, secs) =
        (a[1].clone(), a[2].clone(), a[3].parse::<f64>().expect("rate"), a[4].parse::<f64>().expect("seconds"));
    let conns: usize = a.get(5).map(|c| c.parse().expect("connections")).unwrap_or(8);
    let start = Instant::now() + Duration::from_millis(200);
    let per = rate / conns as f64;
    let tasks: Vec<_> = (0..conns)
        .map(|k| tokio::spawn(one_connection(addr.clone(), path.clone(), per, secs, k as f64 / rate, start)))
        .collect();
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let mut errors = 0;
    for t in tasks {
        let (h, e) = t.await.unwrap();
        all.add(h).unwrap();
        errors += e;
    }
    let ms = |q: f64| all.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "{:<28} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7}",
        "path", "req/s", "requests", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors"
    );
    println!(
        "{:<28} {:>8.0} {:>9} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>7}",
        &path[..path.len().min(28)],
        rate,
        all.len(),
        ms(0.5),
        ms(0.9),
        ms(0.99),
        all.max() as f64 / 1000.0,
        errors
    );
}
