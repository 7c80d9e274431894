//! A private `redis-server` process on a free loopback port (or the program
//! `REDIS_LOCKS_SERVER` names: see [`crate::server_program`]).

use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redis_test::server::RedisServer as SpawnedServer;

use crate::error::SpawnError;
use crate::program::server_program;
use crate::tls::{self, ServerTls, TlsServerOptions};

/// How long a new server may take to answer `PING` before it counts as failed.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a server gets a new port when the one picked was taken in the meantime.
const PORT_ATTEMPTS: usize = 5;
/// The port a test must never touch: somebody else's server may live there.
const FORBIDDEN_PORT: u16 = 6379;
/// Numbers the cluster config files of this process's cluster nodes.
static NODE_FILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether the server program ([`crate::server_program`]: `redis-server` on `PATH`, or what
/// `REDIS_LOCKS_SERVER` names) runs.
///
/// ```
/// // The test scripts install it before any test runs.
/// assert!(test_support::redis_server_installed());
/// ```
pub fn redis_server_installed() -> bool {
    Command::new(server_program())
        .arg("--version")
        .output()
        .map(|out| out.status.success())
        .unwrap_or(false)
}

/// A `redis-server` this process started, on `127.0.0.1:<free port>`, stopped (SIGKILL) on drop.
///
/// Persistence is off (`--save ""`), so a restart starts with an empty data set, as a crashed
/// server without persistence would.
///
/// ```
/// let server = test_support::RedisServer::start().unwrap();
/// assert_ne!(server.port(), 6379);
/// assert!(server.url().starts_with("redis://127.0.0.1:"));
/// ```
pub struct RedisServer {
    inner: Option<SpawnedServer>,
    port: u16,
    args: Vec<String>,
    /// The contents of a config file (a sentinel's), written into the server's own directory
    /// and passed as the first argument; rewritten from this on a restart.
    config: Option<String>,
    /// The server's own working directory (`--dir`): a replica writes the RDB it receives
    /// there, and a server loads `dump.rdb` from there at start, so every server gets a new,
    /// empty one and nothing leaks into (or out of) the test's working directory. A `--dir`
    /// among the extra arguments overrides it.
    _dir: Option<tempfile::TempDir>,
    /// The server's TLS, when it speaks TLS only (`--port 0`).
    tls: Option<ServerTls>,
}

impl std::fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .finish()
    }
}

impl RedisServer {
    /// Starts a server on a free loopback port and waits until it answers `PING`.
    ///
    /// # Errors
    /// [`SpawnError::NotInstalled`] without the server program; [`SpawnError::NotReady`] when no
    /// port tried gave a server that answered within 10 s.
    pub fn start() -> Result<RedisServer, SpawnError> {
        Self::start_with_args(&[])
    }

