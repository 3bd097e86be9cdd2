//! A model of a fleet pulling one large image through a P2P engine, driven
//! by the controller's own decisions (`p2p::apply`, `rollout::to_start`):
//! time to every node and bytes the registry serves, plain parallelism
//! against seed-then-fan-out. Bandwidths are modelled, not measured (the
//! figures in docs/benchmarks.md state them). A node fetches from peers when
//! some node of its domain already holds the whole image when it starts (as
//! Spegel serves only content a node fully holds), else from the registry.
//!
//!   cargo test -p nodeimage-controller --release model -- --ignored --nocapture

use super::settings::{Settings, Waves};
use super::{World, apply};
use crate::engine::rollout::{self, NodeState};
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::BTreeMap;

/// The modelled fleet and network.
#[derive(Clone, Copy, Debug)]
struct Net {
    /// Nodes.
    nodes: usize,
    /// Topology domains (zones), nodes spread round-robin.
    zones: usize,
    /// Image size, MB.
    image_mb: f64,
    /// Registry egress, MB/s, shared by the nodes pulling from it.
    registry_mbps: f64,
    /// A node's download rate, MB/s.
    node_mbps: f64,
    /// A holder's upload rate to peers, MB/s.
    upload_mbps: f64,
}

/// What one run gives.
#[derive(Debug)]
struct Outcome {
    seconds: u64,
    registry_mb: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum Source {
    Registry,
    Peers,
}

/// Runs the fleet to completion in 1 s steps.
fn run(net: Net, parallelism: usize, waves: Option<Waves>) -> Outcome {
    let t0 = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap_or_default();
    let names: Vec<String> = (0..net.nodes).map(|i| format!("n{i:06}")).collect();
    let zone = |i: usize| format!("z{}", i % net.zones);
    let zones: BTreeMap<String, String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), zone(i)))
        .collect();
    let mut state: Vec<NodeState> = vec![NodeState::NotStarted; net.nodes];
    let mut left: Vec<f64> = vec![net.image_mb; net.nodes];
    let mut source: Vec<Source> = vec![Source::Registry; net.nodes];
    let mut holders: BTreeMap<String, usize> = BTreeMap::new();
    let settings = Settings { agent: None, waves };
    let agents = BTreeMap::new();
    let (since, domain) = (
        |_: &str| t0,
        |n: &str| zones.get(n).cloned().unwrap_or_default(),
    );
    let mut registry_mb = 0.0;
    let mut second = 0u64;
    while state.iter().any(|s| *s != NodeState::Succeeded) && second < 1_000_000 {
        let now = t0 + TimeDelta::seconds(second as i64);
        let nodes: Vec<(String, NodeState)> = names.iter().cloned().zip(state.clone()).collect();
        let world = World {
            agents: &agents,
            since: &since,
            domain: &domain,
            never_pulled: &Default::default(),
            now,
        };
        let v = apply(&settings, nodes, &world);
        let index: BTreeMap<&String, usize> =
            names.iter().enumerate().map(|(i, n)| (n, i)).collect();
        for n in rollout::to_start(&v.startable, parallelism) {
            let i = index[&n];
            let held = holders.get(&zone(i)).copied().unwrap_or(0) > 0;
            source[i] = if held {
                Source::Peers
            } else {
                Source::Registry
            };
            state[i] = NodeState::Active(Some(now));
        }
        let rate = rates(&net, &state, &source, &holders);
        let working: Vec<usize> = (0..net.nodes)
            .filter(|&i| matches!(state[i], NodeState::Active(_)))
            .collect();
        // Nothing the rules read changes before the next completion: step
        // to it (1 s to 60 s, whole seconds).
        let next = working
            .iter()
            .map(|&i| left[i] / rate[i].max(1e-9))
            .fold(f64::INFINITY, f64::min);
        let dt = next.ceil().clamp(1.0, 60.0);
        let mut done = vec![];
        for &i in &working {
            let got = (rate[i] * dt).min(left[i]);
            left[i] -= got;
            if source[i] == Source::Registry {
                registry_mb += got;
            }
            if left[i] <= 1e-9 {
                done.push(i);
            }
        }
        for i in done {
            state[i] = NodeState::Succeeded;
            *holders.entry(zone(i)).or_default() += 1;
        }
        second += dt as u64;
    }
    Outcome {
        seconds: second,
        registry_mb,
    }
}

