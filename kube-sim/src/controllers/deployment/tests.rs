//! Deployment controller tests: rollouts, rollbacks by template, progress deadlines.

use super::*;

fn ts(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

fn deployment(replicas: i64, image: &str, strategy: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "uid": "dep-uid", "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "web", "image": image}]}},
            "strategy": strategy,
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        },
        "status": {}
    })
}

fn rolling(surge: Value, unavailable: Value) -> Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
}

/// A tiny world: ReplicaSets whose pods become available one sync after they are asked for.
struct World {
    dep: Value,
    sets: Vec<Value>,
    now: jiff::Timestamp,
    uid: u32,
}

impl World {
    fn new(dep: Value) -> Self {
        Self {
            dep,
            sets: Vec::new(),
            now: ts("2026-11-30T08:00:00Z"),
            uid: 0,
        }
    }

    fn sync(&mut self) -> DeploymentSync {
        let out = reconcile(&self.dep, &self.sets, self.now);
        if let Some(rev) = &out.revision {
            self.dep["metadata"]["annotations"] = json!({ REVISION: rev });
        }
        if let Some(mut rs) = out.create.clone() {
            self.uid += 1;
            rs["metadata"]["uid"] = json!(format!("rs-{}", self.uid));
            rs["metadata"]["creationTimestamp"] =
                json!(format!("2026-11-30T08:00:{:02}Z", self.uid));
            rs["status"] = json!({"replicas": 0});
            self.sets.push(rs);
        }
        for updated in &out.update {
            let slot = self
                .sets
                .iter_mut()
                .find(|rs| meta::name(rs) == meta::name(updated))
                .unwrap();
            let status = slot["status"].clone();
            *slot = updated.clone();
            slot["status"] = status;
        }
        self.sets
            .retain(|rs| !out.delete.iter().any(|d| d == meta::name(rs)));
        self.dep["status"] = out.status.clone();
        out
    }

