use super::*;

fn order(created: i64, uid: &str) -> JobOrder {
    JobOrder {
        created: DateTime::from_timestamp(created, 0),
        uid: uid.into(),
    }
}

/// A job `uid` of `tenant`, created at second `created`, wanting `wants`.
fn w(tenant: &str, created: i64, uid: &str, wants: usize) -> Waiter {
    Waiter {
        order: order(created, uid),
        tenant: tenant.into(),
        wants,
    }
}

fn map<V: Copy>(pairs: &[(&str, V)]) -> BTreeMap<String, V> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

const ANY: usize = usize::MAX;

/// (case, job, limit, in flight, rate-limited, waiting jobs, nodes held per
/// tenant, tenants' last turns, slots the job gets).
#[rustfmt::skip]
#[test]
fn admit_table() {
    type Case = (&'static str, Waiter, usize, usize, bool, Vec<Waiter>, Vec<(&'static str, usize)>, Vec<(&'static str, u64)>, usize);
    let cases: Vec<Case> = vec![
        ("an idle registry", w("x", 200, "b", ANY), 3, 0, false, vec![], vec![], vec![], 3),
        ("its own want bounds it", w("x", 200, "b", 2), 3, 0, false, vec![], vec![], vec![], 2),
        ("full", w("x", 100, "a", ANY), 1, 1, false, vec![], vec![], vec![], 0),
        ("over a lowered limit", w("x", 100, "a", ANY), 1, 3, false, vec![], vec![], vec![], 0),
        // Within one namespace: oldest first, whatever the kind.
        ("one namespace: the older first", w("x", 200, "b", ANY), 1, 0, false, vec![w("x", 100, "a", 1)], vec![], vec![], 0),
        ("one namespace: the older takes it", w("x", 100, "a", 1), 1, 0, false, vec![w("x", 100, "a", 1), w("x", 200, "b", 1)], vec![], vec![], 1),
        ("younger jobs never hold an older one", w("x", 100, "a", ANY), 2, 0, false, vec![w("x", 200, "b", 5)], vec![], vec![], 2),
        ("what older jobs leave is free", w("x", 200, "b", ANY), 4, 1, false, vec![w("x", 100, "a", 2)], vec![], vec![], 1),
        ("same second: the uid decides", w("x", 200, "c", ANY), 1, 0, false, vec![w("x", 200, "b", 1)], vec![], vec![], 0),
        ("same second, the other way", w("x", 200, "b", ANY), 1, 0, false, vec![w("x", 200, "c", 1)], vec![], vec![], 1),
        // Between namespaces: round-robin, so an old large job holds back
        // no other namespace.
        ("another namespace shares with an older large job", w("y", 200, "b", ANY), 2, 0, false, vec![w("x", 100, "a", 50)], vec![], vec![], 1),
        ("the older namespace takes the odd slot", w("x", 100, "a", 50), 3, 0, false, vec![w("y", 200, "b", 50)], vec![], vec![], 2),
        ("a namespace holding fewer nodes goes first", w("y", 200, "b", ANY), 3, 2, false, vec![w("x", 100, "a", 50)], vec![("x", 2)], vec![], 1),
        ("the namespace holding more waits", w("x", 100, "a", 50), 3, 2, false, vec![w("y", 200, "b", 50)], vec![("x", 2)], vec![], 0),
        ("equal holdings: the one served longer ago", w("y", 200, "b", ANY), 3, 2, false, vec![w("x", 100, "a", 5)], vec![("x", 1), ("y", 1)], vec![("x", 7), ("y", 3)], 1),
        ("equal holdings: just served, it waits its turn", w("x", 100, "a", 5), 3, 2, false, vec![w("y", 200, "b", 5)], vec![("x", 1), ("y", 1)], vec![("x", 7), ("y", 3)], 0),
        ("a namespace wanting nothing more leaves its share", w("x", 100, "a", ANY), 4, 0, false, vec![w("y", 200, "b", 1)], vec![], vec![], 3),
        ("three namespaces, one slot each", w("z", 300, "c", ANY), 3, 0, false, vec![w("x", 100, "a", 9), w("y", 200, "b", 9)], vec![], vec![], 1),
        // A cluster-scoped kind is a tenant of its own.
        ("a cluster-scoped kind shares too", w(&tenant(None, "ImagePrePullJob"), 200, "b", ANY), 2, 0, false, vec![w("x", 100, "a", 50)], vec![], vec![], 1),
        ("hand-written entries fill it", w("x", 100, "a", ANY), 2, 2, false, vec![], vec![], vec![], 0),
        ("rate-limited: no new pulls", w("x", 100, "a", ANY), 10, 0, true, vec![], vec![], vec![], 0),
    ];
    for (case, job, limit, in_flight, rate_limited, waiting, held, served, slots) in cases {
        let (held, served) = (map(&held), map(&served));
        let view = RegistryView { limit, in_flight, rate_limited, waiting: &waiting, held: &held, served: &served };
        assert_eq!(admit(&job, &view), slots, "{case}");
    }
}

#[test]
fn tenants_are_namespaces_or_kinds() {
    assert_eq!(tenant(Some("team-a"), "ImagePullJob"), "team-a");
    assert_eq!(tenant(None, "ImagePrePullJob"), "ImagePrePullJob");
    assert_ne!(
        tenant(None, "NodeUpgradeJob"),
        tenant(None, "ImagePrePullJob")
    );
}

/// (case, limit, in flight, waiting, held, served, jobs woken).
#[rustfmt::skip]
#[test]
fn next_up_table() {
    type Case = (&'static str, usize, usize, Vec<Waiter>, Vec<(&'static str, usize)>, Vec<(&'static str, u64)>, Vec<&'static str>);
    let cases: Vec<Case> = vec![
        ("nobody waits", 2, 1, vec![], vec![], vec![], vec![]),
        ("no free slot", 2, 2, vec![w("x", 100, "a", 1)], vec![], vec![], vec![]),
        ("one slot, one namespace: its oldest", 2, 1, vec![w("x", 200, "b", 1), w("x", 100, "a", 1)], vec![], vec![], vec!["a"]),
        ("one slot: the namespace holding fewer", 2, 1, vec![w("x", 100, "a", 5), w("y", 200, "b", 5)], vec![("x", 1)], vec![], vec!["b"]),
        ("one slot, equal holdings: served longer ago", 3, 2, vec![w("x", 100, "a", 5), w("y", 200, "b", 5)], vec![("x", 1), ("y", 1)], vec![("x", 2), ("y", 1)], vec!["b"]),
        ("two slots, two namespaces: one each", 2, 0, vec![w("x", 100, "a", 5), w("x", 150, "c", 5), w("y", 200, "b", 5)], vec![], vec![], vec!["a", "b"]),
        ("rate-limited: nobody", 2, 0, vec![w("x", 100, "a", 5)], vec![], vec![], vec![]),
    ];
    for (case, limit, in_flight, waiting, held, served, woken) in cases {
        let (held, served) = (map(&held), map(&served));
        let rate_limited = case.starts_with("rate-limited");
        let view = RegistryView { limit, in_flight, rate_limited, waiting: &waiting, held: &held, served: &served };
        let got: Vec<String> = next_up(&view).into_iter().map(|o| o.uid).collect();
        assert_eq!(got, woken, "{case}");
    }
}

#[test]
fn wait_reasons() {
    let (a, b) = (w("x", 100, "a", 1), w("y", 200, "b", 1));
    let waiting = [a.clone()];
    let (held, served) = (BTreeMap::new(), BTreeMap::new());
    let mut view = RegistryView {
        limit: 1,
        in_flight: 1,
        rate_limited: false,
        waiting: &waiting,
        held: &held,
        served: &served,
    };
    assert_eq!(
        wait_reason("r", &a, &view),
        "waiting for registry r: 1 of 1 pulling"
    );
    assert_eq!(
        wait_reason("r", &b, &view),
        "waiting for registry r: 1 of 1 pulling, 1 other job(s) waiting (slots go round-robin by namespace)"
    );
    view.rate_limited = true;
    assert!(wait_reason("r", &b, &view).contains("rate-limited"));
}
