//! A rack's overrides written for Cassandra 3.11, on real Cassandra 4.1
//! (issue 28): 4.1 renamed many settings and removed Thrift's, and refuses
//! to start on a cassandra.yaml that holds an old and a new name of one
//! setting, or a removed one. The sidecar keeps a renamed setting's old
//! name and drops the default file's new one (Cassandra converts the old
//! value itself), and the controller and the sidecar refuse a removed
//! setting by name, so no member is ever started on a file it refuses.
//!
//! Needs `scripts/fetch-cassandra 4.1.8` (scripts/test runs it).

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::real::{member, real_cluster, real_nodetool, real_world};
use crate::scenario::{overrides, secs};

/// A 3.11 user's tuning: renamed settings under their old names, with
/// values other than 4.1's defaults (read timeout 5 s, compaction
/// 64 MiB/s).
const TUNING_3_11: &str =
    "read_request_timeout_in_ms: 12000\ncompaction_throughput_mb_per_sec: 7\n";

/// A member of real 4.1 starts on a fragment written for 3.11 and runs
/// with its values (read through Cassandra's own nodetool). The same
/// ConfigMap with `start_rpc` (Thrift's, which 4.0 removed) is refused as
/// soon as it is written: the rack's condition and a Warning Event name
/// the key, the scale-up waits and the running member keeps running; once
/// the key is gone the new member starts on the 3.11 names too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_4_1_members_start_on_3_11_names_and_a_removed_setting_is_refused_by_name() {
    let _real = crate::common::ONE_REAL_WORLD.lock().await;
    let scenario = real_world().await;
    let configmaps: Api<ConfigMap> = scenario.api();
    configmaps
        .create(&PostParams::default(), &overrides("tuning", TUNING_3_11))
        .await
        .unwrap();
    let tuned = |members: i32| real_cluster(members).with_rack(json!({"configMapName": "tuning"}));
    scenario.create(tuned(1)).await;
    scenario.until_ready("c", 1, secs(300)).await;
    let timeout = real_nodetool(&scenario, &member(0), &["gettimeout", "read"])
        .await
        .unwrap();
    assert!(timeout.contains("12000 ms"), "{timeout}");
    let throughput = real_nodetool(&scenario, &member(0), &["getcompactionthroughput"])
        .await
        .unwrap();
    assert!(throughput.contains(": 7 "), "{throughput}");

    configmaps
        .replace(
            "tuning",
            &PostParams::default(),
            &overrides("tuning", &format!("{TUNING_3_11}start_rpc: false\n")),
        )
        .await
        .unwrap();
    scenario.patch_cluster("c", tuned(2).racks_patch()).await;
    let named = "ConfigMap \"tuning\": key cassandra.yaml sets start_rpc, which the operator \
                 refuses: Cassandra 4.0 removed it with Thrift";
    scenario
        .until_overrides_refused("c", "r", named, secs(60))
        .await;
    // The refusal was judged on the scale-up's generation: after it,
    // nothing was started.
    scenario.until_observed("c", secs(60)).await;
    let pods: Api<Pod> = scenario.api();
    assert!(
        pods.get_opt(&member(1)).await.unwrap().is_none(),
        "a member was started on a file 4.1 refuses"
    );
    assert!(
        crate::scenario::pod_ready(&scenario.pod(&member(0)).await),
        "the running member keeps running"
    );

    configmaps
        .replace(
            "tuning",
            &PostParams::default(),
            &overrides("tuning", TUNING_3_11),
        )
        .await
        .unwrap();
    scenario.until_ready("c", 2, secs(300)).await;
    let timeout = real_nodetool(&scenario, &member(1), &["gettimeout", "read"])
        .await
        .unwrap();
    assert!(timeout.contains("12000 ms"), "{timeout}");
}