    /// Starts a server with extra `redis-server` arguments (`["--maxmemory", "10mb"]`, say)
    /// on a free loopback port, and waits until it answers `PING`. A restart keeps them.
    ///
    /// # Errors
    /// As [`RedisServer::start`].
    pub fn start_with_args(args: &[&str]) -> Result<RedisServer, SpawnError> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        Self::start_with(|_| Launch {
            args: args.clone(),
            config: None,
            tls: None,
        })
    }

    /// Starts a server that speaks TLS only (`--tls-port <port> --port 0`, the certificates
    /// of [`TlsFiles`](crate::TlsFiles)) on a free loopback port, and waits until it answers
    /// `PING` over TLS. [`url`](RedisServer::url) is then `rediss://127.0.0.1:<port>`, and
    /// [`client`](RedisServer::client) trusts the test CA (and shows the client certificate).
    /// A restart keeps the options.
    ///
    /// # Errors
    /// As [`RedisServer::start`]; [`SpawnError::Certificates`] without `openssl`.
    ///
    /// ```
    /// use test_support::{RedisServer, TlsServerOptions};
    ///
    /// let server = RedisServer::start_tls(TlsServerOptions::new().mutual(true)).unwrap();
    /// assert_eq!(server.url(), format!("rediss://127.0.0.1:{}", server.port()));
    /// let mut con = server.connection().unwrap();
    /// let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    /// assert_eq!(pong, "PONG");
    /// ```
    pub fn start_tls(options: TlsServerOptions) -> Result<RedisServer, SpawnError> {
        let tls = ServerTls {
            mutual: options.mutual,
            cert: options.cert,
        };
        Self::start_with(|_| Launch {
            args: options.args.clone(),
            config: None,
            tls: Some(tls),
        })
    }

    /// Starts a server on the given loopback port and waits until it answers `PING`.
    ///
    /// # Errors
    /// As [`RedisServer::start`]; also [`SpawnError::NotReady`] for port 6379, which is never used.
    pub fn start_on(port: u16) -> Result<RedisServer, SpawnError> {
        Self::spawn_on(port, Vec::new(), None, None)
    }

    /// Starts a server on a free loopback port with what `launch` makes for that port (extra
    /// arguments that name the port, such as `--cluster-port`, or a sentinel's config file);
    /// tries a new port when the server does not come up, as [`RedisServer::start_with_args`].
    pub(crate) fn start_with(launch: impl Fn(u16) -> Launch) -> Result<RedisServer, SpawnError> {
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let Launch { args, config, tls } = launch(port);
            match Self::spawn_on(port, args, config, tls) {
                Ok(server) => return Ok(server),
                Err(err @ SpawnError::NotReady { .. }) => last = Some(err),
                Err(err) => return Err(err),
            }
        }
        Err(last.expect("at least one attempt was made"))
    }

    /// Starts a node with cluster support on (`--cluster-enabled yes`), with no slots
    /// assigned: enough for `CLUSTER KEYSLOT` and other slot arithmetic.
    ///
    /// # Errors
    /// As [`RedisServer::start`].
    pub fn start_cluster_node() -> Result<RedisServer, SpawnError> {
        let nodes_file = std::env::temp_dir().join(format!(
            "redis-locks-nodes-{}-{}.conf",
            std::process::id(),
            NODE_FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let nodes_file = nodes_file.to_string_lossy().into_owned();
        let _ = std::fs::remove_file(&nodes_file);
        Self::start_with_args(&[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            &nodes_file,
        ])
    }

    fn spawn_on(
        port: u16,
        args: Vec<String>,
        config: Option<String>,
        tls: Option<ServerTls>,
    ) -> Result<RedisServer, SpawnError> {
        if port == FORBIDDEN_PORT {
            return Err(SpawnError::NotReady {
                port,
                detail: "port 6379 is reserved for servers this project did not start".into(),
            });
        }
        if !redis_server_installed() {
            return Err(SpawnError::NotInstalled);
        }
        // With a TLS address, `redis-test` passes `--tls-port <port> --port 0` and the files.
        let (addr, tls_paths) = match tls {
            None => (redis::ConnectionAddr::Tcp("127.0.0.1".into(), port), None),
            Some(tls) => (
                redis::ConnectionAddr::TcpTls {
                    host: "127.0.0.1".into(),
                    port,
                    insecure: false,
                    tls_params: None,
                },
                Some(tls.paths()?),
            ),
        };
        let dir = tempfile::Builder::new()
            .prefix("redis-locks-server-")
            .tempdir()?;
        let config_file = match &config {
            Some(contents) => {
                let path = dir.path().join("redis.conf");
                std::fs::write(&path, contents)?;
                Some(path)
            }
            None => None,
        };
        let mut spawn_error = None;
        let spawned = SpawnedServer::new_with_addr_tls_modules_and_spawner(
            addr,
            config_file.as_deref(),
            tls_paths,
            tls.is_some_and(|tls| tls.mutual),
            None,
            &[],
            |cmd| {
                use_server_program(cmd);
                cmd.current_dir(dir.path())
                    .arg("--dir")
                    .arg(dir.path())
                    .args(&args);
                match cmd.spawn() {
                    Ok(child) => child,
                    Err(err) => {
                        spawn_error = Some(err);
                        // A placeholder that exits at once, so the error is reported below.
                        Command::new("true").spawn().expect("`true` runs")
                    }
                }
            },
        );
        if let Some(err) = spawn_error {
            return Err(SpawnError::Spawn(err));
        }
        let mut server = RedisServer {
            inner: Some(spawned),
            port,
            args,
            config,
            _dir: Some(dir),
            tls,
        };
        if let Some(tls) = tls {
            tls::register(port, tls);
        }
        server.wait_ready()?;
        Ok(server)
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`, or `rediss://127.0.0.1:<port>` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Whether the server speaks TLS (only): started by [`RedisServer::start_tls`], or a node
    /// of a TLS cluster or Sentinel set.
    ///
    /// ```
    /// let server = test_support::RedisServer::start().unwrap();
    /// assert!(!server.is_tls());
    /// ```
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The server's process id, or `None` once it was killed.
    pub fn pid(&self) -> Option<u32> {
        self.inner.as_ref().map(|s| s.process.id())
    }

    /// A `redis::Client` for this server; for a TLS server, one that trusts the test CA and
    /// shows the test client certificate when asked (so it fails against a server with a
    /// wrong-host or expired certificate, as any checking client does).
    pub fn client(&self) -> redis::Client {
        match self.tls {
            None => redis::Client::open(self.url()).expect("a loopback URL is valid"),
            Some(tls) => tls
                .client(self.port, true)
                .expect("the test certificates were made before the server started"),
        }
    }

    /// A new synchronous connection (1 s connect timeout), for checks a test makes directly.
    ///
    /// # Errors
    /// When the server does not accept the connection (killed or paused).
    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        let con = self
            .client()
            .get_connection_with_timeout(Duration::from_secs(1))?;
        con.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(con)
    }

    /// Freezes the server with SIGSTOP: it keeps its port but answers nothing until [`resume`].
    ///
    /// [`resume`]: RedisServer::resume
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// Kills the server with SIGKILL and waits for it to exit. Its data is gone.
    pub fn kill(&mut self) {
        if let Some(mut server) = self.inner.take() {
            server.stop();
            tls::forget(self.port);
        }
    }

    /// Kills the server (if running) and starts a fresh, empty one on the same port.
    ///
    /// # Errors
    /// As [`RedisServer::start_on`].
    pub fn restart(&mut self) -> Result<(), SpawnError> {
        self.kill();
        let fresh = Self::spawn_on(self.port, self.args.clone(), self.config.clone(), self.tls)?;
        *self = fresh;
        Ok(())
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid() {
            // The process is ours and alive (it is reaped only in `kill`), so this cannot hit
            // a recycled pid.
            kill(Pid::from_raw(pid as i32), signal).expect("signal a server we started");
        }
    }

    fn process(&mut self) -> Option<&mut Child> {
        self.inner.as_mut().map(|s| &mut s.process)
    }

    /// The server's log so far (empty once the server was killed).
    pub(crate) fn log(&self) -> String {
        self.inner
            .as_ref()
            .and_then(|s| s.log_file_contents())
            .unwrap_or_default()
    }

    fn wait_ready(&mut self) -> Result<(), SpawnError> {
        let started = Instant::now();
        let port = self.port;
        loop {
            if let Some(status) = self.process().and_then(|p| p.try_wait().ok().flatten()) {
                let detail = format!("exited with {status}; log: {}", tail(&self.log()));
                self.kill();
                return Err(SpawnError::NotReady { port, detail });
            }
            // Over TLS, a connection that checks no certificate: the server's may be one a
            // test wants refused.
            let client = match self.tls {
                None => Ok(self.client()),
                Some(tls) => tls.client(port, false),
            };
            let answer = client
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
                .and_then(|mut con| {
                    con.set_read_timeout(Some(Duration::from_secs(5)))?;
                    redis::cmd("PING").query::<String>(&mut con)
                });
            match answer {
                Ok(_) => return Ok(()),
                // A server started with `--requirepass` answers, if only to say so.
                Err(err) if err.code() == Some("NOAUTH") => return Ok(()),
                Err(err) if started.elapsed() > READY_TIMEOUT => {
                    let detail = format!("{err}; log: {}", tail(&self.log()));
                    self.kill();
                    return Err(SpawnError::NotReady { port, detail });
                }
                Err(_) => thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too; resuming first keeps a paused server from
        // lingering in the stopped state if the kill is ever delayed.
        self.resume();
        self.kill();
    }
}

/// The Redis to use for an example or a tool: `REDIS_URL` when set, otherwise a private
/// server started now (returned too, so it lives as long as the caller keeps it).
///
/// # Errors
/// As [`RedisServer::start`], when a private server is needed.
///
/// ```
/// let (url, _server) = test_support::url_or_private_server().unwrap();
/// assert!(url.starts_with("redis://"));
/// ```
pub fn url_or_private_server() -> Result<(String, Option<RedisServer>), SpawnError> {
    match std::env::var("REDIS_URL") {
        Ok(url) => Ok((url, None)),
        Err(_) => {
            let server = RedisServer::start()?;
            Ok((server.url(), Some(server)))
        }
    }
}

/// Starts `n` independent servers (for Redlock), each on its own free port.
///
/// # Errors
/// The first server that failed to start; those already started are stopped.
///
/// ```
/// let servers = test_support::start_many(3).unwrap();
/// assert_eq!(servers.len(), 3);
/// ```
pub fn start_many(n: usize) -> Result<Vec<RedisServer>, SpawnError> {
    (0..n).map(|_| RedisServer::start()).collect()
}

/// Makes `cmd` (the command `redis-test` built, for `redis-server`) run the server program
/// ([`crate::server_program`]) with the same arguments and piped output.
fn use_server_program(cmd: &mut Command) {
    let mut ours = Command::new(server_program());
    ours.args(cmd.get_args())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    *cmd = ours;
}

/// What to start on a port [`RedisServer::start_with`] picked.
pub(crate) struct Launch {
    /// Extra `redis-server` arguments.
    pub(crate) args: Vec<String>,
    /// The contents of a config file, passed as the first argument (a sentinel needs one it
    /// can rewrite).
    pub(crate) config: Option<String>,
    /// TLS only, with these settings (`--tls-port <port> --port 0`).
    pub(crate) tls: Option<ServerTls>,
}

/// A free loopback port other than 6379 (free when picked: another process may take it).
pub(crate) fn free_port() -> u16 {
    loop {
        let port = redis_test::utils::get_random_available_port();
        if port != FORBIDDEN_PORT {
            return port;
        }
    }
}

/// The last five lines of a log, joined with ` | `.
pub(crate) fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}
