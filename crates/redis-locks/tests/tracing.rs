//! The crate's `tracing` spans and events, captured by a subscriber at every level while locks
//! work on a real server that asks for a password: acquire (lock, primitive, attempts, wait,
//! outcome, fencing token), hold (open while the lock is held), release (outcome, hold
//! time) within it, renew, and the loss event with its
//! reason; no owner token and no password in any captured line. One test: the subscriber is
//! the process's global one (the library's tasks run on every worker thread).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis_locks::{Client, LockOptions, LostReason};
use test_support::RedisServer;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::FmtSpan;

/// Every line the subscriber wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

const PASSWORD: &str = "pw-9f3a7c1e";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_and_the_loss_event_carry_what_matters_and_no_secret() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(captured.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the one subscriber");

    let server = RedisServer::start_with_args(&["--requirepass", PASSWORD]).unwrap();
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", server.port());
    let client = Client::connect(&url).await.unwrap();
    let mutex = client
        .mutex_with(
            "orders:42",
            LockOptions::default()
                .lease(Duration::from_millis(300))
                .watchdog(true),
        )
        .unwrap();
    let guard = mutex.lock().await.unwrap();
    let token = guard.fencing_token().get();
    let mut raw = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let owner: String = redis::cmd("GET")
        .arg("orders:42")
        .query_async(&mut raw)
        .await
        .unwrap();
    // Renewed (every 100 ms: wait for a renew span to close, 5 s at most), then lost: the key
    // deleted by hand.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !captured.text().contains("renew{lock=\"orders:42\"")
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _: i64 = redis::cmd("DEL")
        .arg("orders:42")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(guard.lost().await, LostReason::Expired);
    drop(guard);
    // A release that goes through.
    let other = client.mutex("orders:43").unwrap();
    other.lock().await.unwrap().release().await.unwrap();

    // The loss is said before `lost()` hears of it; give a slow machine a moment anyway.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !captured.text().contains("lock lost") && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let text = captured.text();
    let line = |has: &[&str]| {
        text.lines()
            .find(|line| has.iter().all(|word| line.contains(word)))
            .unwrap_or_else(|| panic!("no line with {has:?} in:\n{text}"))
            .to_string()
    };
    let acquire = line(&["acquire", "close", "lock=\"orders:42\""]);
    for field in [
        "primitive=\"mutex\"",
        "attempts=1",
        "waited_ms=",
        "outcome=\"acquired\"",
        &format!("fencing_token={token}"),
    ] {
        assert!(acquire.contains(field), "{field} not in {acquire}");
    }
    line(&["renew", "lock=\"orders:42\"", "close"]);
    let lost = line(&["lock lost", "orders:42"]);
    assert!(lost.contains("WARN") && lost.contains("reason="), "{lost}");
    // The hold span closes when the holding ends: its idle time is the hold time; the
    // release's span is within it.
    let hold = line(&["hold{", "close", "lock=\"orders:43\""]);
    assert!(
        hold.contains("primitive=\"mutex\"") && hold.contains("time.idle="),
        "{hold}"
    );
    let release = line(&["hold{", "release{", "close", "lock=\"orders:43\""]);
    // The hold is no child of the acquisition: its acquire span closed when `lock()` returned,
    // before the hold's (a parent span would stay open as long as its child).
    let position = |has: &[&str]| {
        text.lines()
            .position(|line| has.iter().all(|word| line.contains(word)))
            .unwrap_or_else(|| panic!("no line with {has:?}"))
    };
    assert!(
        position(&["acquire", "close", "lock=\"orders:43\""])
            < position(&["hold{", "close", "lock=\"orders:43\""]),
        "the acquire span closed after the hold:\n{text}"
    );
    assert!(
        !hold.contains("acquire{"),
        "the hold is no child of the acquire span: {hold}"
    );
    assert!(
        release.contains("outcome=\"released\"") && release.contains("held_ms="),
        "{release}"
    );

    assert!(!text.contains(&owner), "an owner token was traced:\n{text}");
    assert!(!text.contains(PASSWORD), "the password was traced:\n{text}");
}
