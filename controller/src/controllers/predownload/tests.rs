//! The shell against a scripted API server: pre-download is woken by a Pod
//! of its workload, not by a recheck.

use super::*;
use crate::cluster::watch::Synced;
use crate::engine::jobshell::scripted::{Reply, Script};
use k8s_openapi::api::apps::v1::DeploymentSpec;
use k8s_openapi::api::core::v1::{
    Container, LocalObjectReference, PodCondition, PodSpec, PodStatus, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use nodeimage_api::kruise::imagepulljob::ImagePullJobSpec;
use tokio::sync::mpsc;

const NS: &str = "team";

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([("app".to_string(), "web".to_string())])
}

/// A Deployment asking for pre-download of `reg/app:v2`, with a pull
/// secret of its own (so no ServiceAccount is read).
fn deployment() -> Deployment {
    let spec = PodSpec {
        containers: vec![Container {
            name: "app".into(),
            image: Some("reg/app:v2".into()),
            ..Default::default()
        }],
        image_pull_secrets: Some(vec![LocalObjectReference {
            name: "regcred".into(),
        }]),
        ..Default::default()
    };
    Deployment {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some(NS.into()),
            uid: Some("uid-web".into()),
            annotations: Some(BTreeMap::from([(
                names::ENABLED.to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(2),
            selector: LabelSelector {
                match_labels: Some(labels()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels()),
                    ..Default::default()
                }),
                spec: Some(spec),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// A ready Pod of the workload on node `n1`, still running the old image.
fn old_pod() -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web-old-1".into()),
            namespace: Some(NS.into()),
            labels: Some(labels()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("n1".into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some("reg/app:v1".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// A store that has listed `objects`, and its writer.
fn listed<K>(objects: Vec<K>) -> (Store<K>, reflector::store::Writer<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, mut writer) = reflector::store::<K>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    (store, writer)
}

fn subscription<K>(store: Store<K>, events: mpsc::Receiver<watcher::Event<K>>) -> Subscription<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    Subscription {
        store,
        synced: Synced::done(),
        undecodable: None,
        events,
    }
}

fn job_creations(script: &Script) -> usize {
    let path = format!("/apis/apps.kruise.io/v1alpha1/namespaces/{NS}/imagepulljobs");
    script
        .seen()
        .iter()
        .filter(|s| s.method == "POST" && s.path == path)
        .count()
}

#[tokio::test]
async fn a_pod_of_the_workload_makes_its_job_within_a_second() {
    let created = ImagePullJob::new(
        "made",
        ImagePullJobSpec {
            image: "reg/app:v2".into(),
            template: Default::default(),
        },
    );
    let (ctx, _nodeimages, script) = Script::context(vec![Reply(201, {
        let mut v = serde_json::to_value(&created).unwrap_or_default();
        v["metadata"]["namespace"] = NS.into();
        v
    })]);
    let d = deployment();
    let (workloads, _w) = listed(vec![d.clone()]);
    let (pods, mut pod_writer) = listed::<Pod>(vec![]);
    let (jobs, _j) = listed::<ImagePullJob>(vec![]);
    let (nodes, _n) = listed::<Node>(vec![]);
    let (pod_tx, pod_rx) = mpsc::channel(8);
    let (_job_tx, job_rx) = mpsc::channel(8);
    let feed = Feed {
        pods: subscription(pods, pod_rx),
        jobs: subscription(jobs, job_rx),
    };
    // The workload once, then a watch that stays open.
    let trigger = futures::stream::iter([Ok(d)]).chain(futures::stream::pending());
    let (stop_tx, stop) = signal::channel(false);
    let running = tokio::spawn(follow(ctx, stop, nodes, feed, workloads, trigger));

    // No Pod yet: nothing is pending, the reconcile waits for a change
    // (no recheck is scheduled).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(job_creations(&script), 0, "seen: {:?}", script.seen());

    // A Pod of the workload appears with the old image, as the shared cache
    // delivers it: in the store first, then the event.
    let pod = old_pod();
    pod_writer.apply_watcher_event(&watcher::Event::Apply(pod.clone()));
    let sent = pod_tx.send(watcher::Event::Apply(pod)).await;
    assert!(sent.is_ok(), "the pod feed is read");
    let made = tokio::time::timeout(Duration::from_secs(1), async {
        while job_creations(&script) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        made.is_ok(),
        "no job within a second of the Pod; seen: {:?}",
        script.seen()
    );
    let body = script
        .seen()
        .into_iter()
        .find(|s| s.method == "POST" && s.path.ends_with("/imagepulljobs"))
        .map(|s| s.body)
        .unwrap_or_default();
    assert_eq!(body["spec"]["image"], "reg/app:v2");
    assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "uid-web");
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), running).await;
}
