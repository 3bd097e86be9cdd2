use super::*;
use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeSet;

fn node(
    name: &str,
    labels: &[(&str, &str)],
    taints: &[(&str, &str, &str)],
    cordoned: bool,
) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(
                taints
                    .iter()
                    .map(|(k, v, e)| Taint {
                        key: k.to_string(),
                        value: (!v.is_empty()).then(|| v.to_string()),
                        effect: e.to_string(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            unschedulable: cordoned.then_some(true),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn not_ready(mut n: Node) -> Node {
    if let Some(c) = n.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        c[0].status = "Unknown".into();
    }
    n
}

fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

fn affinity(terms: Vec<Vec<NodeSelectorRequirement>>) -> Option<NodeSelector> {
    Some(NodeSelector {
        node_selector_terms: terms
            .into_iter()
            .map(|exprs| NodeSelectorTerm {
                match_expressions: Some(exprs),
                match_fields: None,
            })
            .collect(),
    })
}

fn toleration(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
    Toleration {
        key: (!key.is_empty()).then(|| key.to_string()),
        operator: (!op.is_empty()).then(|| op.to_string()),
        value: (!value.is_empty()).then(|| value.to_string()),
        effect: (!effect.is_empty()).then(|| effect.to_string()),
        toleration_seconds: None,
    }
}

#[test]
fn where_a_template_fits_table() {
    let gpu = node(
        "gpu-1",
        &[("pool", "gpu"), ("cores", "64")],
        &[("nvidia.com/gpu", "present", "NoSchedule")],
        false,
    );
    let plain = node(
        "plain-1",
        &[("pool", "general"), ("cores", "8")],
        &[],
        false,
    );
    let soft = node(
        "soft-1",
        &[("pool", "general")],
        &[("spot", "", "PreferNoSchedule")],
        false,
    );
    let evicting = node(
        "evict-1",
        &[("pool", "general")],
        &[("maintenance", "", "NoExecute")],
        false,
    );
    let cordoned = node("cordon-1", &[("pool", "general")], &[], true);
    let down = not_ready(node("down-1", &[("pool", "general")], &[], false));
    let on_gpu = vec![toleration("nvidia.com/gpu", "Exists", "", "NoSchedule")];
    let cases: Vec<(&str, Placement, &Node, Option<Misfit>)> = vec![
        (
            "no constraints, plain node",
            Placement::default(),
            &plain,
            None,
        ),
        (
            "nodeSelector matches",
            Placement {
                node_selector: [("pool".into(), "general".into())].into(),
                ..Default::default()
            },
            &plain,
            None,
        ),
        (
            "nodeSelector misses",
            Placement {
                node_selector: [("pool".into(), "gpu".into())].into(),
                ..Default::default()
            },
            &plain,
            Some(Misfit::NodeSelector("pool=gpu".into())),
        ),
        (
            "untolerated NoSchedule taint",
            Placement::default(),
            &gpu,
            Some(Misfit::Taint("nvidia.com/gpu=present:NoSchedule".into())),
        ),
        (
            "tolerated by Exists on its key",
            Placement {
                tolerations: on_gpu.clone(),
                ..Default::default()
            },
            &gpu,
            None,
        ),
        (
            "tolerated by Equal with its value",
            Placement {
                tolerations: vec![toleration("nvidia.com/gpu", "Equal", "present", "")],
                ..Default::default()
            },
            &gpu,
            None,
        ),
        (
            "Equal with another value does not tolerate",
            Placement {
                tolerations: vec![toleration("nvidia.com/gpu", "Equal", "absent", "")],
                ..Default::default()
            },
            &gpu,
            Some(Misfit::Taint("nvidia.com/gpu=present:NoSchedule".into())),
        ),
        (
            "a toleration for another effect does not tolerate",
            Placement {
                tolerations: vec![toleration("nvidia.com/gpu", "Exists", "", "NoExecute")],
                ..Default::default()
            },
            &gpu,
            Some(Misfit::Taint("nvidia.com/gpu=present:NoSchedule".into())),
        ),
        (
            "Exists with no key tolerates every taint",
            Placement {
                tolerations: vec![toleration("", "Exists", "", "")],
                ..Default::default()
            },
            &evicting,
            None,
        ),
        (
            "PreferNoSchedule does not keep a Pod off",
            Placement::default(),
            &soft,
            None,
        ),
        (
            "NoExecute keeps a Pod off",
            Placement::default(),
            &evicting,
            Some(Misfit::Taint("maintenance=:NoExecute".into())),
        ),
        (
            "a cordoned node takes no new Pod",
            Placement::default(),
            &cordoned,
            Some(Misfit::Cordoned),
        ),
        (
            "unless the template tolerates the cordon",
            Placement {
                tolerations: vec![toleration(UNSCHEDULABLE_TAINT, "Exists", "", "NoSchedule")],
                ..Default::default()
            },
            &cordoned,
            None,
        ),
        (
            "a node that is not Ready",
            Placement::default(),
            &down,
            Some(Misfit::NotReady),
        ),
        (
            "affinity In",
            Placement {
                required: affinity(vec![vec![req("pool", "In", &["general", "batch"])]]),
                ..Default::default()
            },
            &plain,
            None,
        ),
        (
            "affinity NotIn",
            Placement {
                required: affinity(vec![vec![req("pool", "NotIn", &["general"])]]),
                ..Default::default()
            },
            &plain,
            Some(Misfit::Affinity),
        ),
        (
            "affinity NotIn on a missing label",
            Placement {
                required: affinity(vec![vec![req("zone", "NotIn", &["a"])]]),
                ..Default::default()
            },
            &plain,
            None,
        ),
        (
            "affinity Exists",
            Placement {
                required: affinity(vec![vec![req("cores", "Exists", &[])]]),
                ..Default::default()
            },
            &plain,
            None,
        ),
        (
            "affinity DoesNotExist",
            Placement {
                required: affinity(vec![vec![req("cores", "DoesNotExist", &[])]]),
                ..Default::default()
            },
            &plain,
            Some(Misfit::Affinity),
        ),
        (
            "affinity Gt",
            Placement {
                required: affinity(vec![vec![req("cores", "Gt", &["16"])]]),
                tolerations: on_gpu.clone(),
                ..Default::default()
            },
            &gpu,
            None,
        ),
        (
            "affinity Lt on a larger value",
            Placement {
                required: affinity(vec![vec![req("cores", "Lt", &["16"])]]),
                tolerations: on_gpu.clone(),
                ..Default::default()
            },
            &gpu,
            Some(Misfit::Affinity),
        ),
        (
            "affinity Gt on a value that is no number",
            Placement {
                required: affinity(vec![vec![req("pool", "Gt", &["1"])]]),
                ..Default::default()
            },
            &plain,
            Some(Misfit::Affinity),
        ),
        (
            "terms are ORed",
            Placement {
                required: affinity(vec![
                    vec![req("pool", "In", &["gpu"])],
                    vec![req("pool", "In", &["general"])],
                ]),
                ..Default::default()
            },
            &plain,
            None,
        ),
        (
            "requirements of a term are ANDed",
            Placement {
                required: affinity(vec![vec![
                    req("pool", "In", &["general"]),
                    req("cores", "In", &["64"]),
                ]]),
                ..Default::default()
            },
            &plain,
            Some(Misfit::Affinity),
        ),
        (
            "an empty term matches nothing",
            Placement {
                required: affinity(vec![vec![]]),
                ..Default::default()
            },
            &plain,
            Some(Misfit::Affinity),
        ),
        (
            "an unknown operator matches nothing",
            Placement {
                required: affinity(vec![vec![req("pool", "Like", &["gen"])]]),
                ..Default::default()
            },
            &plain,
            Some(Misfit::Affinity),
        ),
    ];
    for (name, placement, node, want) in cases {
        assert_eq!(placement.misfit(node), want, "{name}");
    }
}

#[test]
fn affinity_by_field_names_the_node() {
    let p = Placement {
        required: Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: None,
                match_fields: Some(vec![req("metadata.name", "In", &["plain-1"])]),
            }],
        }),
        ..Default::default()
    };
    assert_eq!(p.misfit(&node("plain-1", &[], &[], false)), None);
    assert_eq!(
        p.misfit(&node("plain-2", &[], &[], false)),
        Some(Misfit::Affinity)
    );
}

