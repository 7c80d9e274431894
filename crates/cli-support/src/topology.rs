//! `--cluster`, `--sentinel` and `--master` (and `REDIS_CLUSTER`, `REDIS_SENTINEL`,
//! `REDIS_MASTER`): a Redis Cluster or a Sentinel-watched master instead of the servers of
//! `--redis`. Every command that talks to Redis flattens [`TopologyArgs`] beside its own
//! `--redis`, and [`TopologyArgs::wanted`] says which of the three the user asked for, or
//! why the combination is bad usage.
//!
//! The command line wins over the environment: `--cluster URL` with `REDIS_URL` set uses the
//! cluster (and ignores `REDIS_URL`), and `--redis URL` with `REDIS_CLUSTER` set uses the
//! server. Two kinds named on the command line, or two in the environment and none on the
//! command line, are bad usage; so are `--master` without a Sentinel and a Sentinel without
//! a master name (a private one is named `mymaster` unless `--master` says otherwise).

use clap::parser::ValueSource;
use clap::{ArgMatches, FromArgMatches};

use crate::exit::CliError;

/// The heading the flags are listed under in `--help`.
const HEADING: &str = "Redis Cluster or Sentinel (instead of --redis)";

/// The flags as clap declares them.
#[derive(Debug, Clone, Default, clap::Args)]
struct Flags {
    /// A Redis Cluster, through these seed nodes (repeat it, or a comma list in
    /// REDIS_CLUSTER); the rest of the cluster is found from them. Bare `--cluster` (no URL;
    /// put it last or before another option, or write `--cluster=URL` for a URL): a private
    /// cluster of 3 masters started for the run where the command starts private servers
    /// (demo, bench, check), redis://127.0.0.1:6379 as the seed for run and status. Not
    /// with --redis or --sentinel.
    #[arg(
        long,
        env = "REDIS_CLUSTER",
        value_name = "URL",
        num_args = 0..=1,
        value_delimiter = ',',
        global = true,
        value_parser = parse_url,
        help_heading = HEADING
    )]
    cluster: Option<Vec<String>>,
    /// The master that Redis Sentinels watch under --master NAME, followed across
    /// failovers; these are the sentinels (repeat it, or a comma list in REDIS_SENTINEL).
    /// Bare `--sentinel`: a private master with 2 replicas and 3 sentinels where the
    /// command starts private servers (demo, bench, check), redis://127.0.0.1:26379 for run
    /// and status. Not with --redis or --cluster.
    #[arg(
        long,
        env = "REDIS_SENTINEL",
        value_name = "URL",
        num_args = 0..=1,
        value_delimiter = ',',
        global = true,
        value_parser = parse_url,
        help_heading = HEADING
    )]
    sentinel: Option<Vec<String>>,
    /// With --sentinel: the name the sentinels watch the master under (required with
    /// sentinel URLs; a private Sentinel set-up's is `mymaster` by default).
    #[arg(
        long,
        env = "REDIS_MASTER",
        value_name = "NAME",
        global = true,
        help_heading = HEADING
    )]
    master: Option<String>,
}

/// Parses a word given to `--cluster` or `--sentinel`: a word that is no URL is most likely
/// a name or subcommand that a bare flag took as its value, and the message says how to
/// write the flag. A URL is checked by [`TopologyArgs::wanted`] ([`check_url`]), not here:
/// clap's message would repeat the value, password and all.
fn parse_url(text: &str) -> Result<String, String> {
    if !text.contains("://") {
        return Err(format!(
            "{text:?} is not a Redis URL (redis://host:port); a bare --cluster or --sentinel \
             takes the next word as its URL: put it last or before another option"
        ));
    }
    Ok(text.to_string())
}

/// Checks a URL given to `--cluster` or `--sentinel`: one the redis client can use. The
/// message shows it with its password hidden.
fn check_url(text: &str) -> Result<(), CliError> {
    use redis::IntoConnectionInfo;
    text.into_connection_info().map(drop).map_err(|err| {
        CliError::Usage(format!(
            "invalid Redis URL {:?}: {err}",
            crate::redact(text)
        ))
    })
}

/// Which values came from the environment rather than the command line.
#[derive(Debug, Clone, Copy, Default)]
struct FromEnv {
    redis: bool,
    cluster: bool,
    sentinel: bool,
    master: bool,
}

/// `--cluster`, `--sentinel`, `--master` as given, and where each came from.
///
/// ```
/// use clap::Parser;
/// use cli_support::topology::{TopologyArgs, Wanted};
///
/// #[derive(Parser)]
/// struct Cli {
///     #[arg(long)]
///     redis: Vec<String>,
///     #[command(flatten)]
///     topology: TopologyArgs,
/// }
/// let cli = Cli::try_parse_from(["cli", "--cluster", "redis://127.0.0.1:7000"]).unwrap();
/// assert_eq!(
///     cli.topology.wanted(cli.redis).unwrap(),
///     Wanted::Cluster(vec!["redis://127.0.0.1:7000".into()])
/// );
/// let cli = Cli::try_parse_from(["cli", "--sentinel"]).unwrap();
/// assert_eq!(
///     cli.topology.wanted(cli.redis).unwrap(),
///     Wanted::Sentinel { sentinels: vec![], master: None }
/// );
/// ```
#[derive(Debug, Clone, Default)]
pub struct TopologyArgs {
    /// `--cluster`'s seed URLs; `Some` and empty for a bare `--cluster`.
    pub cluster: Option<Vec<String>>,
    /// `--sentinel`'s sentinel URLs; `Some` and empty for a bare `--sentinel`.
    pub sentinel: Option<Vec<String>>,
    /// `--master`.
    pub master: Option<String>,
    from_env: FromEnv,
}

