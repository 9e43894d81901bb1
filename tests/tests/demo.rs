//! The README's first command must keep working: the thesis scenario in the
//! test world converges to 5 ready members in 2 racks with no data lost,
//! scales down one member at a time, replaces the member of a lost Node, and
//! leaves nothing running.

#[test]
fn demo_runs_the_thesis_scenario_and_leaves_nothing_running() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_demo"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "accepted by the schema, the CEL rules and validate()",
        "data check: clean",
        "converged: 5 members ready in 2 racks",
        "rack europe-west1-b scaled down to 1 member",
        "replace=",
        "now runs on Node",
        "stopped the operator, the members and kubesim",
    ] {
        assert!(stdout.contains(expected), "{expected:?} missing:\n{stdout}");
    }
    // members join one at a time: never two joining nodes in the ring
    for line in stdout.lines().filter(|l| l.contains("| ring: ")) {
        let ring = line.split("| ring: ").nth(1).unwrap_or_default();
        assert!(
            ring.matches("UJ").count() <= 1,
            "two members joined at once: {line}"
        );
        assert!(
            ring.matches("UL").count() <= 1,
            "two members left at once: {line}"
        );
    }

    // nothing of the demo's world survives it: no process still points at
    // its kubesim
    let url = stdout
        .lines()
        .find_map(|l| l.strip_prefix("== kubesim serving "))
        .and_then(|l| l.split_whitespace().next())
        .expect("the demo names its kubesim")
        .to_string();
    let needle = format!("KUBESIM_URL={url}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read(e.path().join("environ"))
                    .map(|env| String::from_utf8_lossy(&env).contains(&needle))
                    .unwrap_or(false)
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "processes left running: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
