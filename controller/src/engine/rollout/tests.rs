use super::*;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use nodeimage_api::interned::SharedStr;
use nodeimage_api::kruise::{
    ImageSpec, ImageStatus, ImageTagSpec, ImageTagStatus, NodeImageSpec, NodeImageStatus,
};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

#[test]
fn selector_table() {
    let node = labels(&[("zone", "a"), ("type", "gpu")]);
    let sel = |ml: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>| LabelSelector {
        match_labels: (!ml.is_empty()).then(|| labels(ml)),
        match_expressions: (!exprs.is_empty()).then_some(exprs),
    };
    let cases: Vec<(LabelSelector, bool)> = vec![
        (sel(&[], vec![]), true),
        (sel(&[("zone", "a")], vec![]), true),
        (sel(&[("zone", "b")], vec![]), false),
        (sel(&[], vec![req("zone", "In", &["a", "b"])]), true),
        (sel(&[], vec![req("zone", "In", &["c"])]), false),
        (sel(&[], vec![req("zone", "NotIn", &["c"])]), true),
        (sel(&[], vec![req("missing", "NotIn", &["c"])]), true),
        (sel(&[], vec![req("type", "Exists", &[])]), true),
        (sel(&[], vec![req("type", "DoesNotExist", &[])]), false),
        (sel(&[], vec![req("missing", "DoesNotExist", &[])]), true),
    ];
    for (ls, want) in cases {
        assert_eq!(
            selector(ls.clone()).map(|s| s.matches(&node)),
            Ok(want),
            "{ls:?}"
        );
    }
    assert!(selector(sel(&[], vec![req("zone", "Near", &[])])).is_err());
}

