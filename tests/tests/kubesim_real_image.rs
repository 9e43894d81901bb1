//! kubesim's real `cassandra:` image (issue 28): with
//! `SimOptions::real_cassandra`, a `cassandra:4.1.8` or `cassandra:5.0.3`
//! container sees the official image's file system laid out from the
//! fetched release (the
//! release's `bin/cassandra` first on `PATH`, Java at `JAVA_HOME`, the
//! directories owned by 999; Java 11 for 4.1 and 17 for 5.0, as the
//! official Dockerfiles copy temurin 11 and 17) and the image's
//! `JVM_EXTRA_OPTS` and other `ENV` of a derived image; the
//! operator image carries the real Jolokia agent at `/plugins` with
//! `init/Dockerfile`'s mode; 3.11 stays on the fake; a release that was
//! not fetched cannot start, and says how to fetch it.
//!
//! Needs `scripts/fetch-cassandra 4.1.8` and `5.0.3` (scripts/test runs
//! them).

use serde_json::{Value, json};
use std::time::Duration;
use testworld::harness::{fixtures, pods, str_at as s, until};
use testworld::kubesim::sim::{RealCassandra, SimOptions};
use testworld::kubesim::store::WriteOptions;
use testworld::kubesim::{KubeSim, Options};

/// A Pod of `image` whose container prints what the test checks, then
/// sleeps.
fn pod(name: &str, image: &str, script: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "securityContext": {"runAsUser": 999, "runAsGroup": 999},
            "containers": [{
                "name": "c", "image": image,
                "command": ["/bin/sh", "-c", format!("{script}; exec sleep 600")]
            }]
        }
    })
}

/// The log of a Pod's container once it holds `marker`.
async fn log_with(
    work: &std::path::Path,
    store: &testworld::kubesim::store::Store,
    name: &str,
) -> String {
    let p = until(&format!("{name} running"), 20, || {
        let p = store.get(&pods(), name).ok()?;
        p.pointer("/status/containerStatuses/0/state/running")
            .is_some()
            .then_some(p)
    })
    .await;
    let path = work
        .join("pods")
        .join(format!("default_{name}_{}", s(&p, "/metadata/uid")))
        .join("logs/c/0.log");
    until(&format!("{name}'s output"), 20, || {
        std::fs::read_to_string(&path)
            .ok()
            .filter(|l| l.contains("END"))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cassandra_4_1_and_5_0_containers_get_the_official_image_of_the_fetched_release() {
    let work = tempfile::tempdir().unwrap();
    let mut opts = SimOptions::new(work.path());
    opts.fixtures = Some(fixtures().unwrap());
    let fake = work.path().join("fake-cassandra");
    std::fs::write(&fake, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    opts.fake_cassandra = Some(fake.clone());
    opts.max_grace = Some(Duration::from_secs(1));
    let real = RealCassandra::cached("-Dcassandra.ring_delay_ms=1000")
        .with_env("SSTABLE_SCAN_SECONDS", "5");
    opts.real_cassandra = Some(real.clone());
    let operator_image = opts.operator_images[0].clone();
    let sim = KubeSim::start(Options {
        sim: Some(opts),
        ..Default::default()
    })
    .await
    .unwrap();
    let store = sim.store().clone();
    let create = |p: Value| store.create(&pods(), p, &WriteOptions::default()).unwrap();
    let report = "echo cassandra=$(command -v cassandra) java_home=$JAVA_HOME \
        home=$CASSANDRA_HOME conf=$CASSANDRA_CONF version=$CASSANDRA_VERSION \
        extra=\"$JVM_EXTRA_OPTS\" scan=$SSTABLE_SCAN_SECONDS; stat -c '%u:%g %a %n' /var/lib/cassandra /etc/cassandra; \
        $JAVA_HOME/bin/java -version 2>&1 | head -1; \
        cmp /opt/cassandra/bin/cassandra \"$FIXTURES/bin/cassandra\" && echo same-launcher; \
        ls /opt/cassandra/lib | grep -c '\\.jar$'; echo END";
    for (name, version, minor) in [("real", "4.1.8", "4.1"), ("real5", "5.0.3", "5.0")] {
        let fixtures = fixtures().unwrap().join("cassandra").join(minor);
        let mut real_pod = pod(name, &format!("cassandra:{version}"), report);
        real_pod["spec"]["containers"][0]["env"] =
            json!([{"name": "FIXTURES", "value": fixtures.display().to_string()}]);
        create(real_pod);
    }
    create(pod(
        "fake",
        "cassandra:3.11.6",
        "echo cassandra=$(readlink -f $(command -v cassandra)) java_home=$JAVA_HOME; echo END",
    ));
    create(pod(
        "operator",
        &format!("{operator_image}:test"),
        "stat -c '%a %s' /plugins/jolokia-jvm-agent.jar; echo plugins=$INSTALL_PLUGINS; echo END",
    ));
    create(pod("unfetched", "cassandra:4.1.99", "echo END"));

    for (name, version, java) in [("real", "4.1.8", "11."), ("real5", "5.0.3", "17.")] {
        let log = log_with(work.path(), &store, name).await;
        assert!(
            log.contains("cassandra=/opt/cassandra/bin/cassandra "),
            "{log}"
        );
        assert!(log.contains("java_home=/opt/java/openjdk "), "{log}");
        assert!(
            log.contains(&format!(
                "home=/opt/cassandra conf=/etc/cassandra version={version} "
            )),
            "{log}"
        );
        assert!(
            log.contains("extra=-Dcassandra.ring_delay_ms=1000 scan=5\n"),
            "{log}"
        );
        assert!(log.contains("999:999 1777 /var/lib/cassandra"), "{log}");
        assert!(log.contains("999:999 1777 /etc/cassandra"), "{log}");
        assert!(
            log.contains(&format!("version \"{java}")),
            "Java {java} runs {version}: {log}"
        );
        assert!(
            log.contains("same-launcher"),
            "the release's bin/cassandra: {log}"
        );
        let jars: usize = log
            .lines()
            .rev()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(0);
        assert!(jars > 50, "the release's lib/: {log}");
    }

    let log = log_with(work.path(), &store, "fake").await;
    assert!(
        log.contains(&format!("cassandra={} java_home=\n", fake.display())),
        "3.11 is the fake: {log}"
    );

    let log = log_with(work.path(), &store, "operator").await;
    let agent = std::fs::metadata(real.jolokia_agent()).unwrap().len();
    assert!(log.contains(&format!("444 {agent}\n")), "{log}");
    assert!(log.contains("plugins=/plugins\n"), "{log}");

    let waiting = until("the unfetched release refused", 20, || {
        let p = store.get(&pods(), "unfetched").ok()?;
        let w = p
            .pointer("/status/containerStatuses/0/state/waiting")?
            .clone();
        (w["reason"] == "CreateContainerError").then_some(w)
    })
    .await;
    assert!(
        s(&waiting, "/message").contains("run `scripts/fetch-cassandra 4.1.99`"),
        "{waiting}"
    );
}
