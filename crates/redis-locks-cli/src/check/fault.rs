//! The faults `check` injects (`--fault NAME`), each bounded in time and undone: what each
//! does, which servers it needs, and the injection itself. The rows of
//! `../shared/faults.md` they implement are named on each variant.

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Serialize;

/// A fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// No fault: contention only (faults.md row 1).
    None,
    /// A holder process is killed with SIGKILL: in the middle of taking the lock when the
    /// algorithm takes it in two requests, else just after it acquired (row 3).
    HolderKill,
    /// A holder process stops (SIGSTOP) between its last look at the lease and its write,
    /// and is resumed (SIGCONT) once its lease has run out and another holder has held the
    /// lock since, so its late write meets the newer holder's (row 4).
    HolderPause,
    /// The lock server is frozen with SIGSTOP for the lease and a bit more (row 5).
    ServerPause,
    /// The lock server runs `DEBUG SLEEP` for the lease and a bit more (row 5).
    ServerSleep,
    /// `CLIENT PAUSE <lease + a bit> WRITE` on the lock server (row 5).
    ClientPause,
    /// Every client connection of the lock server is cut (`CLIENT KILL TYPE normal` and
    /// `TYPE pubsub`), a few times in a row: during acquires, renewals and releases, wake-up
    /// subscribers included (row 8).
    ClientKill,
    /// The lock server is killed (SIGKILL) and restarted at once, empty: a server without
    /// persistence forgets the lock. Mutual exclusion is NOT expected to hold (the docs say
    /// so); fencing must still refuse every stale write (row 10 on one node).
    ServerRestart,
    /// The lock server, with `appendonly yes` and `appendfsync always`, is killed (SIGKILL)
    /// and restarted at once from its AOF: the lock survives.
    ServerRestartAof,
    /// The lock server's port is cut off silently (an iptables DROP rule on loopback) for the
    /// lease and a bit more, then the rule is removed (row 6; needs root and iptables).
    Partition,
    /// The lock server's clock jumps forward by a lease, emulated as faults.md says: the lock
    /// key's TTL cut to 1 ms (`PEXPIRE`). Kleppmann's scenario: on one server, mutual
    /// exclusion is NOT expected to hold; fencing must (row 11).
    ServerClockJump,
    /// The workers' wall clock jumps an hour ahead for 1.5 leases, then back (libfaketime in
    /// every worker, its monotonic clock left alone): leases are counted on the monotonic
    /// clock only, so nothing may change — no holder told of a loss (row 12; needs the
    /// `faketime` package).
    ClientClockStep,
    /// 1/8 of the lease added each way (a round trip of a quarter lease) through an
    /// in-process proxy, for 1.5 leases: below the design threshold (a renewal every third
    /// of the lease, confirmed within the two thirds left), so no holder may lose its lock
    /// (row 17).
    Latency,
    /// Half the lease added each way (a round trip of a whole lease), for 1.5 leases: above
    /// the threshold, so a holder must be told of the loss; a grant whose reply comes after
    /// the lease must not count (rows 7, 17).
    LatencyHigh,
    /// The lock server's port is cut off silently for a third of the lease and then opened
    /// again: TCP retransmits what was held back in a burst (row 7; root and iptables).
    PacketBurst,
    /// One packet in ten to the lock server's port dropped at random (an iptables
    /// `statistic` rule) for 1.5 leases: TCP retransmits them late (row 7; root and
    /// iptables).
    PacketLoss,
    /// A read-only script runs on the lock server for 1.5 leases with `busy-reply-threshold`
    /// at 100 ms, so every other command gets `BUSY` meanwhile (row 16).
    BusyScript,
    /// Redlock: 2 of 5 nodes killed (SIGKILL), restarted empty only after the lease (row 9,
    /// row 10's delayed restart).
    RedlockMinority,
    /// Redlock: 3 of 5 nodes frozen (SIGSTOP) for the lease and a bit more: no majority
    /// (row 9).
    RedlockMajority,
    /// Redis Cluster: `CLUSTER FAILOVER` on the replica of the shard that serves the lock's
    /// slot while a holder depends on its renewals. The replica catches up first, so no
    /// grant is lost: holders renew and release through `MOVED`, none may lose its lock
    /// (row 14; a private cluster with a replica per master).
    ClusterFailover,
    /// Redis Cluster: the lock's slot moved, keys and all, to another master while a holder
    /// depends on its renewals: `MIGRATING`/`IMPORTING` (requests meet `ASK`), the keys
    /// moved with `MIGRATE`, then the slot given to the new master (`MOVED`). None may lose
    /// its lock (row 14).
    SlotMigration,
    /// Redis Cluster, an unreplicated lock: the replica of the lock's shard is cut off
    /// (paused, its link killed by the master) before a holder's grant, then the master is
    /// killed (SIGKILL) while it holds, the replica resumed and promoted without the grant.
    /// A second holder may get the lock while the first's lease runs: the documented
    /// failover window, which fencing must cover — tokens still grow, the stale holder's
    /// accesses are refused (row 13). Strikes once per run (the killed master stays dead).
    ClusterKill,
    /// Sentinel: the master (`min-replicas-to-write 1`) frozen (SIGSTOP) until the sentinels
    /// promote a replica, then resumed: a zombie master, which must grant nothing
    /// (`NOREPLICAS`) while clients follow the new master (row 15).
    SentinelFailover,
    /// Sentinel: the master killed (SIGKILL), a replica promoted; clients follow it (row 15,
    /// with a crash instead of a freeze). Strikes once per run (the killed master stays dead).
    SentinelKill,
}

