use super::*;

fn owner(uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("apps.kruise.io/v1alpha1".into()),
        kind: Some("ImagePullJob".into()),
        namespace: Some("ns".into()),
        name: Some(format!("job-{uid}")),
        uid: Some(uid.into()),
        ..Default::default()
    }
}

fn req(uid: &str, timeout: i32) -> EntryRequest {
    EntryRequest {
        image: "nginx".into(),
        tag: "1.25".into(),
        owner: owner(uid),
        pull_policy: ImageTagPullPolicy {
            timeout_seconds: Some(timeout),
            backoff_limit: Some(3),
            ttl_seconds_after_finished: Some(600),
            active_deadline_seconds: None,
        },
        image_pull_policy: Some("IfNotPresent".into()),
        secrets: vec![ReferenceObject {
            namespace: Some("nodeimage-secrets".into()),
            name: Some(format!("s-{uid}")),
            mode: None,
        }],
        sandbox: None,
        check_items: None,
        pull_again_before: None,
        p2p: None,
    }
}

fn now(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(s, 0).unwrap_or_default()
}

#[test]
fn new_tag_then_second_owner_bumps_version() {
    let mut images = BTreeMap::new();
    assert!(upsert(&mut images, &req("a", 600), None, now(10)));
    let tag = &images["nginx"].tags[0];
    assert_eq!(tag.version, Some(0));
    assert_eq!(tag.owner_references.as_ref().map(|o| o.len()), Some(1));

    // Same job again: nothing changes.
    assert!(!upsert(&mut images, &req("a", 600), None, now(20)));

    // Another job: both owners, version bumped, createdAt reset, secrets merged.
    assert!(upsert(&mut images, &req("b", 600), None, now(30)));
    let tag = &images["nginx"].tags[0];
    assert_eq!(tag.version, Some(1));
    assert_eq!(tag.owner_references.as_ref().map(|o| o.len()), Some(2));
    assert_eq!(tag.created_at, Some(api_time(now(30))));
    assert_eq!(images["nginx"].pull_secrets.as_ref().map(Vec::len), Some(2));
}

#[test]
fn new_tag_continues_from_reported_version() {
    let mut images = BTreeMap::new();
    upsert(&mut images, &req("a", 600), Some(4), now(1));
    assert_eq!(images["nginx"].tags[0].version, Some(5));
}

#[test]
fn owned_tag_follows_policy_edits_without_repull() {
    let mut images = BTreeMap::new();
    upsert(&mut images, &req("a", 600), None, now(1));
    assert!(upsert(&mut images, &req("a", 120), None, now(2)));
    let tag = &images["nginx"].tags[0];
    assert_eq!(
        tag.pull_policy.as_ref().and_then(|p| p.timeout_seconds),
        Some(120)
    );
    assert_eq!(tag.version, Some(0));
}

/// OpenKruise's entry for the same job names its own copy of the secret
/// (kruise-daemon-config), which nodeimage's daemons do not read: adopting
/// it adds nodeimage's copy and pulls again, once.
#[test]
fn adopted_entry_gains_the_jobs_secret_and_is_pulled_again_once() {
    let mut images = BTreeMap::from([(
        "nginx".into(),
        ImageSpec {
            pull_secrets: Some(vec![ReferenceObject {
                namespace: Some("kruise-daemon-config".into()),
                name: Some("regcred-x".into()),
                mode: None,
            }]),
            tags: vec![ImageTagSpec {
                tag: "1.25".into(),
                version: Some(3),
                owner_references: Some(vec![owner("a")].into()),
                ..Default::default()
            }],
            ..Default::default()
        },
    )]);
    assert!(upsert(&mut images, &req("a", 600), None, now(5)));
    assert_eq!(images["nginx"].tags[0].version, Some(4));
    assert_eq!(images["nginx"].tags[0].created_at, Some(api_time(now(5))));
    assert_eq!(images["nginx"].pull_secrets.as_ref().map(Vec::len), Some(2));
    assert!(!upsert(&mut images, &req("a", 600), None, now(6)));
    assert_eq!(images["nginx"].tags[0].version, Some(4));
}

