use super::settings::{self, AgentGate, AgentRef, Missing, Settings, Waves};
use super::*;
use chrono::TimeDelta;

fn t(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap_or_default()
}

fn waves(seeds: usize, fan_out: usize) -> Waves {
    Waves {
        seeds,
        fan_out,
        topology_key: "zone".into(),
        seed_deadline: TimeDelta::seconds(600),
    }
}

fn gate(missing: Missing) -> AgentGate {
    AgentGate {
        agent: AgentRef::DaemonSet {
            namespace: "p2p".into(),
            name: "agent".into(),
        },
        wait: TimeDelta::seconds(600),
        missing,
    }
}

/// Node names carry their domain: "a-1" is in zone a.
fn zone_of(n: &str) -> String {
    n.split('-').next().unwrap_or_default().to_string()
}

fn at_zero(_: &str) -> DateTime<Utc> {
    t(0)
}

fn states(spec: &[(&str, char)]) -> Vec<(String, NodeState)> {
    spec.iter()
        .map(|(n, s)| {
            let state = match s {
                'S' => NodeState::Succeeded,
                'A' => NodeState::Active(Some(t(0))),
                'O' => NodeState::Active(Some(t(-700))),
                'F' => NodeState::Failed("x".into()),
                _ => NodeState::NotStarted,
            };
            (n.to_string(), state)
        })
        .collect()
}

fn names(v: &[(String, NodeState)]) -> Vec<&str> {
    v.iter()
        .filter(|(_, s)| *s == NodeState::NotStarted)
        .map(|(n, _)| n.as_str())
        .collect()
}

#[test]
fn waves_seed_first_then_grow_by_holders() {
    // (seeds, fan_out, nodes: N not started, A active, O active past the
    // seed deadline, S succeeded, F failed) -> the not-started nodes left free.
    type Row<'a> = (usize, usize, Vec<(&'a str, char)>, Vec<&'a str>);
    let rows: Vec<Row<'_>> = vec![
        // Nothing held yet: one seed per zone.
        (
            1,
            2,
            vec![("a-1", 'N'), ("a-2", 'N'), ("b-1", 'N'), ("b-2", 'N')],
            vec!["a-1", "b-1"],
        ),
        // Two seeds per zone.
        (
            2,
            2,
            vec![("a-1", 'N'), ("a-2", 'N'), ("a-3", 'N')],
            vec!["a-1", "a-2"],
        ),
        // A seed pulling: no second one.
        (1, 2, vec![("a-1", 'A'), ("a-2", 'N')], vec![]),
        // A failed seed is replaced by the next node.
        (
            1,
            2,
            vec![("a-1", 'F'), ("a-2", 'N'), ("a-3", 'N')],
            vec!["a-2"],
        ),
        // A seed past its deadline no longer counts: another seeds beside it.
        (
            1,
            2,
            vec![("a-1", 'O'), ("a-2", 'N'), ("a-3", 'N')],
            vec!["a-2"],
        ),
        // One holder, fan-out 2: one more at a time.
        (
            1,
            2,
            vec![("a-1", 'S'), ("a-2", 'N'), ("a-3", 'N')],
            vec!["a-2"],
        ),
        // Two holders, one pulling: one more (2 x 1 - 1).
        (
            1,
            2,
            vec![
                ("a-1", 'S'),
                ("a-2", 'S'),
                ("a-3", 'A'),
                ("a-4", 'N'),
                ("a-5", 'N'),
            ],
            vec!["a-4"],
        ),
        // Fan-out 4: each holder serves three.
        (
            1,
            4,
            vec![
                ("a-1", 'S'),
                ("a-2", 'N'),
                ("a-3", 'N'),
                ("a-4", 'N'),
                ("a-5", 'N'),
            ],
            vec!["a-2", "a-3", "a-4"],
        ),
        // A zone that holds it does not free another zone's nodes.
        (1, 2, vec![("a-1", 'S'), ("b-1", 'A'), ("b-2", 'N')], vec![]),
        // More seeds than nodes: every node starts.
        (5, 2, vec![("a-1", 'N'), ("a-2", 'N')], vec!["a-1", "a-2"]),
    ];
    for (seeds, fan_out, spec, free) in rows {
        let nodes = states(&spec);
        let s = Settings {
            agent: None,
            waves: Some(waves(seeds, fan_out)),
        };
        let agents = BTreeMap::new();
        let w = World {
            agents: &agents,
            since: &at_zero,
            domain: &zone_of,
            never_pulled: &Default::default(),
            now: t(0),
        };
        let v = apply(&s, nodes, &w);
        assert_eq!(names(&v.startable), free, "{spec:?}");
    }
}