/// The private set-up a topology fault runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyKind {
    /// A Redis Cluster (`--cluster`).
    Cluster,
    /// A Sentinel-watched master (`--sentinel`).
    Sentinel,
}

impl TopologyKind {
    /// What it is, in words.
    pub fn describe(self) -> &'static str {
        match self {
            TopologyKind::Cluster => "Redis Cluster",
            TopologyKind::Sentinel => "Sentinel set-up",
        }
    }

    /// The flag that asks for it.
    pub fn flag(self) -> &'static str {
        match self {
            TopologyKind::Cluster => "--cluster",
            TopologyKind::Sentinel => "--sentinel",
        }
    }
}

impl Fault {
    /// The name on the command line.
    pub fn label(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::HolderKill => "holder-kill",
            Fault::HolderPause => "holder-pause",
            Fault::ServerPause => "server-pause",
            Fault::ServerSleep => "server-sleep",
            Fault::ClientPause => "client-pause",
            Fault::ClientKill => "client-kill",
            Fault::ServerRestart => "server-restart",
            Fault::ServerRestartAof => "server-restart-aof",
            Fault::Partition => "partition",
            Fault::ServerClockJump => "server-clock-jump",
            Fault::ClientClockStep => "client-clock-step",
            Fault::Latency => "latency",
            Fault::LatencyHigh => "latency-high",
            Fault::PacketBurst => "packet-burst",
            Fault::PacketLoss => "packet-loss",
            Fault::BusyScript => "busy-script",
            Fault::RedlockMinority => "redlock-minority",
            Fault::RedlockMajority => "redlock-majority",
            Fault::ClusterFailover => "cluster-failover",
            Fault::SlotMigration => "slot-migration",
            Fault::ClusterKill => "cluster-kill",
            Fault::SentinelFailover => "sentinel-failover",
            Fault::SentinelKill => "sentinel-kill",
        }
    }

    /// Whether the fault needs private lock servers: their processes, a setting it changes
    /// (`busy-reply-threshold`), or loopback ports it cuts off with iptables.
    pub fn needs_private_servers(self) -> bool {
        matches!(
            self,
            Fault::ServerPause
                | Fault::ServerRestart
                | Fault::ServerRestartAof
                | Fault::RedlockMinority
                | Fault::RedlockMajority
                | Fault::BusyScript
                | Fault::Partition
                | Fault::PacketBurst
                | Fault::PacketLoss
        ) || self.topology().is_some()
    }

    /// The private cluster or Sentinel set-up the fault needs (started for its run), if any.
    pub fn topology(self) -> Option<TopologyKind> {
        match self {
            Fault::ClusterFailover | Fault::SlotMigration | Fault::ClusterKill => {
                Some(TopologyKind::Cluster)
            }
            Fault::SentinelFailover | Fault::SentinelKill => Some(TopologyKind::Sentinel),
            _ => None,
        }
    }

    /// How many times the fault can strike in one run, if fewer than `--injections` asks:
    /// the kills leave the shard without a replica to promote again.
    pub fn max_strikes(self) -> Option<usize> {
        matches!(self, Fault::ClusterKill | Fault::SentinelKill).then_some(1)
    }

    /// Whether its long holder works on the resource all through its hold (an increment
    /// every eighth of the lease, at most 50 ms apart), so that a second holder let in beside it meets its
    /// accesses and the resource refuses the stale one.
    pub fn lingers_writing(self) -> bool {
        self == Fault::ClusterKill
    }

    /// Whether a holder that depends on its renewals while this fault strikes must be told
    /// it lost the lock (the server cannot renew for longer than the lease, or forgot it).
    /// A Redlock loses only the first node to the single-server faults, so only a lost
    /// majority tells its holder.
    pub fn tells_holder(self, redlock: bool) -> bool {
        if redlock {
            return self == Fault::RedlockMajority;
        }
        matches!(
            self,
            Fault::ServerPause
                | Fault::ServerSleep
                | Fault::ClientPause
                | Fault::Partition
                | Fault::LatencyHigh
                | Fault::BusyScript
                | Fault::ServerRestart
                | Fault::ServerClockJump
                | Fault::ClusterKill
        )
    }

    /// Whether no holder may lose its lock to this fault: latency under the design threshold,
    /// a step of the client's wall clock, a manual failover or a slot migration (the lock's
    /// keys go along, and holders follow `MOVED` and `ASK`).
    pub fn keeps_holder(self) -> bool {
        matches!(
            self,
            Fault::Latency | Fault::ClientClockStep | Fault::ClusterFailover | Fault::SlotMigration
        )
    }

    /// Whether a holder's release must succeed under this fault: a manual failover and a
    /// slot migration lose no lock, so a release that fails or finds the lock gone is a lost
    /// lock.
    pub fn keeps_releases(self) -> bool {
        matches!(self, Fault::ClusterFailover | Fault::SlotMigration)
    }

    /// Whether the fault applies to Redlock only.
    pub fn redlock_only(self) -> bool {
        matches!(self, Fault::RedlockMinority | Fault::RedlockMajority)
    }

    /// Whether the fault is struck by the worker itself (a holder fault).
    pub fn holder_side(self) -> bool {
        matches!(self, Fault::HolderKill | Fault::HolderPause)
    }

    /// Whether two holders at once are the documented outcome of this fault on one server: a
    /// server that restarts without its data, or whose clock jumps, forgets the lock; a
    /// cluster master killed before its replica had the grant loses it (the failover
    /// window). Fencing must still hold. (A Redlock loses one node's lock only: its majority
    /// still holds.)
    pub fn breaks_exclusion(self, redlock: bool) -> bool {
        !redlock
            && matches!(
                self,
                Fault::ServerRestart | Fault::ServerClockJump | Fault::ClusterKill
            )
    }

    /// Whether the fault needs the lock server behind the latency proxy.
    pub fn needs_proxy(self) -> bool {
        matches!(self, Fault::Latency | Fault::LatencyHigh)
    }

    /// Whether the fault runs against `kind` (`None`: one server or a Redlock's servers): on
    /// a Redis Cluster or a Sentinel-watched master, the holder faults, the workers' clock
    /// step, which need no hand on a server, and that set-up's own faults; on servers, all
    /// but the topology faults.
    pub fn runs_on(self, kind: Option<TopologyKind>) -> bool {
        match kind {
            None => self.topology().is_none(),
            Some(kind) => {
                matches!(
                    self,
                    Fault::None | Fault::HolderKill | Fault::HolderPause | Fault::ClientClockStep
                ) || self.topology() == Some(kind)
            }
        }
    }

    /// Whether the fault needs root and iptables.
    pub fn needs_iptables(self) -> bool {
        matches!(
            self,
            Fault::Partition | Fault::PacketBurst | Fault::PacketLoss
        )
    }
}

