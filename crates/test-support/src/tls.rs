//! TLS for the private servers: certificates made at test time with the `openssl` command
//! ([`TlsFiles`]), the choices of a TLS server ([`TlsServerOptions`], [`ServerCert`]), and the
//! helper connections of this crate to the TLS servers it started.
//!
//! The certificates are made once per process (the first [`TlsFiles::get`]) into
//! `<temp dir>/redis-locks-tls-<uid>/<pid>/`, which lives as long as the process; a later
//! process removes the directories of processes that are gone. Keys are EC P-256 (fast to
//! make); certificates are X.509 v3, the CAs valid for 10 years, the leaves for 10 years (the
//! expired one ended on 2020-01-02).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::error::SpawnError;

/// The certificates of this process, made on first use (or why they could not be made).
static FILES: OnceLock<Result<TlsFiles, String>> = OnceLock::new();

/// The TLS servers of this process that are running, by port, for the helper connections
/// (`probe::connect`) and URLs of the cluster and Sentinel helpers.
static TLS_PORTS: Mutex<Option<HashMap<u16, ServerTls>>> = Mutex::new(None);

/// The `openssl` configuration: the extensions of each kind of certificate, and a minimal CA
/// for `openssl ca` (the one command that signs with a start date in the past).
const OPENSSL_CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
[wrong_host_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:elsewhere.example
[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
[ca]
default_ca = ca_default
[ca_default]
database = index.txt
new_certs_dir = issued
serial = serial
default_md = sha256
policy = policy_any
unique_subject = no
[policy_any]
commonName = supplied
";

/// A certificate and its private key, as PEM bytes and as files.
///
/// ```
/// let files = test_support::TlsFiles::get().unwrap();
/// let client = files.client();
/// assert!(client.cert_pem().starts_with(b"-----BEGIN CERTIFICATE-----"));
/// assert!(client.key_pem().starts_with(b"-----BEGIN PRIVATE KEY-----"));
/// assert_eq!(std::fs::read(client.cert_path()).unwrap(), client.cert_pem());
/// ```
#[derive(Debug, Clone)]
pub struct CertFiles {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    cert_path: PathBuf,
    key_path: PathBuf,
}

impl CertFiles {
    /// The certificate, PEM.
    ///
    /// ```
    /// let ca = test_support::TlsFiles::get().unwrap().ca();
    /// assert!(String::from_utf8_lossy(ca.cert_pem()).contains("BEGIN CERTIFICATE"));
    /// ```
    pub fn cert_pem(&self) -> &[u8] {
        &self.cert_pem
    }

    /// The private key, PEM (PKCS #8, EC P-256).
    ///
    /// ```
    /// let client = test_support::TlsFiles::get().unwrap().client();
    /// assert!(String::from_utf8_lossy(client.key_pem()).contains("BEGIN PRIVATE KEY"));
    /// ```
    pub fn key_pem(&self) -> &[u8] {
        &self.key_pem
    }

    /// The file that holds [`CertFiles::cert_pem`].
    ///
    /// ```
    /// let ca = test_support::TlsFiles::get().unwrap().ca();
    /// assert!(ca.cert_path().is_file());
    /// ```
    pub fn cert_path(&self) -> &Path {
        &self.cert_path
    }

    /// The file that holds [`CertFiles::key_pem`].
    ///
    /// ```
    /// let client = test_support::TlsFiles::get().unwrap().client();
    /// assert!(client.key_path().is_file());
    /// ```
    pub fn key_path(&self) -> &Path {
        &self.key_path
    }

    /// `redis::ClientTlsConfig` with this certificate and key, for mutual TLS.
    ///
    /// ```
    /// let config = test_support::TlsFiles::get().unwrap().client().client_tls_config();
    /// assert!(!config.client_cert.is_empty());
    /// ```
    pub fn client_tls_config(&self) -> redis::ClientTlsConfig {
        redis::ClientTlsConfig {
            client_cert: self.cert_pem.clone(),
            client_key: self.key_pem.clone(),
        }
    }
}

/// The certificates the TLS tests use, made once per process with the `openssl` command:
///
/// - [`ca`](TlsFiles::ca): the test CA, which signs all of the following but the last;
/// - [`server`](TlsFiles::server)`(ServerCert::Good)`: valid for IP `127.0.0.1` and DNS
///   `localhost` (for server and client authentication: a replica or cluster node shows it
///   to its peer as a client certificate);
/// - `server(ServerCert::WrongHost)`: valid for DNS `elsewhere.example` only;
/// - `server(ServerCert::Expired)`: like the good one, but valid only on 2020-01-01;
/// - [`client`](TlsFiles::client): a client certificate, for mutual TLS;
/// - [`other_ca`](TlsFiles::other_ca): an unrelated CA, to trust instead of the test CA;
/// - [`other_client`](TlsFiles::other_client): a client certificate signed by the other CA.
///
/// ```
/// use test_support::{RedisServer, TlsFiles, TlsServerOptions};
///
/// let files = TlsFiles::get().unwrap();
/// let server = RedisServer::start_tls(TlsServerOptions::new()).unwrap();
/// let client = redis::Client::build_with_tls(server.url(), files.certificates(false)).unwrap();
/// let mut con = client.get_connection().unwrap();
/// let pong: String = redis::cmd("PING").query(&mut con).unwrap();
/// assert_eq!(pong, "PONG");
/// ```
#[derive(Debug)]
pub struct TlsFiles {
    dir: PathBuf,
    ca: CertFiles,
    other_ca: CertFiles,
    client: CertFiles,
    other_client: CertFiles,
    good: CertFiles,
    wrong_host: CertFiles,
    expired: CertFiles,
}

impl TlsFiles {
    /// The certificates of this process, made on the first call (about 0.1 s; later calls
    /// return the same ones).
    ///
    /// # Errors
    /// [`SpawnError::Certificates`] when `openssl` is missing or fails (every call then gives
    /// the same error).
    ///
    /// ```
    /// let a = test_support::TlsFiles::get().unwrap();
    /// let b = test_support::TlsFiles::get().unwrap();
    /// assert!(std::ptr::eq(a, b));
    /// ```
    pub fn get() -> Result<&'static TlsFiles, SpawnError> {
        FILES
            .get_or_init(make)
            .as_ref()
            .map_err(|err| SpawnError::Certificates(err.clone()))
    }

    /// The directory that holds every file (removed by a later process once this one ended).
    ///
    /// ```
    /// let files = test_support::TlsFiles::get().unwrap();
    /// assert!(files.ca_path().starts_with(files.dir()));
    /// ```
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The test CA (its key signs the servers' and the client's certificates).
    ///
    /// ```
    /// let files = test_support::TlsFiles::get().unwrap();
    /// assert_eq!(files.ca().cert_pem(), files.ca_pem());
    /// ```
    pub fn ca(&self) -> &CertFiles {
        &self.ca
    }

    /// The test CA's certificate, PEM: the root a client trusts.
    ///
    /// ```
    /// let files = test_support::TlsFiles::get().unwrap();
    /// assert!(files.ca_pem().starts_with(b"-----BEGIN CERTIFICATE-----"));
    /// ```
    pub fn ca_pem(&self) -> &[u8] {
        self.ca.cert_pem()
    }

    /// The file of [`TlsFiles::ca_pem`].
    ///
    /// ```
    /// let files = test_support::TlsFiles::get().unwrap();
    /// assert_eq!(std::fs::read(files.ca_path()).unwrap(), files.ca_pem());
    /// ```
    pub fn ca_path(&self) -> &Path {
        self.ca.cert_path()
    }

    /// A CA unrelated to the test CA: a client that trusts only it refuses every test server.
    ///
    /// ```
    /// let files = test_support::TlsFiles::get().unwrap();
    /// assert_ne!(files.other_ca().cert_pem(), files.ca_pem());
    /// ```
    pub fn other_ca(&self) -> &CertFiles {
        &self.other_ca
    }

    /// The other CA's certificate, PEM.
    ///
    /// ```
    /// let files = test_support::TlsFiles::get().unwrap();
    /// assert_eq!(files.other_ca_pem(), files.other_ca().cert_pem());
    /// ```
    pub fn other_ca_pem(&self) -> &[u8] {
        self.other_ca.cert_pem()
    }

    /// The client certificate and key (signed by the test CA), for mutual TLS.
    ///
    /// ```
    /// let files = test_support::TlsFiles::get().unwrap();
    /// assert!(files.client().cert_path().is_file());
    /// ```
    pub fn client(&self) -> &CertFiles {
        &self.client
    }

    /// The client certificate, PEM.
    ///
    /// ```
    /// let files = test_support::TlsFiles::get().unwrap();
    /// assert_eq!(files.client_cert_pem(), files.client().cert_pem());
    /// ```
    pub fn client_cert_pem(&self) -> &[u8] {
        self.client.cert_pem()
    }

    /// The client certificate's private key, PEM.
    ///
    /// ```
    /// let files = test_support::TlsFiles::get().unwrap();
    /// assert_eq!(files.client_key_pem(), files.client().key_pem());
    /// ```
    pub fn client_key_pem(&self) -> &[u8] {
        self.client.key_pem()
    }

    /// A client certificate and key signed by the other CA: a mutual-TLS server refuses it.
    ///
    /// ```
    /// let files = test_support::TlsFiles::get().unwrap();
    /// assert_ne!(files.other_client().cert_pem(), files.client_cert_pem());
    /// ```
    pub fn other_client(&self) -> &CertFiles {
        &self.other_client
    }

    /// A server certificate and key, signed by the test CA.
    ///
    /// ```
    /// use test_support::{ServerCert, TlsFiles};
    ///
    /// let files = TlsFiles::get().unwrap();
    /// assert_ne!(
    ///     files.server(ServerCert::Good).cert_pem(),
    ///     files.server(ServerCert::Expired).cert_pem()
    /// );
    /// ```
    pub fn server(&self, which: ServerCert) -> &CertFiles {
        match which {
            ServerCert::Good => &self.good,
            ServerCert::WrongHost => &self.wrong_host,
            ServerCert::Expired => &self.expired,
        }
    }

    /// What `redis::Client::build_with_tls` takes to trust the test CA, with the client
    /// certificate for mutual TLS when `client_cert`.
    ///
    /// ```
    /// let files = test_support::TlsFiles::get().unwrap();
    /// let certs = files.certificates(true);
    /// assert_eq!(certs.root_cert.as_deref(), Some(files.ca_pem()));
    /// assert!(certs.client_tls.is_some());
    /// ```
    pub fn certificates(&self, client_cert: bool) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: client_cert.then(|| self.client.client_tls_config()),
            root_cert: Some(self.ca.cert_pem.clone()),
        }
    }

    /// `--tls --cacert <CA> --cert <client cert> --key <client key>`: the `redis-cli`
    /// arguments that reach any test TLS server with a good certificate.
    ///
    /// ```
    /// let args = test_support::TlsFiles::get().unwrap().redis_cli_args();
    /// assert_eq!(args[0], "--tls");
    /// ```
    pub fn redis_cli_args(&self) -> Vec<String> {
        vec![
            "--tls".to_owned(),
            "--cacert".to_owned(),
            self.ca.cert_path.display().to_string(),
            "--cert".to_owned(),
            self.client.cert_path.display().to_string(),
            "--key".to_owned(),
            self.client.key_path.display().to_string(),
        ]
    }
}

