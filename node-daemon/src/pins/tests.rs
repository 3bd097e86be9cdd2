use super::*;
use crate::runtime::fake::FakeRuntime;
use nodeimage_api::kruise::nodeimage::pins::NOT_PINNED_PREFIX;
use wanted::Want;

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn key(image: &str) -> TagKey {
    TagKey {
        image: image.into(),
        tag: "v1".into(),
        purpose: nodeimage_api::kruise::Purpose::Pull,
    }
}

/// Each reference wanted by one tag `<reference>`:v1, created in list order.
fn wanted_of(refs: &[&str]) -> Wanted {
    refs.iter()
        .enumerate()
        .map(|(i, r)| {
            let want = Want {
                tags: [key(r)].into(),
                created_at: k8s_openapi::jiff::Timestamp::from_second(i as i64 + 1).ok(),
                ..Default::default()
            };
            (r.to_string(), want)
        })
        .collect()
}

fn settings(enabled: bool, budget_percent: f64) -> Settings {
    Settings {
        node: "n1".into(),
        enabled,
        budget_percent,
    }
}

#[test]
fn pins_follow_what_is_kept() {
    // (kept, pinned by us, to pin, to unpin)
    let table: [(&[&str], &[&str], &[&str], &[&str]); 4] = [
        (&["a", "b"], &[], &["a", "b"], &[]),
        (&["a"], &["a"], &[], &[]),
        (&["a"], &["a", "old"], &[], &["old"]),
        (&[], &["a", "b"], &[], &["a", "b"]),
    ];
    for (keep, ours, pin, unpin) in table {
        assert_eq!(
            changes(&set(keep), &set(ours)),
            Changes {
                pin: pin.iter().map(|s| s.to_string()).collect(),
                unpin: unpin.iter().map(|s| s.to_string()).collect(),
            },
            "keep {keep:?}, ours {ours:?}"
        );
    }
}

#[tokio::test]
async fn a_pass_moves_only_this_nodes_pins() {
    // (name, wanted, enabled, CRI alone, pinned after with owners, counted)
    let cases: [(&str, &[&str], bool, bool, &[(&str, &str)], i64); 3] = [
        (
            "wanted images are pinned, those no longer wanted unpinned",
            &["a", "b", "sandbox", "missing"],
            true,
            false,
            &[("a", "n1"), ("b", "n1"), ("sandbox", "")],
            2,
        ),
        (
            "turned off: only this node's pins go",
            &["a", "b"],
            false,
            false,
            &[("sandbox", "")],
            0,
        ),
        (
            "on CRI alone nothing is touched",
            &["a", "b"],
            true,
            true,
            &[("a", "n1"), ("old", "n1"), ("sandbox", "")],
            0,
        ),
    ];
    for (name, wanted, enabled, cri_only, after, counted) in cases {
        let rt = FakeRuntime::default();
        rt.pinned("a", "n1")
            .pinned("old", "n1")
            .pinned("sandbox", "")
            .present("b");
        if cri_only {
            rt.cri_only();
        }
        let metrics = Metrics::new();
        let report = pass(
            &rt,
            &settings(enabled, 100.0),
            &wanted_of(wanted),
            Some(1 << 30),
            &metrics,
        )
        .await;
        assert_eq!(report.map(|r| r.ignored).ok(), Some(0), "{name}");
        let want: BTreeMap<String, String> = after
            .iter()
            .map(|(i, o)| (i.to_string(), o.to_string()))
            .collect();
        assert_eq!(rt.pins(), want, "{name}");
        assert_eq!(metrics.pinned_images.get(), counted, "{name}");
    }
}

