//! How scripts reach the server: one function library per server (`FUNCTION LOAD` once,
//! however many first calls race), `FCALL` after it, `EVALSHA` where the server refuses
//! functions, a reload after `FUNCTION FLUSH`, nothing after `SCRIPT FLUSH`, and a library of
//! another version (or code under the crate's function names) never run.

mod common;

use std::time::Duration;

use redis_locks::{Client, ClientOptions};
use test_support::RedisServer;

/// Concurrent first calls in each test.
const RACERS: usize = 200;

fn options() -> ClientOptions {
    ClientOptions::default()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(5))
        .reconnect_attempts(1)
}

/// `calls` and `rejected_calls` of `command` (as `INFO commandstats` names it, say
/// `function|load`) on `server`; zeros when it never ran.
fn stat(server: &RedisServer, command: &str) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut common::raw(server))
        .unwrap();
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = info.lines().find_map(|line| line.strip_prefix(&prefix)) else {
        return (0, 0);
    };
    let field = |name: &str| {
        line.split(',')
            .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            .map_or(0, |value| value.trim().parse().unwrap())
    };
    (field("calls"), field("rejected_calls"))
}

/// `failed_calls` of `command` on `server`.
fn failed_calls(server: &RedisServer, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut common::raw(server))
        .unwrap();
    let prefix = format!("cmdstat_{command}:");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|line| {
            line.split(',')
                .find_map(|pair| pair.strip_prefix("failed_calls="))
        })
        .map_or(0, |value| value.trim().parse().unwrap())
}

fn reset_stats(server: &RedisServer) {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .exec(&mut common::raw(server))
        .unwrap();
}

/// Takes and releases `RACERS` different fair locks (a script for each step) at once, each
/// racer on `client`, under `prefix`.
async fn race(client: &Client, prefix: &str) {
    let mut racers = Vec::new();
    for racer in 0..RACERS {
        let lock = client.fair_mutex(&format!("{prefix}:{racer}")).unwrap();
        racers.push(tokio::spawn(async move {
            let guard = lock.try_lock().await.unwrap();
            guard.release().await.unwrap();
        }));
    }
    for racer in racers {
        tokio::time::timeout(Duration::from_secs(30), racer)
            .await
            .expect("every racer ends")
            .unwrap();
    }
}