/// What the user asked to talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// `--redis`: one server, or a Redlock's independent servers; none given: the
    /// command's default (a private server, or redis://127.0.0.1:6379).
    Servers(Vec<String>),
    /// `--cluster`: its seeds; none (a bare `--cluster`): the command's default.
    Cluster(Vec<String>),
    /// `--sentinel`: the sentinels, none for the command's default, and `--master`.
    Sentinel {
        /// The sentinels' URLs.
        sentinels: Vec<String>,
        /// The name they watch the master under.
        master: Option<String>,
    },
}

impl TopologyArgs {
    /// What the user asked for, `redis` being the command's `--redis` values; bad
    /// combinations are [`CliError::Usage`].
    pub fn wanted(&self, redis: Vec<String>) -> Result<Wanted, CliError> {
        for url in self.cluster.iter().chain(&self.sentinel).flatten() {
            check_url(url)?;
        }
        let kinds = [
            (
                "--redis",
                "REDIS_URL",
                !redis.is_empty(),
                self.from_env.redis,
            ),
            (
                "--cluster",
                "REDIS_CLUSTER",
                self.cluster.is_some(),
                self.from_env.cluster,
            ),
            (
                "--sentinel",
                "REDIS_SENTINEL",
                self.sentinel.is_some(),
                self.from_env.sentinel,
            ),
        ];
        let on_line: Vec<usize> = (0..3).filter(|&i| kinds[i].2 && !kinds[i].3).collect();
        let in_env: Vec<usize> = (0..3).filter(|&i| kinds[i].2 && kinds[i].3).collect();
        let chosen = match (on_line.as_slice(), in_env.as_slice()) {
            ([one], _) => Some(*one),
            ([], [one]) => Some(*one),
            ([], []) => None,
            ([first, second, ..], _) => {
                let redlock = if *first == 0 && redis.len() > 1 {
                    " (several --redis make a Redlock over independent servers, which cannot \
                     be combined with a Redis Cluster or Sentinel)"
                } else {
                    ""
                };
                return Err(CliError::Usage(format!(
                    "{} cannot be combined with {}: give one of --redis, --cluster, \
                     --sentinel{redlock}",
                    kinds[*second].0, kinds[*first].0
                )));
            }
            ([], [first, second, ..]) => {
                return Err(CliError::Usage(format!(
                    "{} and {} are both set: say which Redis to use with --redis, --cluster \
                     or --sentinel",
                    kinds[*first].1, kinds[*second].1
                )));
            }
        };
        let master_on_line = self.master.is_some() && !self.from_env.master;
        if chosen != Some(2) && master_on_line {
            return Err(CliError::Usage(
                "--master NAME goes with --sentinel (the sentinels that watch that master)".into(),
            ));
        }
        Ok(match chosen {
            None | Some(0) => Wanted::Servers(redis),
            Some(1) => Wanted::Cluster(self.cluster.clone().unwrap_or_default()),
            _ => {
                let sentinels = self.sentinel.clone().unwrap_or_default();
                if !sentinels.is_empty() && self.master.is_none() {
                    return Err(CliError::Usage(
                        "--sentinel needs --master NAME (or REDIS_MASTER): the name the \
                         sentinels watch the master under"
                            .into(),
                    ));
                }
                if self.master.as_deref() == Some("") {
                    return Err(CliError::Usage("--master: the name cannot be empty".into()));
                }
                Wanted::Sentinel {
                    sentinels,
                    master: self.master.clone(),
                }
            }
        })
    }
}

impl FromArgMatches for TopologyArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let flags = Flags::from_arg_matches(matches)?;
        // `redis` is the command's own flag (when it has one): asked about only when present,
        // as clap refuses questions about an argument it does not know.
        let from_env = |id: &str| {
            matches.ids().any(|present| present.as_str() == id)
                && matches.value_source(id) == Some(ValueSource::EnvVariable)
        };
        Ok(TopologyArgs {
            from_env: FromEnv {
                redis: from_env("redis"),
                cluster: from_env("cluster"),
                sentinel: from_env("sentinel"),
                master: from_env("master"),
            },
            cluster: flags.cluster,
            sentinel: flags.sentinel,
            master: flags.master,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for TopologyArgs {
    fn augment_args(command: clap::Command) -> clap::Command {
        Flags::augment_args(command)
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Flags::augment_args_for_update(command)
    }
}