/// Issue 39: images beyond the budget are not pinned, and one this daemon
/// pinned before is unpinned once older entries take its room; a size or
/// capacity the runtime does not report pins nothing it would cover.
#[tokio::test]
async fn a_pass_pins_within_the_budget() {
    let over = NotPinned::OverBudget { percent: 10.0 };
    // (name, capacity, sizes of old/mid/new (0: unreported), pinned after, left out)
    type Case = (
        &'static str,
        Option<u64>,
        [u64; 3],
        &'static [&'static str],
        Vec<(&'static str, NotPinned)>,
    );
    let cases: [Case; 5] = [
        (
            "all fit",
            Some(1000),
            [30, 30, 30],
            &["mid", "new", "old"],
            vec![],
        ),
        (
            "the newest is left out, and unpinned although pinned before",
            Some(1000),
            [40, 40, 40],
            &["mid", "old"],
            vec![("new", over)],
        ),
        (
            "a smaller newer image still fits",
            Some(1000),
            [60, 50, 40],
            &["new", "old"],
            vec![("mid", over)],
        ),
        (
            "an unreported size is not pinned",
            Some(1000),
            [40, 0, 40],
            &["new", "old"],
            vec![("mid", NotPinned::UnknownSize)],
        ),
        (
            "an unknown image filesystem pins nothing",
            None,
            [1, 1, 1],
            &[],
            vec![
                ("mid", NotPinned::UnknownCapacity),
                ("new", NotPinned::UnknownCapacity),
                ("old", NotPinned::UnknownCapacity),
            ],
        ),
    ];
    for (name, capacity, sizes, pinned, left_out) in cases {
        let rt = FakeRuntime::default();
        rt.sized("old", sizes[0])
            .sized("mid", sizes[1])
            .sized("new", sizes[2])
            .pinned("new", "n1");
        let metrics = Metrics::new();
        let report = pass(
            &rt,
            &settings(true, 10.0),
            &wanted_of(&["old", "mid", "new", "absent"]),
            capacity,
            &metrics,
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let want: BTreeMap<String, String> = pinned
            .iter()
            .map(|i| (i.to_string(), "n1".into()))
            .collect();
        assert_eq!(rt.pins(), want, "{name}");
        let left: BTreeMap<String, NotPinned> =
            left_out.iter().map(|(r, w)| (r.to_string(), *w)).collect();
        assert_eq!(report.left_out, left, "{name}");
        assert_eq!(
            metrics.pins_over_budget.get(),
            left.len() as i64,
            "{name}: the metric counts them"
        );
    }
}

#[tokio::test]
async fn a_runtime_that_cannot_say_moves_nothing() {
    let rt = FakeRuntime::default();
    rt.sized("a", 10).pinned("a", "n1");
    rt.statuses([crate::runtime::RuntimeError::Unavailable("down".into())]);
    let metrics = Metrics::new();
    let r = pass(
        &rt,
        &settings(true, 1.0),
        &wanted_of(&["a"]),
        Some(10),
        &metrics,
    )
    .await;
    assert!(
        matches!(&r, Err(PassError::Image { image, .. }) if image == "a"),
        "{r:?}"
    );
    assert_eq!(rt.pins().get("a").map(String::as_str), Some("n1"), "kept");
}

#[test]
fn tags_of_left_out_images_get_the_message_and_each_is_announced_once() {
    let mut wanted = wanted_of(&["a", "b"]);
    if let Some(w) = wanted.get_mut("b") {
        w.tags.insert(TagKey {
            image: "b".into(),
            tag: "v2".into(),
            purpose: nodeimage_api::kruise::Purpose::Pull,
        });
    }
    let left: BTreeMap<String, NotPinned> =
        [("b".to_string(), NotPinned::OverBudget { percent: 5.0 })].into();
    let n = notes(&wanted, &left);
    assert_eq!(n.len(), 2, "both tags of b: {n:?}");
    assert!(n.values().all(|m| m.starts_with(NOT_PINNED_PREFIX)));
    assert!(!n.contains_key(&key("a")));

    let mut announced = BTreeSet::new();
    let first = newly_left_out(&mut announced, &left);
    assert_eq!(first.len(), 1);
    assert!(
        newly_left_out(&mut announced, &left).is_empty(),
        "not again"
    );
    assert!(newly_left_out(&mut announced, &BTreeMap::new()).is_empty());
    assert_eq!(
        newly_left_out(&mut announced, &left).len(),
        1,
        "left out again after it was pinned: announced again"
    );
}
