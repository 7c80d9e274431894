//! `bench transports`: TLS and replicated acquisition beside plaintext and the bare floor, on
//! private servers it starts itself (a TLS one among them: this binary is named `tls`, so the
//! Valkey pass of `scripts/test`, whose `valkey-server` has no TLS, leaves it out).

use std::process::Command;

#[test]
fn transports_measures_every_mode_and_the_ratios() {
    let out = Command::new(env!("CARGO_BIN_EXE_redis-locks-bench"))
        .args([
            "transports",
            "--duration",
            "200ms",
            "--rounds",
            "1",
            "--json",
        ])
        .env_remove("REDIS_URL")
        .output()
        .expect("run redis-locks-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("one JSON object");
    let modes = report["modes"].as_array().expect("modes");
    let names: Vec<&str> = modes.iter().filter_map(|m| m["mode"].as_str()).collect();
    assert_eq!(
        names,
        [
            "bare plaintext",
            "bare TLS",
            "plaintext",
            "TLS",
            "master+replica",
            "master+replica, WAIT 1"
        ]
    );
    for mode in modes {
        assert!(mode["ops_per_s"].as_f64() > Some(0.0), "{mode}");
    }
    // An uncontended lock is one request to take and one to release; a replicated one also
    // confirms its grant (the extension with WAIT).
    let requests = |index: usize| modes[index]["requests_per_op"].as_f64().unwrap();
    assert_eq!(requests(2), 2.0);
    assert_eq!(requests(3), 2.0);
    assert_eq!(requests(5), 3.0);
    for ratio in ["tls_ratio", "tls_floor_ratio"] {
        assert!(report[ratio].as_f64() > Some(0.0), "{report}");
    }
}