    /// Pods follow spec: scale-down is immediate, new pods are created now and become
    /// available on the next call (when `healthy`).
    fn pods_step(&mut self, healthy_image: &dyn Fn(&str) -> bool) {
        for rs in &mut self.sets {
            let want = meta::spec_replicas(rs);
            let have = meta::status_i64(rs, "replicas");
            let image = rs["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap()
                .to_string();
            let available = if healthy_image(&image) {
                have.min(want)
            } else {
                0
            };
            rs["status"] = json!({"replicas": want, "readyReplicas": available, "availableReplicas": available});
        }
    }

    fn total_pods(&self) -> i64 {
        self.sets
            .iter()
            .map(|rs| meta::status_i64(rs, "replicas"))
            .sum()
    }

    fn available(&self) -> i64 {
        self.sets
            .iter()
            .map(|rs| meta::status_i64(rs, "availableReplicas"))
            .sum()
    }

    fn condition(&self, kind: &str) -> Value {
        find_condition(self.dep["status"]["conditions"].as_array().unwrap(), kind)
            .cloned()
            .unwrap_or(Value::Null)
    }
}

#[test]
fn first_sync_creates_the_replica_set_with_the_recorded_shape() {
    let mut world = World::new(deployment(
        2,
        "example/web:v1",
        rolling(json!("25%"), json!("25%")),
    ));
    let out = world.sync();
    let rs = out.create.expect("a new ReplicaSet");
    let hash = meta::label(&rs, HASH_LABEL).unwrap().to_string();
    assert_eq!(meta::name(&rs), format!("web-{hash}"));
    assert_eq!(rs["spec"]["replicas"], 2);
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"],
        json!({"app": "web", "pod-template-hash": hash})
    );
    assert_eq!(
        rs["spec"]["template"]["metadata"]["labels"][HASH_LABEL],
        json!(hash)
    );
    assert_eq!(
        rs["metadata"]["annotations"],
        json!({DESIRED_REPLICAS: "2", MAX_REPLICAS: "3", REVISION: "1"})
    );
    assert_eq!(rs["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        rs["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
        true
    );
    assert_eq!(out.revision.as_deref(), Some("1"));
    let early = out
        .early_status
        .expect("NewReplicaSetCreated is written first");
    assert_eq!(early["conditions"][0]["reason"], "NewReplicaSetCreated");
    assert_eq!(
        early["conditions"][0]["message"],
        format!("Created new replica set \"web-{hash}\"")
    );
    assert_eq!(
        out.events[0].message,
        format!("Scaled up replica set web-{hash} from 0 to 2")
    );
    // The full status right after: no pods yet.
    assert_eq!(out.status["observedGeneration"], 1);
    assert_eq!(out.status["unavailableReplicas"], 2);
    assert_eq!(out.status["terminatingReplicas"], 0);
    assert!(
        out.status.get("replicas").is_none(),
        "zero counts are omitted"
    );
    assert_eq!(
        world.condition("Available")["reason"],
        "MinimumReplicasUnavailable"
    );
    assert_eq!(
        world.condition("Progressing")["reason"],
        "NewReplicaSetCreated"
    );
}

#[test]
fn rollout_completes_with_recorded_conditions() {
    let mut world = World::new(deployment(
        2,
        "example/web:v1",
        rolling(json!("25%"), json!("25%")),
    ));
    world.sync();
    world.pods_step(&|_| true);
    world.sync();
    assert_eq!(
        world.condition("Progressing")["reason"],
        "ReplicaSetUpdated"
    );
    world.pods_step(&|_| true);
    world.sync();
    let status = &world.dep["status"];
    assert_eq!(status["replicas"], 2);
    assert_eq!(status["updatedReplicas"], 2);
    assert_eq!(status["readyReplicas"], 2);
    assert_eq!(status["availableReplicas"], 2);
    assert!(status.get("unavailableReplicas").is_none());
    assert_eq!(
        world.condition("Available")["message"],
        "Deployment has minimum availability."
    );
    let hash = meta::label(&world.sets[0], HASH_LABEL).unwrap();
    assert_eq!(
        world.condition("Progressing")["message"],
        format!("ReplicaSet \"web-{hash}\" has successfully progressed.")
    );
    // Steady state: another sync changes nothing.
    let out = world.sync();
    assert!(out.create.is_none() && out.update.is_empty() && out.early_status.is_none());
    assert_eq!(out.status, world.dep["status"]);
}

#[test]
fn rolling_update_respects_surge_and_unavailable() {
    let cases = [
        (4, json!("25%"), json!("25%")),
        (10, json!("25%"), json!("25%")),
        (3, json!(1), json!(0)),
        (3, json!(0), json!(1)),
        (5, json!("50%"), json!("50%")),
        (1, json!("25%"), json!("25%")),
    ];
    for (replicas, surge, unavailable) in cases {
        let dep = deployment(
            replicas,
            "example/web:v1",
            rolling(surge.clone(), unavailable.clone()),
        );
        let (max_surge, max_unavailable) = fenceposts(&dep);
        let mut world = World::new(dep);
        for _ in 0..10 {
            world.sync();
            world.pods_step(&|_| true);
        }
        assert_eq!(world.available(), replicas);
        world.dep["spec"]["template"]["spec"]["containers"][0]["image"] = json!("example/web:v2");
        world.dep["metadata"]["generation"] = json!(2);
        for step in 0..40 {
            world.sync();
            world.pods_step(&|_| true);
            assert!(
                world.total_pods() <= replicas + max_surge,
                "{replicas} {surge} {unavailable} step {step}: {} pods",
                world.total_pods()
            );
            assert!(
                world.available() >= replicas - max_unavailable,
                "{replicas} {surge} {unavailable} step {step}: {} available",
                world.available()
            );
        }
        let status = &world.dep["status"];
        assert_eq!(
            status["updatedReplicas"], replicas,
            "{replicas} {surge} {unavailable}"
        );
        assert_eq!(status["replicas"], replicas);
        assert_eq!(
            world.condition("Progressing")["reason"],
            "NewReplicaSetAvailable"
        );
        assert_eq!(world.dep["metadata"]["annotations"][REVISION], "2");
        let old = world
            .sets
            .iter()
            .find(|rs| annotation(rs, REVISION) == Some("1"))
            .unwrap();
        assert_eq!(old["spec"]["replicas"], 0);
    }
}

#[test]
fn broken_image_does_not_take_down_old_pods_and_times_out() {
    let mut dep = deployment(4, "example/web:v1", rolling(json!("25%"), json!("25%")));
    dep["spec"]["progressDeadlineSeconds"] = json!(30);
    let mut world = World::new(dep);
    for _ in 0..5 {
        world.sync();
        world.pods_step(&|_| true);
    }
    world.dep["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("example/doesnotexist:v2");
    world.dep["metadata"]["generation"] = json!(2);
    let good = |image: &str| !image.contains("doesnotexist");
    for _ in 0..5 {
        world.sync();
        world.pods_step(&good);
        assert!(world.available() >= 3);
    }
    assert_eq!(world.condition("Progressing")["status"], "True");
    let out = world.sync();
    let wait = out.requeue_after.expect("a deadline check is scheduled");
    assert!(
        wait <= Duration::from_secs(31) && wait > Duration::from_secs(20),
        "{wait:?}"
    );
    world.now = meta::add(world.now, Duration::from_secs(32));
    world.sync();
    let cond = world.condition("Progressing");
    assert_eq!(cond["status"], "False");
    assert_eq!(cond["reason"], "ProgressDeadlineExceeded");
    assert!(
        cond["message"]
            .as_str()
            .unwrap()
            .ends_with("has timed out progressing.")
    );
    // Stays timed out, no more requeues.
    let out = world.sync();
    assert_eq!(
        world.condition("Progressing")["reason"],
        "ProgressDeadlineExceeded"
    );
    assert!(out.requeue_after.is_none());
}

#[test]
fn rollback_reuses_the_old_replica_set_with_a_new_revision() {
    let mut world = World::new(deployment(
        2,
        "example/web:v1",
        rolling(json!("25%"), json!("25%")),
    ));
    for _ in 0..5 {
        world.sync();
        world.pods_step(&|_| true);
    }
    let first = meta::name(&world.sets[0]).to_string();
    world.dep["spec"]["template"]["spec"]["containers"][0]["image"] = json!("example/web:v2");
    for _ in 0..8 {
        world.sync();
        world.pods_step(&|_| true);
    }
    assert_eq!(world.sets.len(), 2);
    world.dep["spec"]["template"]["spec"]["containers"][0]["image"] = json!("example/web:v1");
    for _ in 0..8 {
        world.sync();
        world.pods_step(&|_| true);
    }
    assert_eq!(world.sets.len(), 2, "no third ReplicaSet");
    let reused = world
        .sets
        .iter()
        .find(|rs| meta::name(rs) == first)
        .unwrap();
    assert_eq!(annotation(reused, REVISION), Some("3"));
    assert_eq!(reused["spec"]["replicas"], 2);
    assert_eq!(world.dep["metadata"]["annotations"][REVISION], "3");
}

#[test]
fn recreate_scales_old_to_zero_before_creating_new() {
    let mut world = World::new(deployment(3, "example/web:v1", json!({"type": "Recreate"})));
    for _ in 0..4 {
        world.sync();
        world.pods_step(&|_| true);
    }
    world.dep["spec"]["template"]["spec"]["containers"][0]["image"] = json!("example/web:v2");
    let out = world.sync();
    assert!(out.create.is_none(), "old pods must go first");
    assert_eq!(world.sets[0]["spec"]["replicas"], 0);
    world.pods_step(&|_| true);
    let out = world.sync();
    assert_eq!(out.create.unwrap()["spec"]["replicas"], 3);
}

#[test]
fn history_limit_deletes_oldest_idle_sets() {
    let mut dep = deployment(1, "img:0", rolling(json!(1), json!(0)));
    dep["spec"]["revisionHistoryLimit"] = json!(2);
    let mut world = World::new(dep);
    for version in 1..=5 {
        world.dep["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!(format!("img:{version}"));
        for _ in 0..6 {
            world.sync();
            world.pods_step(&|_| true);
        }
    }
    assert_eq!(world.sets.len(), 3, "new one plus two old");
    let mut revisions: Vec<i64> = world.sets.iter().map(revision_of).collect();
    revisions.sort();
    assert_eq!(revisions, [3, 4, 5]);
}

#[test]
fn paused_deployments_are_not_rolled() {
    let mut world = World::new(deployment(
        2,
        "example/web:v1",
        rolling(json!("25%"), json!("25%")),
    ));
    for _ in 0..4 {
        world.sync();
        world.pods_step(&|_| true);
    }
    world.dep["spec"]["paused"] = json!(true);
    world.dep["spec"]["template"]["spec"]["containers"][0]["image"] = json!("example/web:v2");
    let out = world.sync();
    assert!(out.create.is_none() && out.update.is_empty());
    assert_eq!(world.condition("Progressing")["reason"], "DeploymentPaused");
}
