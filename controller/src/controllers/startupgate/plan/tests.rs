use super::*;
use nodeimage_api::gate::{DEFAULT_TAINT_KEY, STARTUP_GATE};

const A: &str = "docker.io/library/a:1";
const B: &str =
    "registry.example/b@sha256:0000000000000000000000000000000000000000000000000000000000000000";

fn t(s: &str) -> DateTime<Utc> {
    s.parse().expect("a time")
}

fn settings() -> Settings {
    Settings {
        taint: DEFAULT_TAINT_KEY.into(),
        timeout: TimeDelta::minutes(10),
    }
}

/// A NodeImage with `note` as its gate annotation and `a:1` reported as `phase`.
fn ni(note: Option<&str>, phase: &str) -> NodeImage {
    let annotations: std::collections::BTreeMap<&str, &str> =
        note.map(|n| (STARTUP_GATE, n)).into_iter().collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
        "metadata": {"name": "n1", "annotations": annotations},
        "spec": {},
        "status": {"desired": 1, "imageStatuses": {"a": {"tags": [{"tag": "1", "phase": phase}]}}}
    }))
    .expect("a NodeImage")
}

fn note(images: &[&str]) -> GateNote {
    GateNote {
        taint: DEFAULT_TAINT_KEY.into(),
        images: images.iter().map(|s| s.to_string()).collect(),
        deadline: "2026-01-01T00:10:00Z".into(),
    }
}

fn images(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn decisions_table() {
    let created = Some(t("2026-01-01T00:00:00Z"));
    let current = note(&[A, B]).to_annotation();
    let stale = note(&[A]).to_annotation();
    let with_current = ni(Some(&current), "Pulling");
    let with_stale = ni(Some(&stale), "Pulling");
    let with_bad = ni(Some("{not json"), "Pulling");
    let without = ni(None, "Succeeded");
    let gated = |write: Option<GateNote>, secs: u64| Decision::Gated {
        write,
        look_again: Duration::from_secs(secs),
    };
    // Without a NodeImage the images cannot be told (None).
    let cases: Vec<(&str, bool, Option<&NodeImage>, &[&str], &str, Decision)> = vec![
        (
            "untainted, nothing left",
            false,
            Some(&without),
            &[A],
            "2026-01-01T00:01:00Z",
            Decision::Idle,
        ),
        (
            "untainted, note left",
            false,
            Some(&with_current),
            &[A],
            "2026-01-01T00:01:00Z",
            Decision::ClearNote,
        ),
        (
            "untainted, no NodeImage",
            false,
            None,
            &[A],
            "2026-01-01T00:01:00Z",
            Decision::Idle,
        ),
        (
            "no gating image: open at once",
            true,
            Some(&without),
            &[],
            "2026-01-01T00:00:01Z",
            Decision::Open {
                reason: Reason::NoGatingImages,
                missing: vec![],
            },
        ),
        (
            "no NodeImage yet",
            true,
            None,
            &[A],
            "2026-01-01T00:01:00Z",
            Decision::WaitForNodeImage(Duration::from_secs(1)),
        ),
        (
            "first look writes the note",
            true,
            Some(&without),
            &[A, B],
            "2026-01-01T00:01:00Z",
            gated(Some(note(&[A, B])), 10),
        ),
        (
            "note current: no write",
            true,
            Some(&with_current),
            &[A, B],
            "2026-01-01T00:01:00Z",
            gated(None, 10),
        ),
        (
            "images changed: rewrite",
            true,
            Some(&with_stale),
            &[A, B],
            "2026-01-01T00:01:00Z",
            gated(Some(note(&[A, B])), 10),
        ),
        (
            "bad note: rewrite",
            true,
            Some(&with_bad),
            &[A, B],
            "2026-01-01T00:01:00Z",
            gated(Some(note(&[A, B])), 10),
        ),
        (
            "close to the bound: look at it",
            true,
            Some(&with_current),
            &[A, B],
            "2026-01-01T00:09:57Z",
            gated(None, 3),
        ),
        (
            "bound passed: open, naming what is missing",
            true,
            Some(&with_current),
            &[A, B],
            "2026-01-01T00:10:00Z",
            Decision::Open {
                reason: Reason::Timeout,
                missing: vec![A.into(), B.into()],
            },
        ),
        (
            "bound passed: pulled images are not missing",
            true,
            Some(&without),
            &[A, B],
            "2026-01-01T00:11:00Z",
            Decision::Open {
                reason: Reason::Timeout,
                missing: vec![B.into()],
            },
        ),
        (
            "bound passed without a NodeImage",
            true,
            None,
            &[A],
            "2026-01-01T00:11:00Z",
            Decision::Open {
                reason: Reason::Timeout,
                missing: vec![],
            },
        ),
    ];
    for (name, tainted, nodeimage, list, now, want) in cases {
        let known = nodeimage.map(|_| images(list));
        let snap = Snapshot {
            tainted,
            created,
            nodeimage,
            images: known,
        };
        assert_eq!(decide(&snap, &settings(), t(now)), want, "{name}");
    }
}

#[test]
fn a_node_without_creation_time_is_past_its_bound() {
    let snap = Snapshot {
        tainted: true,
        created: None,
        nodeimage: None,
        images: None,
    };
    assert!(matches!(
        decide(&snap, &settings(), t("2026-01-01T00:00:00Z")),
        Decision::Open {
            reason: Reason::Timeout,
            ..
        }
    ));
}
