//! Short-timeout commands to the nodes of a topology, and bounded waits for a state.

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use redis::FromRedisValue;

use crate::error::SpawnError;
use crate::server::{RedisServer, tail};

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(50);
/// How long a probe may take to connect, and to get an answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// A new connection to `127.0.0.1:port` with short timeouts, so a paused or dead node makes a
/// probe fail quickly instead of hanging; over TLS when this process's server there speaks it.
pub(crate) fn connect(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = crate::tls::helper_client(port)?;
    let con = client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
    con.set_read_timeout(Some(IO_TIMEOUT))?;
    con.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(con)
}

/// Sends `cmd` to the node on `port` over a new connection; the error names the port.
pub(crate) fn query<T: FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Result<T, String> {
    connect(port)
        .and_then(|mut con| cmd.query(&mut con))
        .map_err(|err| format!("port {port}: {err}"))
}

/// Sends `cmd` to the node on `port`; a failure becomes [`SpawnError::Command`] named `what`.
pub(crate) fn run<T: FromRedisValue>(
    port: u16,
    what: &str,
    cmd: &redis::Cmd,
) -> Result<T, SpawnError> {
    connect(port)
        .and_then(|mut con| cmd.query(&mut con))
        .map_err(|err| SpawnError::Command {
            port,
            command: what.to_owned(),
            detail: err.to_string(),
        })
}

/// The `field:value` lines of `INFO <section>` (or of `CLUSTER INFO` with `section` "cluster-info").
pub(crate) fn info(port: u16, section: &str) -> Result<HashMap<String, String>, String> {
    let text: String = if section == "cluster-info" {
        query(port, redis::cmd("CLUSTER").arg("INFO"))?
    } else {
        query(port, redis::cmd("INFO").arg(section))?
    };
    Ok(text
        .lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

/// A field of an `INFO` answer, or "" when missing.
pub(crate) fn field<'a>(info: &'a HashMap<String, String>, name: &str) -> &'a str {
    info.get(name).map(String::as_str).unwrap_or("")
}

/// The port of the master the node on `port` replicates, with whether its link is up, or
/// `None` when it is a master.
pub(crate) fn replicating(port: u16) -> Result<Option<(u16, bool)>, String> {
    let info = info(port, "replication")?;
    match field(&info, "role") {
        "master" => Ok(None),
        "slave" => {
            let master = field(&info, "master_port")
                .parse()
                .map_err(|_| format!("port {port}: no master_port in INFO replication"))?;
            Ok(Some((master, field(&info, "master_link_status") == "up")))
        }
        other => Err(format!("port {port}: unexpected role {other:?}")),
    }
}

/// Whether the master on `port` lists every one of `replicas` as `state=online`, and they
/// acknowledge its writes (a replica just synced may be online a moment before it does: a
/// `WAIT` for it would time out; see [`acknowledging`]).
pub(crate) fn master_sees_online(port: u16, replicas: &[u16]) -> Result<(), String> {
    let info = info(port, "replication")?;
    if field(&info, "role") != "master" {
        return Err(format!("port {port} is not a master"));
    }
    for replica in replicas {
        let wanted = format!("port={replica},state=online");
        let online = info
            .iter()
            .any(|(k, v)| k.starts_with("slave") && v.contains(&wanted));
        if !online {
            return Err(format!(
                "master {port} does not list replica {replica} as online"
            ));
        }
    }
    acknowledging(port, replicas.len(), false)
}

/// Whether `replicas` replicas of the master on `port` acknowledge its writes within 100 ms
/// (`WAIT`), and with `on_disk` their append-only files too (`WAITAOF 0`). The write is a
/// `PUBLISH` on a channel nobody listens to: it moves the replication offset and leaves no
/// key.
pub(crate) fn acknowledging(port: u16, replicas: usize, on_disk: bool) -> Result<(), String> {
    if replicas == 0 {
        return Ok(());
    }
    let acknowledged = connect(port).and_then(|mut con| {
        redis::cmd("PUBLISH")
            .arg("test-support:replication-probe")
            .arg("")
            .query::<i64>(&mut con)?;
        let mut count = redis::cmd("WAIT")
            .arg(replicas)
            .arg(100)
            .query::<usize>(&mut con)?;
        if on_disk {
            let (_, replicas_on_disk): (usize, usize) = redis::cmd("WAITAOF")
                .arg(0)
                .arg(replicas)
                .arg(100)
                .query(&mut con)?;
            count = count.min(replicas_on_disk);
        }
        Ok(count)
    });
    match acknowledged {
        Ok(count) if count >= replicas => Ok(()),
        Ok(count) => Err(format!(
            "master {port}: {count} of {replicas} replicas acknowledge writes"
        )),
        Err(err) => Err(format!("port {port}: {err}")),
    }
}

/// Calls `check` until it gives a value or `timeout` passed; on timeout the error says what
/// `check` last reported missing and ends with `logs()`.
pub(crate) fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
    logs: impl FnOnce() -> String,
) -> Result<T, SpawnError> {
    let started = Instant::now();
    loop {
        match check() {
            Ok(value) => return Ok(value),
            Err(missing) if started.elapsed() >= timeout => {
                return Err(SpawnError::Timeout {
                    what: what.to_owned(),
                    waited: started.elapsed(),
                    detail: format!("{missing}; logs: {}", logs()),
                });
            }
            Err(_) => thread::sleep(POLL),
        }
    }
}

/// The last lines of every running server's log, each prefixed by its port.
pub(crate) fn logs_tail<'a>(servers: impl IntoIterator<Item = &'a RedisServer>) -> String {
    servers
        .into_iter()
        .filter(|s| s.pid().is_some())
        .map(|s| format!("[{}] {}", s.port(), tail(&s.log())))
        .collect::<Vec<_>>()
        .join(" ;; ")
}

/// The loopback URL of a port: `rediss://` when this process's server there speaks TLS.
pub(crate) fn url(port: u16) -> String {
    crate::tls::url(port)
}