#[test]
fn nodes_freed_by_a_holder_of_their_domain_fetch_from_peers() {
    // (nodes) -> the startable nodes that fetch from peers: those a holder
    // of their zone frees, never a seed.
    type Row<'a> = (Vec<(&'a str, char)>, Vec<&'a str>);
    let rows: Vec<Row<'_>> = vec![
        // Seeds come from the registry.
        (vec![("a-1", 'N'), ("b-1", 'N')], vec![]),
        // Zone a holds it: its next node from peers; zone b seeds.
        (
            vec![("a-1", 'S'), ("a-2", 'N'), ("a-3", 'N'), ("b-1", 'N')],
            vec!["a-2"],
        ),
        // A replacement seed after a failure is a seed.
        (vec![("a-1", 'F'), ("a-2", 'N')], vec![]),
        // Two holders: two more, both from peers.
        (
            vec![("a-1", 'S'), ("a-2", 'S'), ("a-3", 'N'), ("a-4", 'N')],
            vec!["a-3", "a-4"],
        ),
    ];
    for (spec, peers) in rows {
        let s = Settings {
            agent: None,
            waves: Some(waves(1, 2)),
        };
        let agents = BTreeMap::new();
        let w = World {
            agents: &agents,
            since: &at_zero,
            domain: &zone_of,
            never_pulled: &Default::default(),
            now: t(0),
        };
        let v = apply(&s, states(&spec), &w);
        let got: Vec<&str> = v.from_peers.iter().map(String::as_str).collect();
        assert_eq!(got, peers, "{spec:?}");
    }
}

#[test]
fn the_agent_gate_waits_then_falls_back() {
    // (agent on node, seconds since the wait began, missing) -> gate kind.
    let rows = [
        (Some(true), 0, Missing::Direct, "go"),
        (Some(true), 9_999, Missing::Skip, "go"),
        (Some(false), 0, Missing::Direct, "wait"),
        (None, 599, Missing::Skip, "wait"),
        (None, 600, Missing::Direct, "direct"),
        (Some(false), 601, Missing::Skip, "skip"),
    ];
    for (on_node, elapsed, missing, want) in rows {
        let got = agent::gate(&gate(missing), on_node, t(0), t(elapsed));
        let kind = match &got {
            Gate::Go => "go",
            Gate::Wait { until, why } => {
                assert_eq!(*until, t(600));
                assert!(why.contains("DaemonSet p2p/agent"), "{why}");
                "wait"
            }
            Gate::Direct(_) => "direct",
            Gate::Skip(why) => {
                assert!(why.starts_with("skipped: the P2P agent DaemonSet p2p/agent"));
                "skip"
            }
        };
        assert_eq!(kind, want, "{on_node:?} after {elapsed}s");
    }
}

#[test]
fn held_nodes_never_start_and_skipped_ones_fail() {
    let nodes = states(&[("a-1", 'N'), ("a-2", 'N'), ("a-3", 'N'), ("a-4", 'A')]);
    let agents = BTreeMap::from([("a-1".to_string(), true), ("a-2".to_string(), false)]);
    let s = Settings {
        agent: Some(gate(Missing::Skip)),
        waves: None,
    };
    // a-3 began waiting long ago: it is skipped; a-2 (not Ready) waits.
    let since = |n: &str| if n == "a-3" { t(-1_000) } else { t(0) };
    let w = World {
        agents: &agents,
        since: &since,
        domain: &zone_of,
        never_pulled: &Default::default(),
        now: t(10),
    };
    let v = apply(&s, nodes, &w);
    assert_eq!(names(&v.startable), vec!["a-1"]);
    assert_eq!(v.held.len(), 1);
    assert_eq!(v.held[0].0, "a-2");
    assert_eq!(v.wake_at, Some(t(600)));
    assert!(matches!(&v.nodes[2].1, NodeState::Failed(m) if m.starts_with("skipped")));
    // An active node is never held back.
    assert!(v.startable.iter().any(|(n, _)| n == "a-4"));
    let summary = v.summary().unwrap_or_default();
    assert!(summary.starts_with("1 node(s) held back (e.g. a-2: waits for the P2P agent"));
}