/// Which certificate a TLS server shows (all signed by the test CA, [`TlsFiles::ca`]).
///
/// ```
/// assert_eq!(test_support::ServerCert::default(), test_support::ServerCert::Good);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ServerCert {
    /// Valid now, for IP `127.0.0.1` and DNS `localhost`.
    #[default]
    Good,
    /// Valid now, for DNS `elsewhere.example` only: a client that checks the host name
    /// refuses it.
    WrongHost,
    /// For `127.0.0.1` and `localhost`, but valid only on 2020-01-01.
    Expired,
}

/// How to start a TLS server ([`RedisServer::start_tls`](crate::RedisServer::start_tls)):
/// server authentication only unless [`mutual`](TlsServerOptions::mutual), with the good
/// certificate unless [`server_cert`](TlsServerOptions::server_cert) says otherwise.
///
/// ```
/// use test_support::{RedisServer, ServerCert, TlsServerOptions};
///
/// let server = RedisServer::start_tls(
///     TlsServerOptions::new()
///         .mutual(true)
///         .server_cert(ServerCert::Good)
///         .args(&["--requirepass", "secret"]),
/// )
/// .unwrap();
/// assert!(server.url().starts_with("rediss://127.0.0.1:"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsServerOptions {
    pub(crate) mutual: bool,
    pub(crate) cert: ServerCert,
    pub(crate) args: Vec<String>,
}