#[test]
fn hand_written_tag_gains_owner_and_is_pulled_again() {
    let mut images = BTreeMap::from([(
        "nginx".into(),
        ImageSpec {
            tags: vec![ImageTagSpec {
                tag: "1.25".into(),
                version: Some(2),
                ..Default::default()
            }],
            ..Default::default()
        },
    )]);
    assert!(upsert(&mut images, &req("a", 600), None, now(1)));
    assert_eq!(images["nginx"].tags[0].version, Some(3));
}

fn upgrader(uid: &str, job: &str) -> (EntryRequest, TagUpgrade) {
    let mut r = req(uid, 300);
    r.owner.kind = Some("NodeUpgradeJob".into());
    r.owner.name = Some(job.into());
    r.image = "kubeedge/installation-package".into();
    r.tag = "v1.17.0".into();
    (
        r,
        TagUpgrade {
            await_confirmation: false,
            version: "v1.17.0".into(),
            job: job.into(),
            image_digests: None,
        },
    )
}

fn pull_of(uid: &str, image: &str, tag: &str) -> EntryRequest {
    let mut r = req(uid, 600);
    r.image = image.into();
    r.tag = tag.into();
    r
}

fn tag_of<'a>(images: &'a BTreeMap<SharedStr, ImageSpec>, image: &str) -> &'a ImageTagSpec {
    &images[image].tags[0]
}

#[test]
fn upgrade_entries_run_once_per_upgrade() {
    let img = "kubeedge/installation-package";
    let upgrade_entry = |images: &BTreeMap<SharedStr, ImageSpec>| {
        images[img].entry("v1.17.0", Purpose::Upgrade).cloned()
    };
    // New entry: version from the upgrade's status, carrying the upgrade.
    let mut images = BTreeMap::new();
    let (u, up) = upgrader("u1", "up");
    assert!(upsert_upgrade(&mut images, &u, &up, Some(2), now(1)));
    let e = upgrade_entry(&images).expect("the upgrade entry");
    assert_eq!((e.version, e.purpose), (Some(3), Purpose::Upgrade));
    assert_eq!(e.upgrade.as_deref(), Some(&up));
    // Again: nothing changes.
    assert!(!upsert_upgrade(&mut images, &u, &up, Some(2), now(2)));

    // A pull job of the same tag writes its own entry; the upgrade's is untouched.
    assert!(upsert(
        &mut images,
        &pull_of("p1", img, "v1.17.0"),
        None,
        now(3)
    ));
    assert_eq!(images[img].tags.len(), 2);
    let pull = images[img].entry("v1.17.0", Purpose::Pull).cloned();
    let pull = pull.expect("the pull entry");
    assert_eq!((pull.version, pull.upgrade.is_none()), (Some(0), true));
    assert_eq!(upgrade_entry(&images), Some(e.clone()));

    // Another upgrade job of the tag joins the upgrade entry and runs once.
    let (u2, up2) = upgrader("u2", "up2");
    assert!(upsert_upgrade(&mut images, &u2, &up2, None, now(4)));
    let e2 = upgrade_entry(&images).expect("the upgrade entry");
    assert_eq!(e2.version, Some(4));
    assert_eq!(e2.created_at, Some(api_time(now(4))));
    assert_eq!(e2.upgrade.as_deref(), Some(&up2));
    assert!(!upsert_upgrade(&mut images, &u2, &up2, None, now(5)));
    assert_eq!(
        images[img].entry("v1.17.0", Purpose::Pull),
        Some(&pull),
        "the pull entry is untouched"
    );

    // The upgrade jobs leave: their entry goes, the pull's stays.
    assert!(release(&mut images, "u1"));
    assert!(release(&mut images, "u2"));
    assert_eq!(upgrade_entry(&images), None);
    assert_eq!(images[img].entry("v1.17.0", Purpose::Pull), Some(&pull));
    // The pull job leaves: gone.
    assert!(release(&mut images, "p1"));
    assert!(images.is_empty());
}