fn ni(
    entries: &[(&str, &str, &[&str], i64)],
    status: &[(&str, &str, i64, ImagePullPhase, &str)],
) -> NodeImage {
    let mut images: BTreeMap<SharedStr, ImageSpec> = BTreeMap::new();
    for (image, tag, owners, version) in entries {
        images
            .entry(image.to_string().into())
            .or_default()
            .tags
            .push(ImageTagSpec {
                tag: tag.to_string().into(),
                version: Some(*version),
                owner_references: Some(
                    owners
                        .iter()
                        .map(|u| ObjectReference {
                            uid: Some(u.to_string()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                created_at: Some(crate::runtime::clock::api_time(
                    DateTime::from_timestamp(100, 0).unwrap_or_default(),
                )),
                ..Default::default()
            });
    }
    let mut statuses: BTreeMap<SharedStr, ImageStatus> = BTreeMap::new();
    for (image, tag, version, phase, msg) in status {
        statuses
            .entry(image.to_string().into())
            .or_default()
            .tags
            .push(ImageTagStatus {
                tag: tag.to_string().into(),
                version: Some(*version),
                phase: *phase,
                message: (!msg.is_empty()).then(|| (*msg).into()),
                ..Default::default()
            });
    }
    let mut obj = NodeImage::new(
        "n",
        NodeImageSpec {
            images: Some(images),
            removals: None,
        },
    );
    obj.status = Some(NodeImageStatus {
        image_statuses: Some(statuses),
        ..Default::default()
    });
    obj
}

fn entry(i: &str, t: &str) -> Entry {
    Entry {
        image: i.into(),
        tag: t.into(),
        purpose: nodeimage_api::kruise::Purpose::Pull,
    }
}

#[test]
fn entries_normalise_like_openkruise() {
    let d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let cases = [
        ("nginx", "nginx", "latest"),
        ("nginx:1.9.1", "nginx", "1.9.1"),
        ("docker.io/library/nginx:1", "nginx", "1"),
        ("127.0.0.1:5000/big:v1", "127.0.0.1:5000/big", "v1"),
    ];
    for (input, image, tag) in cases {
        assert_eq!(
            entry_for(input),
            Ok(Entry {
                image: image.into(),
                tag: tag.into(),
                purpose: nodeimage_api::kruise::Purpose::Pull
            }),
            "{input}"
        );
    }
    assert_eq!(
        entry_for(&format!("app@{d}")).map(|e| e.tag),
        Ok(d.to_string())
    );
    assert!(entry_for("Bad!").is_err());
}

#[test]
fn entry_state_table() {
    use ImagePullPhase::*;
    let since = Some(DateTime::from_timestamp(100, 0).unwrap_or_default());
    let cases: Vec<(NodeImage, EntryState)> = vec![
        (ni(&[], &[]), EntryState::Missing),
        (ni(&[("a", "1", &["other"], 0)], &[]), EntryState::Missing),
        (
            ni(&[("a", "1", &["me"], 0)], &[]),
            EntryState::Active(since),
        ),
        (
            ni(
                &[("a", "1", &["me", "other"], 1)],
                &[("a", "1", 0, Succeeded, "")],
            ),
            EntryState::Active(since),
        ),
        (
            ni(&[("a", "1", &["me"], 1)], &[("a", "1", 1, Pulling, "")]),
            EntryState::Active(since),
        ),
        (
            ni(&[("a", "1", &["me"], 1)], &[("a", "1", 1, Succeeded, "")]),
            EntryState::Succeeded,
        ),
        (
            ni(
                &[("a", "1", &["me"], 0)],
                &[("a", "1", 0, Failed, "401 Unauthorized")],
            ),
            EntryState::Failed("401 Unauthorized".into()),
        ),
    ];
    for (obj, want) in cases {
        assert_eq!(
            entry_states(&obj, &[entry("a", "1")], "me"),
            vec![want.clone()],
            "{want:?}"
        );
    }
}

#[test]
fn node_state_combines_entries() {
    let t = Some(DateTime::from_timestamp(5, 0).unwrap_or_default());
    let t2 = Some(DateTime::from_timestamp(9, 0).unwrap_or_default());
    let (a, b) = (entry("a", "1"), entry("b", "1"));
    let cases: Vec<(Vec<(Entry, EntryState)>, NodeState)> = vec![
        (vec![], NodeState::NotStarted),
        (
            vec![
                (a.clone(), EntryState::Succeeded),
                (b.clone(), EntryState::Missing),
            ],
            NodeState::NotStarted,
        ),
        (
            vec![
                (a.clone(), EntryState::Active(t2)),
                (b.clone(), EntryState::Active(t)),
            ],
            NodeState::Active(t),
        ),
        (
            vec![
                (a.clone(), EntryState::Failed("x".into())),
                (b.clone(), EntryState::Active(t)),
            ],
            NodeState::Active(t),
        ),
        (
            vec![
                (a.clone(), EntryState::Succeeded),
                (b.clone(), EntryState::Succeeded),
            ],
            NodeState::Succeeded,
        ),
        (
            vec![
                (a.clone(), EntryState::Failed("x".into())),
                (b.clone(), EntryState::Succeeded),
            ],
            NodeState::Failed("a:1: x".into()),
        ),
        (
            vec![(a.clone(), EntryState::Failed("x".into()))],
            NodeState::Failed("x".into()),
        ),
    ];
    for (entries, want) in cases {
        assert_eq!(node_state(&entries), want, "{entries:?}");
    }
}

#[test]
fn budget_fills_free_slots_in_order() {
    let s = |n: &str, st: NodeState| (n.to_string(), st);
    let active = NodeState::Active(None);
    let nodes = vec![
        s("a", NodeState::Succeeded),
        s("b", active.clone()),
        s("c", NodeState::NotStarted),
        s("d", NodeState::NotStarted),
        s("e", NodeState::NotStarted),
    ];
    assert_eq!(to_start(&nodes, 1), Vec::<String>::new());
    assert_eq!(to_start(&nodes, 2), vec!["c"]);
    assert_eq!(to_start(&nodes, 10), vec!["c", "d", "e"]);
    assert_eq!(to_start(&nodes, 0), Vec::<String>::new());
    // A registry cap cuts the starts, and says what the budget wanted.
    let capped = |limit, cap: Option<usize>| {
        let s = to_start_capped(&nodes, limit, cap.map(Cap::new).as_ref());
        (s.wanted, s.nodes)
    };
    assert_eq!(
        capped(10, None),
        (3, vec!["c".into(), "d".into(), "e".into()])
    );
    assert_eq!(capped(10, Some(1)), (3, vec!["c".into()]));
    assert_eq!(capped(10, Some(0)), (3, vec![]));
    assert_eq!(capped(2, Some(5)), (1, vec!["c".into()]));
    // Nodes already pulling from the registry start first and take no slot,
    // within the job's own budget.
    let riding = |limit, slots, riding: &[&str]| {
        let cap = Cap {
            slots,
            riding: riding.iter().map(|n| n.to_string()).collect(),
        };
        to_start_capped(&nodes, limit, Some(&cap)).nodes
    };
    assert_eq!(riding(10, 0, &["e"]), vec!["e"]);
    assert_eq!(riding(10, 1, &["e"]), vec!["e", "c"]);
    assert_eq!(
        riding(2, 1, &["e", "d"]),
        vec!["d"],
        "budget of one, in order"
    );
    assert_eq!(
        riding(10, 0, &["a", "b"]),
        Vec::<String>::new(),
        "started already"
    );
}

#[test]
fn timeouts_and_deadlines() {
    let since = DateTime::from_timestamp(1000, 0).unwrap_or_default();
    let timeout = TimeDelta::seconds(300);
    let st = NodeState::Active(Some(since));
    assert_eq!(
        apply_node_timeout(st.clone(), timeout, since + TimeDelta::seconds(299)),
        st
    );
    assert!(
        matches!(apply_node_timeout(st.clone(), timeout, since + timeout), NodeState::Failed(m) if m.contains("timed out"))
    );
    assert_eq!(node_timeout_at(&st, timeout), Some(since + timeout));
    let nodes = vec![
        ("a".to_string(), NodeState::Succeeded),
        ("b".to_string(), NodeState::NotStarted),
        ("c".to_string(), st),
    ];
    let t = tally(&apply_deadline(nodes, "job exceeds activeDeadlineSeconds"));
    assert_eq!(
        (t.succeeded, t.failed.len(), t.active, t.not_started),
        (1, 2, 0, 0)
    );
    assert!(t.finished());
}

#[test]
fn tolerance_table() {
    assert_eq!(parse_tolerance(None), Ok(0.1));
    assert_eq!(parse_tolerance(Some("0")), Ok(0.0));
    assert_eq!(parse_tolerance(Some("0.5")), Ok(0.5));
    assert!(parse_tolerance(Some("1.5")).is_err());
    assert!(parse_tolerance(Some("x")).is_err());
    // KubeEdge v1alpha1's boundary: failed >= total × tolerance.
    let cases = [
        (0, 3, 0.0, false),
        (1, 3, 0.0, true),
        (1, 3, 0.5, false),
        (2, 3, 0.5, true),
        (1, 2, 0.5, true),
        (1, 10, 0.1, true),
        (1, 11, 0.1, false),
        (2, 10, 0.1, true),
        (3, 10, 0.3, true),
        (0, 0, 0.1, false),
        (1, 1, 1.0, true),
        (0, 5, 0.0, false),
    ];
    for (failed, total, tol, want) in cases {
        assert_eq!(
            tolerance_reached(failed, total, tol),
            want,
            "{failed}/{total} >= {tol}"
        );
    }
}