impl TlsServerOptions {
    /// Server authentication only, the good certificate, no extra arguments.
    ///
    /// ```
    /// assert_eq!(test_support::TlsServerOptions::new(), Default::default());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the server requires a client certificate signed by the test CA
    /// (`--tls-auth-clients yes`); `false` by default (`no`: none asked for).
    ///
    /// ```
    /// let options = test_support::TlsServerOptions::new().mutual(true);
    /// # let _ = options;
    /// ```
    pub fn mutual(mut self, required: bool) -> Self {
        self.mutual = required;
        self
    }

    /// The certificate the server shows; [`ServerCert::Good`] by default.
    ///
    /// ```
    /// use test_support::{ServerCert, TlsServerOptions};
    ///
    /// let options = TlsServerOptions::new().server_cert(ServerCert::WrongHost);
    /// # let _ = options;
    /// ```
    pub fn server_cert(mut self, cert: ServerCert) -> Self {
        self.cert = cert;
        self
    }

    /// Extra `redis-server` arguments (`["--requirepass", "secret"]`, an `--aclfile`, ...),
    /// after the TLS ones. A restart keeps them.
    ///
    /// ```
    /// let options = test_support::TlsServerOptions::new().args(&["--maxmemory", "10mb"]);
    /// # let _ = options;
    /// ```
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args = args.iter().map(|a| a.to_string()).collect();
        self
    }
}