#[test]
fn a_pull_and_an_upgrade_of_one_tag_keep_their_own_versions_in_either_order() {
    let img = "kubeedge/installation-package";
    let versions = |images: &BTreeMap<SharedStr, ImageSpec>| {
        let of = |p| images[img].entry("v1.17.0", p).and_then(|t| t.version);
        (of(Purpose::Pull), of(Purpose::Upgrade))
    };
    let (u, up) = upgrader("u1", "up");
    let pull = pull_of("p1", img, "v1.17.0");
    // (case, steps: true = the upgrade arrives, false = the pull, and the
    // (pull, upgrade) versions after each step)
    type Case = (&'static str, Vec<(bool, (Option<i64>, Option<i64>))>);
    let cases: Vec<Case> = vec![
        (
            "pull first",
            vec![
                (false, (Some(0), None)),
                (true, (Some(0), Some(0))),
                (false, (Some(0), Some(0))),
                (true, (Some(0), Some(0))),
            ],
        ),
        (
            "upgrade first",
            vec![
                (true, (None, Some(0))),
                (false, (Some(0), Some(0))),
                (true, (Some(0), Some(0))),
            ],
        ),
    ];
    for (case, steps) in cases {
        let mut images = BTreeMap::new();
        for (i, (upgrade, want)) in steps.into_iter().enumerate() {
            if upgrade {
                upsert_upgrade(&mut images, &u, &up, None, now(i as i64));
            } else {
                upsert(&mut images, &pull, None, now(i as i64));
            }
            assert_eq!(versions(&images), want, "{case}: step {i}");
        }
    }
}

#[test]
fn release_drops_owner_then_tag_then_image() {
    let mut images = BTreeMap::new();
    upsert(&mut images, &req("a", 600), None, now(1));
    upsert(&mut images, &req("b", 600), None, now(2));
    images
        .entry("manual".into())
        .or_default()
        .tags
        .push(ImageTagSpec {
            tag: "v1".into(),
            ..Default::default()
        });
    assert!(owns_any(&images, "a"));
    assert!(release(&mut images, "a"));
    assert!(!owns_any(&images, "a"));
    assert_eq!(images["nginx"].tags.len(), 1, "b still owns it");
    assert!(release(&mut images, "b"));
    assert!(!images.contains_key("nginx"), "no owner left: gone");
    assert!(
        images.contains_key("manual"),
        "hand-written tags are not ours to remove"
    );
    assert!(!release(&mut images, "b"));
}

#[test]
fn a_confirmation_keeps_the_run_and_restarts_its_timeout() {
    let img = "kubeedge/installation-package";
    let mut images = BTreeMap::new();
    let (u, mut up) = upgrader("u1", "up");
    up.await_confirmation = true;
    assert!(upsert_upgrade(&mut images, &u, &up, None, now(1)));
    let first = tag_of(&images, img).clone();
    assert!(first.upgrade.as_ref().is_some_and(|u| u.await_confirmation));
    // Still waiting: nothing changes.
    assert!(!upsert_upgrade(&mut images, &u, &up, None, now(2)));
    // Confirmed: same version (no second run), a fresh createdAt.
    up.await_confirmation = false;
    assert!(upsert_upgrade(&mut images, &u, &up, None, now(9)));
    let confirmed = tag_of(&images, img);
    assert_eq!(confirmed.version, first.version);
    assert_eq!(confirmed.created_at, Some(api_time(now(9))));
    assert_eq!(confirmed.upgrade.as_deref(), Some(&up));
    // Another version is another run: bumped.
    let (_, mut other) = upgrader("u1", "up");
    other.version = "v1.18.0".into();
    assert!(upsert_upgrade(&mut images, &u, &other, None, now(10)));
    assert_eq!(tag_of(&images, img).version, first.version.map(|v| v + 1));
}

#[test]
fn would_change_answers_as_applying_to_the_whole_spec_does() {
    let mut holding = NodeImage::new("node-1", Default::default());
    let mut images = BTreeMap::new();
    upsert(&mut images, &req("a", 600), None, now(10));
    images.insert(
        "other".into(),
        ImageSpec {
            tags: vec![ImageTagSpec {
                tag: "1".into(),
                ..Default::default()
            }],
            ..Default::default()
        },
    );
    holding.spec.images = Some(images);
    let empty = NodeImage::new("node-2", Default::default());
    let upgrade = TagUpgrade {
        version: "v1.2.3".into(),
        job: "up".into(),
        await_confirmation: false,
        image_digests: None,
    };
    let cases: Vec<(
        &str,
        &NodeImage,
        Vec<EntryRequest>,
        Option<&TagUpgrade>,
        bool,
    )> = vec![
        (
            "entry held as asked",
            &holding,
            vec![req("a", 600)],
            None,
            false,
        ),
        (
            "pull policy edited",
            &holding,
            vec![req("a", 900)],
            None,
            true,
        ),
        ("another owner", &holding, vec![req("b", 600)], None, true),
        ("no entry yet", &empty, vec![req("a", 600)], None, true),
        (
            "an upgrade on top",
            &holding,
            vec![req("a", 600)],
            Some(&upgrade),
            true,
        ),
        ("nothing asked", &holding, vec![], None, false),
    ];
    for (name, ni, reqs, upgrade, want) in cases {
        let mut whole = ni.spec.images.clone().unwrap_or_default();
        let applied = apply_requests(ni, &mut whole, &reqs, upgrade, now(20));
        assert_eq!(applied, want, "{name}: applied to the whole spec");
        assert_eq!(would_change(ni, &reqs, upgrade, now(20)), want, "{name}");
    }
}

#[test]
fn a_moved_tag_is_pulled_again_once_by_entries_created_before_the_move() {
    let moved = |at: Option<i64>| {
        let mut r = req("a", 600);
        r.pull_again_before = at.map(now);
        r
    };
    // (entry created at, moved at, pulled again?): created before the move
    // pulls again; created at or after it (the re-pull itself, or a node
    // that started later) does not; no move, nothing.
    for (created, at, again) in [
        (10, Some(20), true),
        (20, Some(20), false),
        (30, Some(20), false),
        (10, None, false),
    ] {
        let mut images = BTreeMap::new();
        upsert(&mut images, &req("a", 600), None, now(created));
        let changed = upsert(&mut images, &moved(at), None, now(40));
        let tag = &images["nginx"].tags[0];
        assert_eq!(
            (changed, tag.version == Some(1)),
            (again, again),
            "{created} {at:?}"
        );
        // Written again at once: idempotent (createdAt is now past the move).
        assert!(
            !upsert(&mut images, &moved(at), None, now(41)),
            "{created} {at:?}"
        );
    }
}

#[test]
fn a_moved_tag_leaves_its_upgrade_entry_at_its_version() {
    let mut images = BTreeMap::new();
    let (u, up) = upgrader("u1", "up");
    let mut pull = pull_of("p1", "kubeedge/installation-package", "v1.17.0");
    upsert(&mut images, &pull, None, now(10));
    upsert_upgrade(&mut images, &u, &up, None, now(10));
    pull.pull_again_before = Some(now(20));
    upsert(&mut images, &pull, None, now(30));
    let image = &images["kubeedge/installation-package"];
    let v = |p| image.entry("v1.17.0", p).and_then(|t| t.version);
    assert_eq!((v(Purpose::Pull), v(Purpose::Upgrade)), (Some(1), Some(0)));
}

#[test]
fn a_p2p_note_goes_with_the_version_it_starts() {
    use nodeimage_api::kruise::{TagP2p, WaveRole};
    let seed = TagP2p {
        wave: Some(WaveRole::Seed),
        domain: Some("zone=a".into()),
        ..Default::default()
    };
    let noted = |uid: &str| EntryRequest {
        p2p: Some(seed.clone()),
        ..req(uid, 60)
    };
    let note = |images: &BTreeMap<SharedStr, ImageSpec>| {
        images["nginx"]
            .entry("1.25", Purpose::Pull)
            .and_then(|t| t.p2p.as_deref().cloned())
    };
    let mut images = BTreeMap::new();
    assert!(upsert(&mut images, &noted("a"), None, now(0)));
    assert_eq!(note(&images), Some(seed.clone()), "a new entry carries it");
    // The same job again (every reconcile writes its nodes): kept.
    upsert(&mut images, &req("a", 60), None, now(1));
    assert_eq!(note(&images), Some(seed.clone()), "no new version: kept");
    // Another job without P2P settings asks: a new version, not started by the waves.
    upsert(&mut images, &req("b", 60), None, now(2));
    assert_eq!(note(&images), None, "a new version without a note drops it");
    // A third job with waves: its new version carries its note.
    upsert(&mut images, &noted("c"), None, now(3));
    assert_eq!(note(&images), Some(seed));
}