#[test]
fn extra_nodes_are_bounded_stable_and_differ_by_workload() {
    let nodes: Vec<Node> = (0..50)
        .map(|i| {
            node(
                &format!("n-{i:02}"),
                &[("pool", if i % 2 == 0 { "a" } else { "b" })],
                &[],
                false,
            )
        })
        .collect();
    let p = Placement {
        node_selector: [("pool".into(), "a".into())].into(),
        max_extra_nodes: 5,
        ..Default::default()
    };
    let taken: BTreeSet<String> = ["n-00".to_string()].into();
    let one = extra_nodes(&p, "uid-1", &nodes, &taken);
    assert_eq!(one.len(), 5);
    assert!(
        one.iter().all(|n| n != "n-00"),
        "the Pods' nodes are not counted again: {one:?}"
    );
    assert!(
        one.iter()
            .all(|n| n[2..].parse::<u32>().is_ok_and(|i| i % 2 == 0)),
        "only nodes the template fits: {one:?}"
    );
    let again: Vec<Node> = nodes.iter().rev().cloned().collect();
    assert_eq!(
        extra_nodes(&p, "uid-1", &again, &taken),
        one,
        "the same choice whatever the cache's order"
    );
    assert_ne!(
        extra_nodes(&p, "uid-2", &nodes, &taken),
        one,
        "another workload spreads elsewhere"
    );
    let none = Placement {
        max_extra_nodes: 0,
        ..p.clone()
    };
    assert!(
        extra_nodes(&none, "uid-1", &nodes, &taken).is_empty(),
        "0: the Pods' nodes only"
    );
}

#[test]
fn the_annotation_round_trips_and_a_bad_one_says_why() {
    let p = Placement {
        node_selector: [("pool".into(), "a".into())].into(),
        required: affinity(vec![vec![req("zone", "In", &["z1"])]]),
        tolerations: vec![toleration("k", "Exists", "", "NoSchedule")],
        max_extra_nodes: 7,
    };
    assert_eq!(Placement::from_annotation(&p.to_annotation()), Ok(p));
    assert!(Placement::from_annotation("{not json").is_err());
    assert!(Placement::from_annotation(r#"{"maxExtraNodes": -1}"#).is_err());
}

#[test]
fn extra_nodes_spread_over_names_that_share_a_prefix() {
    let nodes: Vec<Node> = (1..=1000)
        .map(|i| node(&format!("sim-{i:05}"), &[], &[], false))
        .collect();
    let p = Placement {
        max_extra_nodes: 100,
        ..Default::default()
    };
    let picked = extra_nodes(&p, "5f0c2b7e-uid", &nodes, &BTreeSet::new());
    let mut per_block = [0usize; 10];
    for n in &picked {
        let i: usize = n[4..].parse().expect("a number");
        per_block[(i - 1) / 100] += 1;
    }
    assert!(
        per_block.iter().all(|c| (2..=25).contains(c)),
        "100 of 1,000 picked in every block of 100 names: {per_block:?}"
    );
}