/// What a running server's TLS is: whether it requires client certificates, and which
/// certificate it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerTls {
    pub(crate) mutual: bool,
    pub(crate) cert: ServerCert,
}

impl ServerTls {
    /// The good certificate, client certificates required when `mutual`: a cluster node's or
    /// a Sentinel set member's.
    pub(crate) fn topology(mutual: bool) -> ServerTls {
        ServerTls {
            mutual,
            cert: ServerCert::Good,
        }
    }

    /// The files `redis-test` passes as `--tls-cert-file`, `--tls-key-file` and
    /// `--tls-ca-cert-file`.
    pub(crate) fn paths(self) -> Result<redis_test::utils::TlsFilePaths, SpawnError> {
        let files = TlsFiles::get()?;
        let server = files.server(self.cert);
        Ok(redis_test::utils::TlsFilePaths {
            redis_crt: server.cert_path.clone(),
            redis_key: server.key_path.clone(),
            ca_crt: files.ca.cert_path.clone(),
        })
    }

    /// A client for the server on `port` that trusts the test CA and shows the client
    /// certificate when asked; with `verify` false, one that checks no certificate at all
    /// (the readiness probe of a server with a wrong-host or expired certificate).
    pub(crate) fn client(self, port: u16, verify: bool) -> redis::RedisResult<redis::Client> {
        let files = TlsFiles::get().map_err(|err| {
            redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no test certificates",
                err.to_string(),
            ))
        })?;
        let fragment = if verify { "" } else { "#insecure" };
        redis::Client::build_with_tls(
            format!("rediss://127.0.0.1:{port}/{fragment}"),
            files.certificates(true),
        )
    }
}

/// Notes that a TLS server runs on `port` (until [`forget`]).
pub(crate) fn register(port: u16, tls: ServerTls) {
    TLS_PORTS
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .insert(port, tls);
}

/// Notes that the server on `port` stopped.
pub(crate) fn forget(port: u16) {
    if let Some(ports) = TLS_PORTS.lock().unwrap().as_mut() {
        ports.remove(&port);
    }
}

/// The TLS of the server this process runs on `port`, if it speaks TLS.
pub(crate) fn on_port(port: u16) -> Option<ServerTls> {
    TLS_PORTS
        .lock()
        .unwrap()
        .as_ref()
        .and_then(|ports| ports.get(&port).copied())
}

/// A client for this process's server on `port`, which reaches it whether it speaks TLS (a
/// checked connection when its certificate is good, an unchecked one otherwise) or not.
pub(crate) fn helper_client(port: u16) -> redis::RedisResult<redis::Client> {
    match on_port(port) {
        Some(tls) => tls.client(port, tls.cert == ServerCert::Good),
        None => redis::Client::open(format!("redis://127.0.0.1:{port}")),
    }
}

/// The URL of this process's server on `port`: `rediss://` when it speaks TLS.
pub(crate) fn url(port: u16) -> String {
    let scheme = if on_port(port).is_some() {
        "rediss"
    } else {
        "redis"
    };
    format!("{scheme}://127.0.0.1:{port}")
}

