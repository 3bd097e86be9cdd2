use super::*;
use crate::engine::nodetasks::fixtures::at;

fn nodes(states: &[(&str, NodeState)]) -> Vec<(String, NodeState)> {
    states
        .iter()
        .map(|(n, s)| (n.to_string(), s.clone()))
        .collect()
}

fn failed() -> NodeState {
    NodeState::Failed("x".into())
}

#[test]
fn starting_table() {
    use NodeState::*;
    // (budget, total nodes, tolerance, concurrency, registry cap, nodes that start)
    type Case = (
        Vec<(String, NodeState)>,
        usize,
        f64,
        usize,
        Option<usize>,
        Vec<&'static str>,
    );
    let cases: [Case; 8] = [
        (
            nodes(&[("a", NotStarted), ("b", NotStarted)]),
            2,
            0.1,
            1,
            None,
            vec!["a"],
        ),
        (
            nodes(&[("a", NotStarted), ("b", NotStarted)]),
            2,
            0.1,
            5,
            None,
            vec!["a", "b"],
        ),
        (
            nodes(&[("a", Active(None)), ("b", NotStarted)]),
            2,
            0.1,
            1,
            None,
            vec![],
        ),
        (
            nodes(&[("a", Succeeded), ("b", NotStarted)]),
            2,
            0.1,
            1,
            None,
            vec!["b"],
        ),
        // Fail fast: a failure at the tolerance starts nothing more.
        (
            nodes(&[("a", failed()), ("b", NotStarted)]),
            2,
            0.5,
            1,
            None,
            vec![],
        ),
        // Below it (one of four nodes failed, tolerance 0.5), nodes go on.
        (
            nodes(&[("a", failed()), ("b", NotStarted)]),
            4,
            0.5,
            1,
            None,
            vec!["b"],
        ),
        // The registries' free slots cut the starts, not the want.
        (
            nodes(&[("a", NotStarted), ("b", NotStarted)]),
            2,
            0.1,
            5,
            Some(1),
            vec!["a"],
        ),
        (
            nodes(&[("a", NotStarted), ("b", NotStarted)]),
            2,
            0.1,
            5,
            Some(0),
            vec![],
        ),
    ];
    for (budget, total, tolerance, concurrency, cap, want) in cases {
        let cap = cap.map(crate::engine::rollout::Cap::new);
        let got = starting(
            &budget,
            total,
            tolerance,
            (concurrency, cap.as_ref()),
            &BTreeSet::new(),
        );
        let want: Vec<String> = want.into_iter().map(str::to_string).collect();
        assert_eq!(
            got.nodes, want,
            "{budget:?} of {total}, tolerance {tolerance}, cap {cap:?}"
        );
    }
}

#[test]
fn next_look_table() {
    use NodeState::*;
    let timeout = TimeDelta::seconds(100);
    let secs = Duration::from_secs;
    // (node states, waiting for a NodeImage, seconds after at(0), wait)
    let look = |waiting, p2p_wake| Look {
        timeout,
        waiting_for_nodeimage: waiting,
        p2p_wake,
    };
    let cases = [
        (
            nodes(&[("a", NotStarted)]),
            false,
            0,
            super::super::RUNNING_RESYNC,
        ),
        (
            nodes(&[("a", NotStarted)]),
            true,
            0,
            super::super::NODEIMAGE_WAIT,
        ),
        (nodes(&[("a", Active(Some(at(0))))]), false, 70, secs(30)),
        (nodes(&[("a", Active(Some(at(0))))]), false, 10, secs(60)),
        // A timeout already due is looked at a second later, not at once.
        (nodes(&[("a", Active(Some(at(0))))]), false, 150, secs(1)),
        (nodes(&[("a", Active(Some(at(0))))]), true, 99, secs(1)),
    ];
    for (states, waiting, now, want) in cases {
        assert_eq!(
            next_look(&states, &look(waiting, None), at(now)),
            want,
            "{states:?} at {now}s, waiting {waiting}"
        );
    }
    // A node held for its P2P agent: the job looks again when its wait
    // ends (not at the next resync), at least a second away.
    let held = nodes(&[("a", NotStarted)]);
    let p2p = [
        (20, secs(20)),
        (0, secs(1)),
        (-5, secs(1)),
        (500, super::super::RUNNING_RESYNC),
    ];
    for (wake, want) in p2p {
        let got = next_look(&held, &look(false, Some(at(wake))), at(0));
        assert_eq!(got, want, "wait ends at {wake}s");
    }
}