/// Sends `signal` to the process `pid` (a server or worker this check started).
pub fn signal(pid: u32, signal: Signal) {
    // The process is ours; if it is gone already there is nothing to undo.
    let _ = kill(Pid::from_raw(pid as i32), signal);
}

/// An iptables rule that drops loopback packets to one port (all of them, or one in ten at
/// random), removed when dropped.
pub struct DropRule {
    port: u16,
    some: bool,
}

impl DropRule {
    /// Adds the rule: every packet to `port` dropped.
    ///
    /// # Errors
    /// A message when iptables is missing or refuses (not root).
    pub fn add(port: u16) -> Result<DropRule, String> {
        iptables("-I", port, false)?;
        Ok(DropRule { port, some: false })
    }

    /// Adds the rule: one packet in ten to `port` dropped, at random.
    ///
    /// # Errors
    /// As [`DropRule::add`].
    pub fn add_random(port: u16) -> Result<DropRule, String> {
        iptables("-I", port, true)?;
        Ok(DropRule { port, some: true })
    }
}

impl Drop for DropRule {
    fn drop(&mut self) {
        let _ = iptables("-D", self.port, self.some);
    }
}

fn iptables(op: &str, port: u16, some: bool) -> Result<(), String> {
    let port = port.to_string();
    let mut args = vec!["-w", op, "INPUT", "-i", "lo", "-p", "tcp", "--dport", &port];
    if some {
        args.extend([
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            "0.1",
        ]);
    }
    args.extend(["-j", "DROP"]);
    let status = Command::new("iptables")
        .args(&args)
        .status()
        .map_err(|err| format!("iptables cannot run: {err}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "iptables {op} failed ({status}): the partition fault needs root"
        ))
    }
}