/// The libraries on `server`: (name, its functions' names).
/// How many scripts the crate's sources make (`LockScript::new` outside `node/`).
fn scripts_in_the_crate() -> usize {
    fn made(dir: &std::path::Path) -> usize {
        let mut count = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.ends_with("node") {
                count += made(&path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                count += text.matches(concat!("LockScript", "::new(")).count();
            }
        }
        count
    }
    made(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

fn libraries(server: &RedisServer) -> Vec<(String, Vec<String>)> {
    let list: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .query(&mut common::raw(server))
        .unwrap();
    let text = |value: &redis::Value| match value {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        redis::Value::SimpleString(text) => text.clone(),
        _ => String::new(),
    };
    // Each library is a flat list (RESP2) of field, value pairs.
    let field = |library: &[redis::Value], name: &str| -> Option<redis::Value> {
        library
            .chunks(2)
            .find(|pair| text(&pair[0]) == name)
            .map(|pair| pair[1].clone())
    };
    let redis::Value::Array(libraries) = list else {
        panic!("FUNCTION LIST: {list:?}");
    };
    libraries
        .iter()
        .map(|library| {
            let redis::Value::Array(library) = library else {
                panic!("a library: {library:?}");
            };
            let name = text(&field(library, "library_name").unwrap());
            let Some(redis::Value::Array(functions)) = field(library, "functions") else {
                panic!("functions: {library:?}");
            };
            let functions = functions
                .iter()
                .map(|function| {
                    let redis::Value::Array(function) = function else {
                        panic!("a function: {function:?}");
                    };
                    text(&field(function, "name").unwrap())
                })
                .collect();
            (name, functions)
        })
        .collect()
}

/// A library named `name` that registers `functions`, each of which sets the key `ran`
/// and replies what no script of the crate replies.
fn foreign_library(name: &str, functions: &[String]) -> String {
    let mut text = format!("#!lua name={name}\n");
    for function in functions {
        text.push_str(&format!(
            "redis.register_function('{function}', function(keys, args) \
             redis.call('SET', 'ran', '{function}') return 'foreign' end)\n"
        ));
    }
    text
}

/// Makes the user `name`, who may run every command but `denied`, and returns its URL.
fn user_without(server: &RedisServer, name: &str, denied: &[&str]) -> String {
    let mut command = redis::cmd("ACL");
    command
        .arg("SETUSER")
        .arg(name)
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("&*")
        .arg("+@all");
    for denied in denied {
        command.arg(format!("-{denied}"));
    }
    command.exec(&mut common::raw(server)).unwrap();
    format!("redis://{name}:secret@127.0.0.1:{}", server.port())
}

fn function_load(server: &RedisServer, text: &str) {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(text)
        .exec(&mut common::raw(server))
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_calls_load_the_library_once_then_call_functions() {
    let server = common::server();
    let client = Client::connect_with(&server.url(), options())
        .await
        .unwrap();
    race(&client, "first").await;
    assert_eq!(
        stat(&server, "function|load").0,
        1,
        "one load, however many raced"
    );
    assert!(stat(&server, "fcall").0 > 0, "the others call functions");
    assert_eq!(stat(&server, "script|load").0, 0);
    assert_eq!(stat(&server, "evalsha").0, 0);
    // The library is the crate's, under a versioned name.
    let loaded = libraries(&server);
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    let (name, functions) = &loaded[0];
    let version = name.strip_prefix("redis_locks_").unwrap();
    assert_eq!(version.len(), 12, "{name}");
    assert!(version.chars().all(|c| c.is_ascii_hexdigit()), "{name}");
    assert!(
        functions
            .iter()
            .all(|function| function.starts_with(name.as_str()))
    );
    // Every script of the crate is a function, in this test binary too (which uses a few of
    // the primitives): each script's registration is linked with it.
    assert_eq!(functions.len(), scripts_in_the_crate(), "{functions:?}");
    // A second client of the same build finds the library there (its load fails with
    // "already exists", the code listed is its own): nothing compiled or replaced again.
    let other = Client::connect_with(&server.url(), options())
        .await
        .unwrap();
    let listed = stat(&server, "function|list").0;
    race(&other, "second").await;
    assert_eq!(stat(&server, "function|load").0, 2, "no REPLACE");
    assert_eq!(
        failed_calls(&server, "function|load"),
        1,
        "the one that found it"
    );
    assert_eq!(stat(&server, "function|list").0, listed + 1);
    assert_eq!(libraries(&server).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_functions_each_script_is_loaded_once() {
    let server = common::server();
    let client = Client::connect_with(&server.url(), options().functions(false))
        .await
        .unwrap();
    race(&client, "evalsha").await;
    let (loads, _) = stat(&server, "script|load");
    // The fair lock's acquire and release, and the acquire of the first grant on a
    // connection at most.
    assert!((1..=3).contains(&loads), "{loads} SCRIPT LOADs");
    assert!(stat(&server, "evalsha").0 > 0);
    assert_eq!(stat(&server, "function|load").0, 0);
    assert_eq!(stat(&server, "fcall").0, 0);
    assert!(libraries(&server).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_function_flush_the_next_calls_reload_once() {
    let server = common::server();
    let client = Client::connect_with(&server.url(), options())
        .await
        .unwrap();
    race(&client, "before").await;
    redis::cmd("FUNCTION")
        .arg("FLUSH")
        .exec(&mut common::raw(&server))
        .unwrap();
    reset_stats(&server);
    race(&client, "after").await;
    assert_eq!(stat(&server, "function|load").0, 1, "one reload");
    assert_eq!(libraries(&server).len(), 1);
    // A plain Mutex too (its first grant on a connection runs a script).
    let guard = client.mutex("after:mutex").unwrap().lock().await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_script_flush_functions_run_on_without_a_load() {
    let server = common::server();
    let client = Client::connect_with(&server.url(), options())
        .await
        .unwrap();
    race(&client, "before").await;
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .exec(&mut common::raw(&server))
        .unwrap();
    reset_stats(&server);
    race(&client, "after").await;
    assert_eq!(stat(&server, "function|load").0, 0);
    assert_eq!(stat(&server, "script|load").0, 0);
    assert!(stat(&server, "fcall").0 >= 2 * RACERS as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_function_gets_evalsha_and_still_locks() {
    let server = common::server();
    // All it needs but FUNCTION and FCALL.
    let url = user_without(&server, "nofunctions", &["function", "fcall", "fcall_ro"]);
    let client = Client::connect_with(&url, options()).await.unwrap();
    race(&client, "acl").await;
    // Refused once, then never asked again.
    assert_eq!(stat(&server, "function|load"), (0, 1));
    assert_eq!(stat(&server, "fcall").0, 0);
    assert!(stat(&server, "evalsha").0 > 0);
    // Contention works on that path too: a second holder waits for the first.
    let lock = client.fair_mutex("acl:contended").unwrap();
    let first = lock.try_lock().await.unwrap();
    assert!(lock.try_lock().await.is_err());
    first.release().await.unwrap();
    lock.try_lock().await.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_that_may_load_but_not_call_functions_gets_evalsha() {
    let server = common::server();
    let url = user_without(&server, "loadonly", &["fcall"]);
    let client = Client::connect_with(&url, options()).await.unwrap();
    race(&client, "loadonly").await;
    // The library loaded; the FCALLs sent before the first refusal came back were refused
    // (each then ran with EVALSHA), and none after.
    assert_eq!(stat(&server, "function|load").0, 1);
    let (calls, refused) = stat(&server, "fcall");
    assert_eq!(calls, 0);
    assert!((1..=RACERS as u64).contains(&refused), "{refused}");
    race(&client, "loadonly-again").await;
    assert_eq!(stat(&server, "fcall"), (0, refused));
    assert!(stat(&server, "evalsha").0 > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_version_or_foreign_code_under_the_names_is_never_run() {
    let server = common::server();
    // The crate's names, as a client of this build loads them.
    let client = Client::connect_with(&server.url(), options())
        .await
        .unwrap();
    race(&client, "names").await;
    let (name, functions) = libraries(&server).remove(0);
    drop(client);
    let exists = |server: &RedisServer| common::exists(server, "ran");

    // 1. An older version beside it: other names, never called.
    let older: Vec<String> = (0..functions.len())
        .map(|n| format!("redis_locks_000000000000_{n}"))
        .collect();
    function_load(
        &server,
        &foreign_library("redis_locks_000000000000", &older),
    );
    // 2. Foreign code under this build's library name and function names: replaced.
    redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg(&name)
        .exec(&mut common::raw(&server))
        .unwrap();
    function_load(&server, &foreign_library(&name, &functions));
    reset_stats(&server);
    let client = Client::connect_with(&server.url(), options())
        .await
        .unwrap();
    race(&client, "replaced").await;
    assert!(!exists(&server), "foreign code ran");
    // The load found the name taken, the code listed was not this build's: replaced.
    assert_eq!(stat(&server, "function|load").0, 2);
    assert_eq!(failed_calls(&server, "function|load"), 1);
    let now = libraries(&server);
    assert_eq!(now.len(), 2, "{now:?}");
    drop(client);

    // 3. Foreign code under this build's function names in a library of another name: the
    // load is refused, so the client goes with EVALSHA.
    redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg(&name)
        .exec(&mut common::raw(&server))
        .unwrap();
    function_load(&server, &foreign_library("impostor", &functions));
    reset_stats(&server);
    let client = Client::connect_with(&server.url(), options())
        .await
        .unwrap();
    race(&client, "impostor").await;
    assert!(!exists(&server), "foreign code ran");
    assert_eq!(stat(&server, "fcall").0, 0);
    assert!(stat(&server, "evalsha").0 > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_every_master_loads_the_library_once() {
    let cluster = test_support::RedisCluster::start(3, 0).unwrap();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let client =
        Client::connect_cluster(&seeds, options().response_timeout(Duration::from_secs(5)))
            .await
            .unwrap();
    race(&client, "cluster").await;
    let masters = cluster.masters();
    for port in &masters {
        let master = cluster.node(*port).unwrap();
        assert_eq!(stat(master, "function|load").0, 1, "master {port}");
        assert!(stat(master, "fcall").0 > 0, "master {port}");
        assert_eq!(stat(master, "evalsha").0, 0, "master {port}");
    }
    // A master that lost the library: the next calls there load it again, once for all.
    let first = cluster.node(masters[0]).unwrap();
    redis::cmd("FUNCTION")
        .arg("FLUSH")
        .exec(&mut common::raw(first))
        .unwrap();
    race(&client, "flushed").await;
    assert_eq!(stat(first, "function|load").0, 2);
    assert_eq!(libraries(first).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_functions_gets_evalsha() {
    // As an older server: no FUNCTION command at all.
    let server = RedisServer::start_with_args(&["--rename-command", "FUNCTION", ""]).unwrap();
    let client = Client::connect_with(&server.url(), options())
        .await
        .unwrap();
    race(&client, "old").await;
    race(&client, "old-again").await;
    assert_eq!(stat(&server, "fcall").0, 0);
    assert!(stat(&server, "evalsha").0 > 0);
    let guard = client.mutex("old:mutex").unwrap().lock().await.unwrap();
    guard.release().await.unwrap();
}

/// A server past `maxmemory` (with `noeviction`): a held lock is still released and
/// extended (those functions carry `allow-oom`: a refused release would leave the lock held
/// until its lease ends), locks are still inspected (`no-writes`), and taking a lock is
/// refused with an error, writing nothing. On both paths: functions, and `EVALSHA`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_a_lock_is_still_released_and_extended_and_taking_is_refused() {
    for functions in [true, false] {
        let server = common::server();
        let client = Client::connect_with(&server.url(), options().functions(functions))
            .await
            .unwrap();
        let held = client.mutex("held").unwrap().lock().await.unwrap();
        let read = client.rwlock("shared").unwrap();
        let reader = read.read().await.unwrap();
        let set = |value: &str| {
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-policy")
                .arg("noeviction")
                .arg("maxmemory")
                .arg(value)
                .exec(&mut common::raw(&server))
                .unwrap();
        };
        let key = |name: &str| client.keys(name).unwrap().lock().to_string();
        set("1");
        held.extend(Duration::from_secs(40)).await.unwrap();
        assert!(common::pttl(&server, &key("held")) > 35_000, "extended");
        // Inspections write nothing (no-writes): they read past maxmemory too.
        let state = client.mutex("held").unwrap().state().await.unwrap();
        assert!(state.holder.is_some(), "{state:?}");
        read.state().await.unwrap();
        client.semaphore("pool", 2).unwrap().state().await.unwrap();
        let refused = client.mutex("new").unwrap().try_lock().await;
        assert!(refused.is_err(), "functions {functions}: {refused:?}");
        held.release().await.unwrap();
        reader.release().await.unwrap();
        assert!(!common::exists(&server, &key("held")), "released");
        assert!(!common::exists(&server, &key("shared")), "released");
        assert!(!common::exists(&server, &key("new")), "nothing written");
        set("0");
        // Taking works again once memory is back.
        let again = client.mutex("new").unwrap().try_lock().await.unwrap();
        again.release().await.unwrap();
    }
}

/// Batched renewals go through the same loading as a lone call: after `FUNCTION FLUSH` (or,
/// with `EVALSHA`, `SCRIPT FLUSH`) while locks of every batched kind are held — `Mutex`es
/// and `FairMutex`es (one `extend_many` call a batch), read holds, `ReentrantMutex`es and
/// semaphore permits (a pipeline of their own extend calls a batch) — the next batches reload
/// and renew every lock; none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_locks_are_renewed_in_batches_across_a_flush() {
    use redis_locks::LockOptions;
    for functions in [true, false] {
        let server = common::server();
        let client = Client::connect_with(&server.url(), options().functions(functions))
            .await
            .unwrap();
        let renewed = || {
            LockOptions::default()
                .lease(Duration::from_millis(900))
                .watchdog(true)
        };
        let mut guards: Vec<Box<dyn Held>> = Vec::new();
        for i in 0..20 {
            let name = format!("batch-{i}");
            let mutex = client.mutex_with(&name, common::renewed(900)).unwrap();
            guards.push(Box::new(mutex.lock().await.unwrap()));
            let fair = client
                .fair_mutex_with(&format!("fair-{i}"), renewed())
                .unwrap();
            guards.push(Box::new(fair.lock().await.unwrap()));
            let rwlock = client.rwlock_with(&format!("rw-{i}"), renewed()).unwrap();
            guards.push(Box::new(rwlock.read().await.unwrap()));
            let reentrant = client
                .reentrant_mutex_with(&format!("re-{i}"), renewed())
                .unwrap();
            guards.push(Box::new(reentrant.lock().await.unwrap()));
            let semaphore = client
                .semaphore_with(&format!("sem-{i}"), 2, renewed())
                .unwrap();
            guards.push(Box::new(semaphore.acquire().await.unwrap()));
        }
        let flush = if functions { "FUNCTION" } else { "SCRIPT" };
        redis::cmd(flush)
            .arg("FLUSH")
            .exec(&mut common::raw(&server))
            .unwrap();
        reset_stats(&server);
        // Past two leases: every lock renewed at least twice after the flush.
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        for guard in &guards {
            assert_eq!(guard.reason(), None, "{functions}: {}", guard.label());
        }
        let loads = if functions {
            stat(&server, "function|load").0
        } else {
            stat(&server, "script|load").0
        };
        // One library load; or each script of the renewals (and of the releases below) once
        // or twice (a batch may race a lone call's load).
        let most = if functions { 2 } else { 8 };
        assert!((1..=most).contains(&loads), "{functions}: {loads} loads");
        // Every lock renewed since the flush: 100 locks, at least two renewals each.
        let (calls, _) = stat(&server, if functions { "fcall" } else { "evalsha" });
        assert!(calls >= 200, "{functions}: {calls} script calls");
        drop(guards);
    }
}

/// What the flush test asks of every kind of guard.
trait Held: Send {
    fn reason(&self) -> Option<redis_locks::LostReason>;
    fn label(&self) -> String;
}

macro_rules! held {
    ($($guard:ty),*) => {$(
        impl Held for $guard {
            fn reason(&self) -> Option<redis_locks::LostReason> {
                self.lost_reason()
            }
            fn label(&self) -> String {
                format!("{} {}", stringify!($guard), self.name())
            }
        }
    )*};
}

held!(
    redis_locks::MutexGuard,
    redis_locks::RwLockReadGuard,
    redis_locks::ReentrantMutexGuard,
    redis_locks::SemaphoreGuard
);

/// A server that stops answering during the first load: the callers waiting behind the
/// leader do not each lead in turn and wait out a response timeout of their own (40 callers
/// would then take 40 timeouts); they fail together, and the next calls work once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_load_that_times_out_does_not_queue_the_callers_behind_it() {
    for functions in [true, false] {
        let server = common::server();
        let timeout = Duration::from_millis(300);
        let options = options().response_timeout(timeout).functions(functions);
        let client = Client::connect_with(&server.url(), options).await.unwrap();
        server.pause();
        let callers: Vec<_> = (0..40)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move {
                    client
                        .mutex(&format!("m{i}"))
                        .unwrap()
                        .try_lock()
                        .await
                        .map(drop)
                })
            })
            .collect();
        // 40 timeouts one after the other would take 12 s; together they take about one.
        let outcomes = tokio::time::timeout(Duration::from_secs(6), async {
            let mut outcomes = Vec::new();
            for caller in callers {
                outcomes.push(caller.await.unwrap());
            }
            outcomes
        })
        .await
        .expect("the callers behind a failed load are not queued");
        assert!(
            outcomes.iter().all(Result::is_err),
            "{functions}: {outcomes:?}"
        );
        server.resume();
        // Then calls work again (the first may still meet the backlog of the paused ones).
        let mutex = client.mutex("after").unwrap();
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        let guard = loop {
            match mutex.try_lock().await {
                Ok(guard) => break guard,
                Err(err) => assert!(tokio::time::Instant::now() < until, "{err}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        guard.release().await.unwrap();
    }
}
