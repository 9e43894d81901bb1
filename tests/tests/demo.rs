//! The README's first command must keep working: the demo converges the
//! thesis scenario to 5 ready members in 2 racks, one member at a time.

#[test]
fn demo_converges_the_thesis_scenario() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_demo"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("converged: 5 members ready in 2 racks"),
        "{stdout}"
    );
    // every member's Service is created before the scale-up that starts it
    for (service, scale) in [
        (
            "cassandra-europe-west1-europe-west1-b-0 (seed)",
            "europe-west1-b: 0 -> 1",
        ),
        (
            "cassandra-europe-west1-europe-west1-b-2\n",
            "europe-west1-b: 2 -> 3",
        ),
        (
            "cassandra-europe-west1-europe-west1-c-1 (seed)",
            "europe-west1-c: 1 -> 2",
        ),
    ] {
        let s = stdout
            .find(service)
            .unwrap_or_else(|| panic!("{service} missing:\n{stdout}"));
        let u = stdout
            .find(scale)
            .unwrap_or_else(|| panic!("{scale} missing:\n{stdout}"));
        assert!(s < u, "{service} must come before {scale}");
    }
}
