//! The harness's write hooks on the real controller: crashed right after
//! its StatefulSet create commits (it never sees the response), a
//! restarted controller takes over from what is stored and brings the
//! member up; frozen after a write, it resumes where it stopped.

use std::os::unix::process::ExitStatusExt;

use k8s_openapi::api::apps::v1::StatefulSet;
use testworld::harness::{operator_user, tail};
use testworld::kubesim::faults::{ProcessAction, WriteHook};

use crate::scenario::{Scenario, cluster, secs, setup, until};

/// `action` on the running controller right after its first write `verb`
/// of `resource` (named `name`, or any) has committed.
fn on_controller_write(
    s: &mut Scenario,
    verb: &str,
    resource: &str,
    name: Option<&str>,
    action: ProcessAction,
) {
    let pid = s.controller().0.id();
    s.sim().on_write(WriteHook {
        pid,
        verb: verb.into(),
        resource: resource.into(),
        name: name.map(str::to_string),
        user: Some(operator_user()),
        contains: None,
        nth: 1,
        action,
    });
}

/// The state letter of a host process (`/proc/<pid>/stat`: `T` stopped).
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_crashed_after_a_write_is_taken_over_by_the_next() {
    // A world of its own: one at a time, as every fake world (common.rs).
    let _one = crate::common::FAKE_WORLDS.lock().await;
    // Off the production metrics port: no need to wait for the other worlds.
    let metrics = "127.0.0.1:0";
    let mut s = setup().metrics(metrics).start().await;
    on_controller_write(&mut s, "create", "statefulsets", None, ProcessAction::Kill);

    s.create(&cluster("c").version("3.11.6").rack("r", 1)).await;
    let status = until("the first controller's crash", secs(30), || {
        std::future::ready(s.controller().exited())
    })
    .await;
    assert_eq!(status.signal(), Some(9), "{}", tail(&s.log));
    let sts = s.api::<StatefulSet>();
    let stored = sts
        .get("c-dc-r")
        .await
        .expect("the write committed before the crash");
    assert_eq!(
        stored.spec.unwrap().replicas,
        Some(0),
        "created with 0 replicas"
    );

    // The next controller, frozen after its first scale-up write for a while.
    s.start_controller_with(Some(metrics), &[]);
    on_controller_write(
        &mut s,
        "patch",
        "statefulsets",
        Some("c-dc-r"),
        ProcessAction::Freeze,
    );
    let pid = s.controller().0.id();
    let stopped = || process_state(pid) == Some('T');
    s.until(
        "the second controller frozen after its patch",
        secs(60),
        || std::future::ready(stopped()),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(stopped(), "still frozen");
    s.controller().resume();
    s.until_ready("c", 1, secs(90)).await;
    let statefulsets = sts.list(&Default::default()).await.unwrap().items;
    assert_eq!(statefulsets.len(), 1, "no duplicate after the crash");
}