#[test]
fn the_agent_gate_comes_before_the_waves() {
    // a-1 would be the seed, but its agent is not Ready: a-2 seeds instead.
    let nodes = states(&[("a-1", 'N'), ("a-2", 'N'), ("a-3", 'N')]);
    let agents = BTreeMap::from([
        ("a-1".to_string(), false),
        ("a-2".to_string(), true),
        ("a-3".to_string(), true),
    ]);
    let s = Settings {
        agent: Some(gate(Missing::Direct)),
        waves: Some(waves(1, 2)),
    };
    let w = World {
        agents: &agents,
        since: &at_zero,
        domain: &zone_of,
        never_pulled: &Default::default(),
        now: t(1),
    };
    let v = apply(&s, nodes, &w);
    assert_eq!(names(&v.startable), vec!["a-2"]);
    let held: Vec<&str> = v.held.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(held, vec!["a-1", "a-3"]);
}

#[test]
fn agent_pods_by_daemonset_or_labels() {
    let pod = |ns: &str, ds: Option<&str>, app: &str, node: &str, ready: bool| AgentPod {
        namespace: ns.into(),
        labels: BTreeMap::from([("app".to_string(), app.to_string())]),
        daemonset: ds.map(str::to_string),
        node: Some(node.into()),
        ready,
        active: true,
    };
    let pods = [
        pod("p2p", Some("agent"), "agent", "n1", true),
        pod("p2p", Some("agent"), "agent", "n2", false),
        pod("other", Some("agent"), "agent", "n3", true),
        pod("p2p", Some("else"), "x", "n4", true),
        pod("p2p", Some("agent"), "agent", "n2", true),
    ];
    let by_ds = agents_by_node(&gate(Missing::Direct).agent, &pods);
    assert_eq!(
        by_ds,
        BTreeMap::from([("n1".to_string(), true), ("n2".to_string(), true)])
    );
    let by_labels = AgentRef::parse("pods:p2p/app=x").ok().flatten();
    let by_labels = by_labels.map(|a| agents_by_node(&a, &pods));
    assert_eq!(by_labels, Some(BTreeMap::from([("n4".to_string(), true)])));
}

#[test]
fn settings_read_and_refuse() {
    use nodeimage_api::p2p as names;
    let read = |pairs: &[(&str, &str)], default: Option<&str>| {
        let a: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        settings::read(&a, default)
    };
    assert_eq!(read(&[], None), Ok(Settings::default()));
    // The chart's default applies; `none` turns it off.
    let d = Some("daemonset:spegel/spegel");
    assert!(read(&[], d).is_ok_and(|s| s.agent.is_some()));
    assert_eq!(read(&[(names::AGENT, "none")], d), Ok(Settings::default()));
    let s = read(
        &[
            (names::SEEDS, "2"),
            (names::FAN_OUT, "3"),
            (names::AGENT_MISSING, "skip"),
        ],
        d,
    );
    assert!(s.is_ok_and(|s| s.waves.is_some_and(|w| w.seeds == 2
        && w.fan_out == 3
        && w.topology_key == names::DEFAULT_TOPOLOGY_KEY)
        && s.agent.is_some_and(|g| g.missing == Missing::Skip)));
    // Each bad value names its annotation.
    let bad = [
        (names::AGENT, "spegel"),
        (names::AGENT, "daemonset:Bad_NS/x"),
        (names::AGENT, "pods:p2p/app"),
        (names::AGENT, "pods:p2p/app in (a)"),
        (names::SEEDS, "0"),
        (names::SEEDS, "-1"),
        (names::FAN_OUT, "1"),
        (names::FAN_OUT, "0"),
        (names::AGENT_WAIT, "forever"),
        (names::AGENT_MISSING, "maybe"),
        (names::TOPOLOGY_KEY, "not a key"),
        (names::TOPOLOGY_KEY, "example.com/"),
    ];
    for (k, v) in bad {
        let mut pairs = vec![(k, v)];
        if k != names::SEEDS {
            pairs.push((names::SEEDS, "1"));
        }
        let err = read(&pairs, d).err().unwrap_or_default();
        assert!(
            err.starts_with(&format!("annotation {k}: ")),
            "{k}={v}: {err}"
        );
    }
    let err = read(&[(names::SEEDS, "1"), (names::FAN_OUT, "1")], None)
        .err()
        .unwrap_or_default();
    assert!(err.contains("never widen"), "{err}");
}

