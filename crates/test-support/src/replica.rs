//! A master with one replica of its own: for replicated acquisition (`WAIT`, `WAITAOF`).

use std::time::Duration;

use crate::error::SpawnError;
use crate::flavor::server_flavor;
use crate::probe::{acknowledging, master_sees_online, wait_until};
use crate::server::RedisServer;

/// How long a new replica may take to sync and acknowledge.
const REPLICA_TIMEOUT: Duration = Duration::from_secs(10);

impl RedisServer {
    /// Starts a master and one replica of it, both with the extra arguments `args`, and waits
    /// until the replica acknowledges the master's writes (`WAIT 1`; with `--appendonly yes`
    /// among `args`, on a server that has `WAITAOF`, until its append-only file does too).
    /// The master syncs its replica at once (`--repl-diskless-sync-delay 0`).
    ///
    /// ```
    /// let (master, replica) = test_support::RedisServer::start_master_and_replica(&[]).unwrap();
    /// let mut con = master.connection().unwrap();
    /// let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    /// let acked: i64 = redis::cmd("WAIT").arg(1).arg(1000).query(&mut con).unwrap();
    /// assert_eq!(acked, 1);
    /// assert_ne!(master.port(), replica.port());
    /// ```
    ///
    /// # Errors
    /// A start-up error of either; [`SpawnError::Timeout`] when the replica does not
    /// acknowledge within 10 s.
    pub fn start_master_and_replica(
        args: &[&str],
    ) -> Result<(RedisServer, RedisServer), SpawnError> {
        let mut master_args = vec!["--repl-diskless-sync-delay", "0"];
        master_args.extend_from_slice(args);
        let master = RedisServer::start_with_args(&master_args)?;
        let port = master.port().to_string();
        let mut replica_args = vec!["--replicaof", "127.0.0.1", &port];
        replica_args.extend_from_slice(args);
        let replica = RedisServer::start_with_args(&replica_args)?;
        // A replica rewrites its append-only file after the first sync: its disk must keep
        // up as well before WAITAOF of it can succeed.
        let on_disk = args.windows(2).any(|pair| pair == ["--appendonly", "yes"])
            && server_flavor()?.has_waitaof();
        wait_until(
            "the replica acknowledging the master's writes",
            REPLICA_TIMEOUT,
            || {
                master_sees_online(master.port(), &[replica.port()])?;
                acknowledging(master.port(), 1, on_disk)
            },
            || format!("master: {}", crate::server::tail(&master.log())),
        )?;
        Ok((master, replica))
    }
}
