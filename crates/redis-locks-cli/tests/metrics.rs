//! `redis-locks run --metrics-addr ADDR`: the library's metrics served for Prometheus while
//! the run holds its lock, read over HTTP as a scraper would; an address in use is bad usage.
//! `check --metrics-addr ADDR`: the metrics of all its worker processes, summed.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use common::{eventually, expect, redis_locks, run, scratch, until_exists};
use test_support::{ChildProcess, RedisServer};

/// A loopback address no one listens on now.
fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// `GET /metrics` from `addr`: the body, or `None` while nothing answers.
fn scrape(addr: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply.split_once("\r\n\r\n")?.1.to_string())
}

#[test]
fn a_run_serves_its_lock_metrics_for_prometheus_while_it_holds_the_lock() {
    let server = RedisServer::start().unwrap();
    let dir = scratch("metrics");
    let release = dir.join("release");
    let addr = free_addr();
    let addr_arg = addr.to_string();
    let script = format!("echo ready; {}", until_exists(&release));
    let mut holder = ChildProcess::spawn(run(
        &server,
        &["jobs:nightly", "--metrics-addr", &addr_arg],
        &script,
    ))
    .unwrap();
    holder
        .wait_for_line("ready", Duration::from_secs(30))
        .expect("the run took its lock");
    let mut body = String::new();
    let served = eventually(Duration::from_secs(10), || {
        body = scrape(addr).unwrap_or_default();
        body.contains("redis_locks_acquisitions_total{primitive=\"mutex\",outcome=\"acquired\"} 1")
    });
    assert!(served, "no acquisition in the metrics:\n{body}");
    assert!(body.contains("# TYPE redis_locks_wait_seconds"), "{body}");
    assert!(body.contains("redis_locks_requests_total"), "{body}");
    assert!(
        !body.contains("jobs:nightly"),
        "a lock name in the metrics:\n{body}"
    );
    // A second run cannot listen on the same address: bad usage, said before anything else.
    let out = redis_locks(&[
        "run",
        "other",
        "--redis",
        &server.url(),
        "--metrics-addr",
        &addr_arg,
        "--",
        "true",
    ]);
    expect(&out, 64, "--metrics-addr");
    std::fs::write(&release, "").unwrap();
    assert_eq!(holder.wait_exit(Duration::from_secs(30)), Some(0));
}

/// The value of the series `series` (name and labels, as Prometheus prints them) in `body`.
fn value_of(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn a_check_serves_the_metrics_of_all_its_worker_processes_summed() {
    let addr = free_addr();
    let addr_arg = addr.to_string();
    // Two workers of 1,000 acquisitions each: a count above 1,000 is both workers' together.
    let mut cmd = common::command();
    cmd.args([
        "check",
        "--fault",
        "none",
        "--processes",
        "2",
        "--tasks",
        "1",
        "--count",
        "1000",
        "--hold",
        "1ms",
        "--json",
        "--metrics-addr",
        &addr_arg,
    ]);
    let mut check = ChildProcess::spawn(cmd).unwrap();
    let series = "redis_locks_acquisitions_total{primitive=\"mutex\",outcome=\"acquired\"}";
    let mut body = String::new();
    let summed = eventually(Duration::from_secs(120), || {
        body = scrape(addr).unwrap_or_default();
        value_of(&body, series).is_some_and(|count| count > 1_200.0)
    });
    assert!(summed, "no sum of both workers' acquisitions:\n{body}");
    assert!(body.contains("redis_locks_hold_seconds_count"), "{body}");
    assert_eq!(check.wait_exit(Duration::from_secs(120)), Some(0));
}