#[test]
fn a_pod_wakes_the_jobs_whose_agent_it_is() {
    use super::observe::is_agent_for;
    let pod = AgentPod {
        namespace: "p2p".into(),
        labels: BTreeMap::new(),
        daemonset: Some("agent".into()),
        node: Some("n1".into()),
        ready: true,
        active: true,
    };
    let named = |v: &str| BTreeMap::from([(nodeimage_api::p2p::AGENT.to_string(), v.to_string())]);
    assert!(is_agent_for(&named("daemonset:p2p/agent"), None, &pod));
    assert!(!is_agent_for(&named("daemonset:p2p/other"), None, &pod));
    assert!(!is_agent_for(
        &named("none"),
        Some("daemonset:p2p/agent"),
        &pod
    ));
    assert!(is_agent_for(
        &BTreeMap::new(),
        Some("daemonset:p2p/agent"),
        &pod
    ));
    assert!(!is_agent_for(&BTreeMap::new(), None, &pod));
}

#[test]
fn each_started_node_notes_how_the_rules_started_it() {
    use nodeimage_api::kruise::{AgentUse, TagP2p, WaveRole};
    // Zone a holds the image on two nodes; zone b has none; b-2's agent
    // never became Ready and its wait is over (it pulls directly).
    let nodes = states(&[
        ("a-1", 'S'),
        ("a-2", 'S'),
        ("a-3", 'N'),
        ("b-1", 'N'),
        ("b-2", 'N'),
    ]);
    let agents = BTreeMap::from([("a-3".to_string(), true), ("b-1".to_string(), true)]);
    let since = |n: &str| if n == "b-2" { t(-1_000) } else { t(0) };
    let w = World {
        agents: &agents,
        since: &since,
        domain: &zone_of,
        never_pulled: &Default::default(),
        now: t(1),
    };
    let both = Settings {
        agent: Some(gate(Missing::Direct)),
        waves: Some(waves(2, 2)),
    };
    let v = apply(&both, nodes.clone(), &w);
    let started: Vec<String> = ["a-3", "b-1", "b-2"].map(String::from).to_vec();
    let note = |wave, domain: &str, holders, agent| TagP2p {
        wave: Some(wave),
        domain: Some(domain.into()),
        holders,
        agent: Some(agent),
    };
    let want = BTreeMap::from([
        (
            "a-3".to_string(),
            note(WaveRole::Peers, "zone=a", Some(2), AgentUse::Ready),
        ),
        (
            "b-1".to_string(),
            note(WaveRole::Seed, "zone=b", None, AgentUse::Ready),
        ),
        (
            "b-2".to_string(),
            note(WaveRole::Seed, "zone=b", None, AgentUse::Direct),
        ),
    ]);
    assert_eq!(notes(&both, &v, &started, &zone_of), want);
    // Only the nodes that start get one.
    let one = notes(&both, &v, &started[..1], &zone_of);
    assert_eq!(one.keys().collect::<Vec<_>>(), ["a-3"]);
    // Waves alone: no agent; neither: no notes at all.
    let waves_only = Settings {
        agent: None,
        waves: Some(waves(2, 2)),
    };
    let v = apply(&waves_only, nodes.clone(), &w);
    let got = notes(&waves_only, &v, &started, &zone_of);
    assert_eq!(got["a-3"].agent, None);
    assert_eq!(got["a-3"].wave, Some(WaveRole::Peers));
    let none = Settings::default();
    let v = apply(&none, nodes, &w);
    assert!(notes(&none, &v, &started, &zone_of).is_empty());
}