/// Each node's download rate now, MB/s (0 for a node not pulling): the
/// registry's egress shared by its pullers, a zone's holders' upload shared
/// by its peer pullers, each at most the node's own rate.
fn rates(
    net: &Net,
    state: &[NodeState],
    source: &[Source],
    holders: &BTreeMap<String, usize>,
) -> Vec<f64> {
    let zone = |i: usize| format!("z{}", i % net.zones);
    let active = |i: usize| matches!(state[i], NodeState::Active(_));
    let pulling = |s: Source| (0..net.nodes).filter(move |&i| active(i) && source[i] == s);
    let from_registry = pulling(Source::Registry).count().max(1) as f64;
    let registry_rate = net.node_mbps.min(net.registry_mbps / from_registry);
    let mut peers_in: BTreeMap<String, usize> = BTreeMap::new();
    for i in pulling(Source::Peers) {
        *peers_in.entry(zone(i)).or_default() += 1;
    }
    (0..net.nodes)
        .map(|i| match source[i] {
            _ if !active(i) => 0.0,
            Source::Registry => registry_rate,
            Source::Peers => {
                let z = zone(i);
                let h = holders.get(&z).copied().unwrap_or(0) as f64;
                let n = peers_in.get(&z).copied().unwrap_or(1) as f64;
                net.node_mbps.min(net.upload_mbps * h / n)
            }
        })
        .collect()
}

fn waves(seeds: usize) -> Option<Waves> {
    Some(Waves {
        seeds,
        fan_out: 2,
        topology_key: "zone".into(),
        seed_deadline: TimeDelta::seconds(3_600),
    })
}

/// 10 GB, 3 zones, registry 10 Gbit/s, nodes 4 Gbit/s down and up.
fn fleet(nodes: usize) -> Net {
    Net {
        nodes,
        zones: 3,
        image_mb: 10_000.0,
        registry_mbps: 1_250.0,
        node_mbps: 500.0,
        upload_mbps: 500.0,
    }
}

#[test]
fn seeds_bound_the_registry_bytes_plain_parallelism_does_not() {
    let net = Net {
        nodes: 60,
        ..fleet(60)
    };
    let plain = run(net, 60, None);
    let seeded = run(net, 60, waves(1));
    // Seeds: one image per zone from the registry, the rest from peers.
    assert!(
        seeded.registry_mb <= (1.0 + 0.5) * net.image_mb * net.zones as f64,
        "{seeded:?}"
    );
    // Every node at once: every node from the registry.
    assert!(
        plain.registry_mb >= 0.99 * net.image_mb * net.nodes as f64,
        "{plain:?}"
    );
}

#[test]
#[ignore = "a model run: prints the table of docs/benchmarks.md"]
fn model_table() {
    println!("| nodes | rollout | parallelism | time to all nodes | registry bytes (images) |");
    println!("|---|---|---|---|---|");
    for nodes in [1_000, 10_000] {
        let net = fleet(nodes);
        let rows = [
            ("plain", nodes, None),
            ("plain", 100, None),
            ("seeds 1/zone, fan-out 2", nodes, waves(1)),
            ("seeds 3/zone, fan-out 2", nodes, waves(3)),
        ];
        for (what, p, w) in rows {
            let o = run(net, p, w);
            println!(
                "| {nodes} | {what} | {p} | {} s | {:.1} |",
                o.seconds,
                o.registry_mb / net.image_mb
            );
        }
    }
}