/// How long a server-side fault lasts: past the lease, so that leases do run out in it.
pub fn outage(lease: Duration) -> Duration {
    lease + lease / 2
}

/// Where Debian's `faketime` package puts the library.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The workers' fake wall clock: a file libfaketime reads at every clock call, holding the
/// offset from the real time (`+0`, `+3600s`); removed when dropped.
pub struct FakeClock {
    file: tempfile::NamedTempFile,
}

impl FakeClock {
    /// A fake clock at the real time.
    ///
    /// # Errors
    /// A message when libfaketime is not installed or the file cannot be made.
    pub fn new() -> Result<FakeClock, String> {
        if !std::path::Path::new(LIBFAKETIME).exists() {
            return Err(format!(
                "client-clock-step needs libfaketime ({LIBFAKETIME}): apt-get install faketime"
            ));
        }
        let file = tempfile::NamedTempFile::new().map_err(|err| err.to_string())?;
        std::fs::write(file.path(), "+0\n").map_err(|err| err.to_string())?;
        Ok(FakeClock { file })
    }

    /// The environment that puts a worker on this clock.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LD_PRELOAD", LIBFAKETIME.to_string()),
            (
                "FAKETIME_TIMESTAMP_FILE",
                self.file.path().display().to_string(),
            ),
            ("FAKETIME_NO_CACHE", "1".to_string()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
        ]
    }

    /// The file's path, for the task that steps the clock.
    pub fn path(&self) -> std::path::PathBuf {
        self.file.path().to_path_buf()
    }
}