#[test]
fn a_domain_whose_seeds_keep_failing_stops_seeding() {
    // (nodes: F failed with "refused", A active, S succeeded, N not
    // started) -> (free nodes, failed now, held).
    type Row<'a> = (
        Vec<(&'a str, char)>,
        Vec<&'a str>,
        Vec<&'a str>,
        Vec<&'a str>,
    );
    let rows: Vec<Row<'_>> = vec![
        // Two failed seeds: the next node seeds.
        (
            vec![("a-1", 'F'), ("a-2", 'F'), ("a-3", 'N'), ("a-4", 'N')],
            vec!["a-3"],
            vec![],
            vec!["a-4"],
        ),
        // Three (3 per seed asked), none pulling, none holding: the rest fail.
        (
            vec![
                ("a-1", 'F'),
                ("a-2", 'F'),
                ("a-3", 'F'),
                ("a-4", 'N'),
                ("a-5", 'N'),
            ],
            vec![],
            vec!["a-4", "a-5"],
            vec![],
        ),
        // Three failed but a seed still pulls: wait for it.
        (
            vec![
                ("a-1", 'F'),
                ("a-2", 'F'),
                ("a-3", 'F'),
                ("a-4", 'A'),
                ("a-5", 'N'),
            ],
            vec![],
            vec![],
            vec!["a-5"],
        ),
        // A holder: failures no longer matter.
        (
            vec![
                ("a-1", 'F'),
                ("a-2", 'F'),
                ("a-3", 'F'),
                ("a-4", 'S'),
                ("a-5", 'N'),
            ],
            vec!["a-5"],
            vec![],
            vec![],
        ),
        // Another zone's failures do not stop this one.
        (
            vec![("b-1", 'F'), ("b-2", 'F'), ("b-3", 'F'), ("a-1", 'N')],
            vec!["a-1"],
            vec![],
            vec![],
        ),
    ];
    let s = Settings {
        agent: None,
        waves: Some(waves(1, 2)),
    };
    let agents = BTreeMap::new();
    let w = World {
        agents: &agents,
        since: &at_zero,
        domain: &zone_of,
        never_pulled: &Default::default(),
        now: t(0),
    };
    for (spec, free, failed, held) in rows {
        let mut nodes = states(&spec);
        for (_, st) in nodes.iter_mut() {
            if let NodeState::Failed(why) = st {
                *why = "registry refused: 403".into();
            }
        }
        let v = apply(&s, nodes.clone(), &w);
        assert_eq!(names(&v.startable), free, "{spec:?}");
        let now_failed: Vec<&str> = v
            .nodes
            .iter()
            .zip(&nodes)
            .filter(|((_, after), (_, before))| {
                matches!(after, NodeState::Failed(_)) && *before == NodeState::NotStarted
            })
            .map(|((n, _), _)| n.as_str())
            .collect();
        assert_eq!(now_failed, failed, "{spec:?}");
        let got_held: Vec<&str> = v.held.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(got_held, held, "{spec:?}");
    }
    // The messages say what failed.
    let nodes = states(&[("a-1", 'F'), ("a-2", 'F'), ("a-3", 'F'), ("a-4", 'N')]);
    let v = apply(&s, nodes, &w);
    let NodeState::Failed(why) = &v.nodes[3].1 else {
        panic!("a-4 fails: {:?}", v.nodes)
    };
    assert_eq!(
        why,
        "not pulled: 3 seed(s) of zone=a failed and none holds the image, e.g. a-3: x"
    );
    let nodes = states(&[("a-1", 'F'), ("a-2", 'A'), ("a-3", 'N')]);
    let v = apply(&s, nodes, &w);
    assert_eq!(
        v.held[0].1,
        "waits for a seed of zone=a to hold the image (1 seed(s) pulling, 1 failed, e.g. a-1: x)"
    );
}

#[test]
fn nodes_the_agent_gate_skipped_are_not_failed_seeds() {
    // Three nodes without an agent past the wait are skipped; they never
    // pulled, so zone a still seeds.
    let nodes = states(&[("a-1", 'N'), ("a-2", 'N'), ("a-3", 'N'), ("a-4", 'N')]);
    let agents = BTreeMap::from([("a-4".to_string(), true)]);
    let s = Settings {
        agent: Some(gate(Missing::Skip)),
        waves: Some(waves(1, 2)),
    };
    let w = World {
        agents: &agents,
        since: &at_zero,
        domain: &zone_of,
        never_pulled: &Default::default(),
        now: t(10_000),
    };
    let v = apply(&s, nodes, &w);
    assert_eq!(names(&v.startable), vec!["a-4"]);
    // The next step: the three are recorded failed (refused before they
    // started); the caller says they never pulled, so a-4 still seeds.
    let next = states(&[("a-1", 'F'), ("a-2", 'F'), ("a-3", 'F'), ("a-4", 'N')]);
    let never: BTreeSet<String> = ["a-1", "a-2", "a-3"].map(String::from).into();
    let w = World {
        never_pulled: &never,
        ..w
    };
    let v = apply(&s, next.clone(), &w);
    assert_eq!(names(&v.startable), vec!["a-4"], "{:?}", v.nodes);
    // Had they pulled and failed, the domain would stop.
    let w = World {
        never_pulled: &BTreeSet::new(),
        ..w
    };
    let v = apply(&s, next, &w);
    assert!(names(&v.startable).is_empty(), "{:?}", v.nodes);
}