/// Makes the certificates in this process's directory.
fn make() -> Result<TlsFiles, String> {
    let parent = std::env::temp_dir().join(format!(
        "redis-locks-tls-{}",
        nix::unistd::getuid().as_raw()
    ));
    std::fs::create_dir_all(&parent).map_err(|err| format!("{}: {err}", parent.display()))?;
    remove_dead(&parent);
    let dir = parent.join(std::process::id().to_string());
    // Left by an earlier process with the same pid.
    let _ = std::fs::remove_dir_all(&dir);
    let issued = dir.join("issued");
    std::fs::create_dir_all(&issued).map_err(|err| format!("{}: {err}", issued.display()))?;
    let write = |name: &str, contents: &str| {
        std::fs::write(dir.join(name), contents).map_err(|err| format!("{name}: {err}"))
    };
    write("openssl.cnf", OPENSSL_CONFIG)?;
    write("index.txt", "")?;
    write("serial", "1000\n")?;

    let ca = self_signed(&dir, "ca", "redis-locks test CA")?;
    let other_ca = self_signed(&dir, "other-ca", "redis-locks unrelated CA")?;
    let good = signed(&dir, "server", "ca", "server_ext", Validity::Now)?;
    let wrong_host = signed(&dir, "wrong-host", "ca", "wrong_host_ext", Validity::Now)?;
    let expired = signed(&dir, "expired", "ca", "server_ext", Validity::Past)?;
    let client = signed(&dir, "client", "ca", "client_ext", Validity::Now)?;
    let other_client = signed(
        &dir,
        "other-client",
        "other-ca",
        "client_ext",
        Validity::Now,
    )?;
    Ok(TlsFiles {
        dir,
        ca,
        other_ca,
        client,
        other_client,
        good,
        wrong_host,
        expired,
    })
}

/// Removes the certificate directories of this user's processes that are gone.
fn remove_dead(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        let gone = matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH)
        );
        if gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// When a signed certificate is valid.
#[derive(Clone, Copy)]
enum Validity {
    /// From now on, for 10 years.
    Now,
    /// On 2020-01-01 only.
    Past,
}

/// Makes `<name>.key` and a self-signed CA certificate `<name>.crt`.
fn self_signed(dir: &Path, name: &str, subject: &str) -> Result<CertFiles, String> {
    let key = key(dir, name)?;
    let crt = format!("{name}.crt");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-config",
            "openssl.cnf",
            "-extensions",
            "ca_ext",
            "-key",
            &key,
            "-subj",
            &format!("/CN={subject}"),
            "-days",
            "3650",
            "-out",
            &crt,
        ],
    )?;
    read(dir, &crt, &key)
}

/// Makes `<name>.key` and `<name>.crt`, signed by the CA `<ca>.crt`/`<ca>.key` with the
/// extensions of section `ext` of the configuration.
fn signed(
    dir: &Path,
    name: &str,
    ca: &str,
    ext: &str,
    validity: Validity,
) -> Result<CertFiles, String> {
    let key = key(dir, name)?;
    let csr = format!("{name}.csr");
    let crt = format!("{name}.crt");
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-config",
            "openssl.cnf",
            "-key",
            &key,
            "-subj",
            &format!("/CN=redis-locks test {name}"),
            "-out",
            &csr,
        ],
    )?;
    let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
    let mut args = vec![
        "ca",
        "-config",
        "openssl.cnf",
        "-batch",
        "-notext",
        "-in",
        &csr,
        "-cert",
        &ca_crt,
        "-keyfile",
        &ca_key,
        "-extfile",
        "openssl.cnf",
        "-extensions",
        ext,
        "-out",
        &crt,
    ];
    match validity {
        Validity::Now => args.extend(["-days", "3650"]),
        // `-days` cannot go back in time; `openssl ca` takes both ends explicitly.
        Validity::Past => args.extend([
            "-startdate",
            "20200101000000Z",
            "-enddate",
            "20200102000000Z",
        ]),
    }
    openssl(dir, &args)?;
    read(dir, &crt, &key)
}

/// Makes an EC P-256 private key `<name>.key` (PKCS #8 PEM); returns its file name.
fn key(dir: &Path, name: &str) -> Result<String, String> {
    let key = format!("{name}.key");
    openssl(
        dir,
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            &key,
        ],
    )?;
    Ok(key)
}

fn read(dir: &Path, crt: &str, key: &str) -> Result<CertFiles, String> {
    let (cert_path, key_path) = (dir.join(crt), dir.join(key));
    let read =
        |path: &Path| std::fs::read(path).map_err(|err| format!("{}: {err}", path.display()));
    Ok(CertFiles {
        cert_pem: read(&cert_path)?,
        key_pem: read(&key_path)?,
        cert_path,
        key_path,
    })
}

/// Runs `openssl <args>` in `dir` (at most 30 s); the error has its output.
fn openssl(dir: &Path, args: &[&str]) -> Result<(), String> {
    const TIMEOUT: Duration = Duration::from_secs(30);
    let what = format!("openssl {}", args.join(" "));
    let mut child = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("{what}: {err} (is openssl installed?)"))?;
    let started = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() > TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what}: no answer within {TIMEOUT:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(err) => return Err(format!("{what}: {err}")),
        }
    }
    let output = child
        .wait_with_output()
        .map_err(|err| format!("{what}: {err}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what}: {}: {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}
