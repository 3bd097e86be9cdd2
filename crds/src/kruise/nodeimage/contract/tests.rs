use super::*;
use crate::kruise::nodeimage::tests::{spec, status};

#[test]
fn recount_counts_each_spec_tag_once_by_matching_version() {
    use ImagePullPhase::*;
    // (name, spec tags, status entries, expected [desired, waiting, pulling, succeeded, failed])
    type Case<'a> = (
        &'a str,
        Vec<(&'a str, &'a str, Option<i64>)>,
        Vec<(&'a str, &'a str, Option<i64>, ImagePullPhase)>,
        [i32; 5],
    );
    let cases: Vec<Case> = vec![
        ("empty", vec![], vec![], [0, 0, 0, 0, 0]),
        (
            "no status counts as waiting",
            vec![("nginx", "1.25", None)],
            vec![],
            [1, 1, 0, 0, 0],
        ),
        (
            "absent version equals 0",
            vec![("nginx", "1.25", None), ("nginx", "1.26", Some(0))],
            vec![
                ("nginx", "1.25", Some(0), Succeeded),
                ("nginx", "1.26", None, Failed),
            ],
            [2, 0, 0, 1, 1],
        ),
        (
            "old version does not count",
            vec![("nginx", "1.25", Some(2))],
            vec![("nginx", "1.25", Some(1), Succeeded)],
            [1, 1, 0, 0, 0],
        ),
        (
            "every phase, across images",
            vec![
                ("a", "1", None),
                ("a", "2", None),
                ("b", "1", None),
                ("c", "1", None),
            ],
            vec![
                ("a", "1", None, Waiting),
                ("a", "2", None, Pulling),
                ("b", "1", None, Succeeded),
                ("c", "1", None, Failed),
            ],
            [4, 1, 1, 1, 1],
        ),
        (
            "status of a tag not in spec is ignored",
            vec![("a", "1", None)],
            vec![("a", "1", None, Pulling), ("a", "gone", None, Failed)],
            [1, 0, 1, 0, 0],
        ),
    ];
    for (name, tags, entries, want) in cases {
        let mut s = status(&entries);
        s.recount(&spec(&tags));
        let got = [
            s.desired,
            s.waiting.unwrap_or(-1),
            s.pulling.unwrap_or(-1),
            s.succeeded.unwrap_or(-1),
            s.failed.unwrap_or(-1),
        ];
        assert_eq!(got, want, "{name}");
    }
}

fn spec_entry(tag: &str, version: Option<i64>) -> ImageTagSpec {
    ImageTagSpec {
        tag: tag.into(),
        version,
        ..Default::default()
    }
}

/// [`spec_entry`] with `purpose`.
fn spec_for(tag: &str, purpose: Purpose, version: Option<i64>) -> ImageTagSpec {
    ImageTagSpec {
        purpose,
        ..spec_entry(tag, version)
    }
}

/// The status entry a node writes for [`spec_entry`]`(tag, version)`.
fn status_entry(tag: &str, version: Option<i64>) -> ImageTagStatus {
    let spec = spec_entry(tag, version);
    let (tag, version) = (spec.tag, spec.version);
    ImageTagStatus {
        tag,
        version,
        ..Default::default()
    }
}

/// [`status_entry`] with `purpose`.
fn status_for(tag: &str, purpose: Purpose, version: Option<i64>) -> ImageTagStatus {
    ImageTagStatus {
        purpose,
        ..status_entry(tag, version)
    }
}

#[test]
fn an_entry_answers_the_same_tag_and_purpose_at_the_same_version() {
    use Purpose::*;
    // (case, status entry (tag, purpose, version), spec entry (tag, purpose, version), answers)
    type Entry<'a> = (&'a str, Purpose, Option<i64>);
    let cases: Vec<(&str, Entry, Entry, bool)> = vec![
        (
            "same tag and version",
            ("v1", Pull, Some(2)),
            ("v1", Pull, Some(2)),
            true,
        ),
        (
            "both without a version",
            ("v1", Pull, None),
            ("v1", Pull, None),
            true,
        ),
        (
            "absent status version is 0",
            ("v1", Pull, None),
            ("v1", Pull, Some(0)),
            true,
        ),
        (
            "absent spec version is 0",
            ("v1", Pull, Some(0)),
            ("v1", Pull, None),
            true,
        ),
        (
            "an older version",
            ("v1", Pull, Some(1)),
            ("v1", Pull, Some(2)),
            false,
        ),
        (
            "a newer version",
            ("v1", Pull, Some(3)),
            ("v1", Pull, Some(2)),
            false,
        ),
        (
            "absent is not 1",
            ("v1", Pull, None),
            ("v1", Pull, Some(1)),
            false,
        ),
        (
            "another tag",
            ("v2", Pull, Some(2)),
            ("v1", Pull, Some(2)),
            false,
        ),
        (
            "tags compare exactly",
            ("V1", Pull, None),
            ("v1", Pull, None),
            false,
        ),
        (
            "a digest",
            ("sha256:ab", Pull, None),
            ("sha256:ab", Pull, Some(0)),
            true,
        ),
        (
            "an upgrade answers its upgrade",
            ("v1", Upgrade, Some(1)),
            ("v1", Upgrade, Some(1)),
            true,
        ),
        (
            "an upgrade's result never answers a pull of the tag",
            ("v1", Upgrade, Some(0)),
            ("v1", Pull, Some(0)),
            false,
        ),
        (
            "a pull's result never answers an upgrade of the tag",
            ("v1", Pull, Some(0)),
            ("v1", Upgrade, Some(0)),
            false,
        ),
        (
            "purposes differ, versions too",
            ("v1", Pull, Some(3)),
            ("v1", Upgrade, Some(0)),
            false,
        ),
    ];
    for (case, (st, su, sv), (pt, pu, pv), want) in cases {
        let got = status_for(st, su, sv).answers(&spec_for(pt, pu, pv));
        assert_eq!(got, want, "{case}");
        let at = status_for(st, su, sv).answers_at(pt, pu, pv.unwrap_or(0));
        assert_eq!(at, want, "{case}: answers_at");
        let on = status_for(st, su, sv).reports_on(pt, pu);
        assert_eq!(on, st == pt && su == pu, "{case}: reports_on");
    }
}

#[test]
fn a_requester_kind_writes_entries_of_one_purpose() {
    // (owner kind, purpose of its entries)
    let cases = [
        ("ImagePullJob", Purpose::Pull),
        ("ImagePrePullJob", Purpose::Pull),
        ("ImageListPullJob", Purpose::Pull),
        ("", Purpose::Pull),
        ("NodeUpgradeJob", Purpose::Upgrade),
        ("nodeupgradejob", Purpose::Pull),
    ];
    for (kind, want) in cases {
        assert_eq!(purpose_of(kind), want, "{kind:?}");
    }
}

#[test]
fn a_pull_and_an_upgrade_of_one_tag_are_two_entries() {
    use Purpose::*;
    let image = ImageSpec {
        tags: vec![
            spec_for("v1", Pull, Some(3)),
            spec_for("v1", Upgrade, Some(0)),
        ],
        ..Default::default()
    };
    // (tag, purpose, version of the entry found)
    let cases = [
        ("v1", Pull, Some(Some(3))),
        ("v1", Upgrade, Some(Some(0))),
        ("v2", Pull, None),
        ("v2", Upgrade, None),
    ];
    for (tag, purpose, want) in cases {
        let got = image.entry(tag, purpose).map(|t| t.version);
        assert_eq!(got, want, "{tag} {purpose:?}");
    }
    let mut image = image;
    if let Some(t) = image.entry_mut("v1", Upgrade) {
        t.version = Some(7);
    }
    assert_eq!(
        image.tags[0].version,
        Some(3),
        "the pull entry is untouched"
    );
    assert_eq!(image.tags[1].version, Some(7));
    let st = ImageStatus {
        tags: vec![
            status_for("v1", Upgrade, Some(2)),
            status_for("v1", Pull, Some(5)),
        ],
    };
    assert_eq!(st.reported("v1", Pull).and_then(|s| s.version), Some(5));
    assert_eq!(st.reported("v1", Upgrade).and_then(|s| s.version), Some(2));
    assert_eq!(st.reported("v2", Pull), None);
}

#[test]
fn each_purpose_reads_its_own_outcome_and_counts_once() {
    use ImagePullPhase::*;
    // A pull (version 3) and an upgrade (version 0) of app:v1, and the
    // node's two answers: the pull succeeded, the upgrade failed.
    let mut ni = NodeImage::new(
        "n",
        NodeImageSpec {
            images: Some(BTreeMap::from([(
                SharedStr::from("app"),
                ImageSpec {
                    tags: vec![
                        spec_for("v1", Purpose::Upgrade, Some(0)),
                        spec_for("v1", Purpose::Pull, Some(3)),
                    ],
                    ..Default::default()
                },
            )])),
            removals: None,
        },
    );
    let upgrade = ImageTagStatus {
        phase: Failed,
        ..status_for("v1", Purpose::Upgrade, Some(0))
    };
    let pull = ImageTagStatus {
        phase: Succeeded,
        ..status_for("v1", Purpose::Pull, Some(3))
    };
    let mut st = NodeImageStatus {
        image_statuses: Some(BTreeMap::from([(
            SharedStr::from("app"),
            ImageStatus {
                tags: vec![pull.clone(), upgrade.clone()],
            },
        )])),
        ..Default::default()
    };
    st.recount(&ni.spec);
    assert_eq!(
        (st.desired, st.succeeded, st.failed, st.waiting),
        (2, Some(1), Some(1), Some(0))
    );
    let spec = &ni.spec.images.as_ref().unwrap()["app"];
    assert_eq!(st.entry_for("app", &spec.tags[0]), Some(&upgrade));
    assert_eq!(st.entry_for("app", &spec.tags[1]), Some(&pull));
    ni.status = Some(st);
    // The status a node writes follows the spec's purposes, whatever the
    // writer's closure sets, and keeps each entry's own answer.
    let out = status_for_spec(&ni, |_, t, old| {
        let mut e = old.cloned().unwrap_or_default();
        e.tag = t.tag.clone();
        e
    });
    let tags = &out.image_statuses.as_ref().unwrap()["app"].tags;
    assert_eq!(tags, &vec![upgrade, pull]);
    let fresh = status_for_spec(&ni, |_, t, _| ImageTagStatus {
        tag: t.tag.clone(),
        ..Default::default()
    });
    let purposes: Vec<Purpose> = fresh.image_statuses.as_ref().unwrap()["app"]
        .tags
        .iter()
        .map(|t| t.purpose)
        .collect();
    assert_eq!(purposes, vec![Purpose::Upgrade, Purpose::Pull]);
}

#[test]
fn entry_for_finds_the_answering_entry_of_the_image() {
    use ImagePullPhase::*;
    let st = status(&[
        ("a", "v1", Some(1), Failed),
        ("a", "v1", Some(2), Pulling),
        ("a", "v2", None, Succeeded),
        ("b", "v1", Some(1), Succeeded),
    ]);
    // (case, image, spec entry (tag, version), phase of the entry found)
    type Case<'a> = (
        &'a str,
        &'a str,
        (&'a str, Option<i64>),
        Option<ImagePullPhase>,
    );
    let cases: Vec<Case> = vec![
        ("the current version", "a", ("v1", Some(2)), Some(Pulling)),
        ("an older version", "a", ("v1", Some(1)), Some(Failed)),
        ("no entry of that version", "a", ("v1", Some(3)), None),
        ("absent matches 0", "a", ("v2", Some(0)), Some(Succeeded)),
        ("the image decides", "b", ("v1", Some(1)), Some(Succeeded)),
        ("another image's entry", "b", ("v2", None), None),
        ("an image without status", "c", ("v1", None), None),
    ];
    for (case, image, (tag, version), want) in cases {
        let found = st.entry_for(image, &spec_entry(tag, version));
        assert_eq!(found.map(|e| e.phase), want, "{case}");
    }
    let empty = NodeImageStatus::default();
    assert_eq!(empty.entry_for("a", &spec_entry("v1", None)), None);
}

#[test]
fn every_pull_phase_is_final_or_not() {
    use ImagePullPhase::*;
    let cases = [
        (Waiting, false),
        (Pulling, false),
        (Succeeded, true),
        (Failed, true),
    ];
    for (phase, finished) in cases {
        assert_eq!(phase.is_finished(), finished, "{phase:?}");
    }
}

#[test]
fn every_task_state_is_final_or_not_as_the_api_spells_it() {
    use TaskEnd::*;
    // (state, how it ended): the v1alpha1 states of both KubeEdge kinds.
    let cases: Vec<(Option<&str>, Option<TaskEnd>)> = vec![
        (None, None),
        (Some(""), None),
        (Some(state::INIT), None),
        (Some("Checking"), None),
        (Some("Pulling"), None),
        (Some("WaitingConfirmation"), None),
        (Some("BackingUp"), None),
        (Some("Upgrading"), None),
        (Some("RollingBack"), None),
        (Some(state::SUCCESSFUL), Some(Successful)),
        (Some(state::FAILED), Some(Failed)),
        // Only the API's exact values are final.
        (Some("successful"), None),
        (Some("FAILED"), None),
        // v1alpha2 phases are not v1alpha1 states.
        (Some("Completed"), None),
        (Some("Failure"), None),
    ];
    for (state, end) in cases {
        assert_eq!(task_end(state), end, "{state:?}");
        assert_eq!(task_is_final(state), end.is_some(), "{state:?}");
    }
}

#[test]
fn a_write_refused_because_the_object_moved_on_is_stale() {
    use serde_json::json;
    // (case, the API server's answer, failed test, stale)
    let cases = [
        (
            "resourceVersion conflict",
            json!({"status": "Failure", "reason": "Conflict", "code": 409,
                   "message": "the object has been modified",
                   "details": {"name": "n", "kind": "nodeimages"}}),
            false,
            true,
        ),
        (
            "a failed JSON Patch test",
            json!({"status": "Failure", "reason": "Invalid", "code": 422,
                   "message": "the server rejected our request due to an error in our request"}),
            true,
            true,
        ),
        (
            "a failed test with empty details",
            json!({"status": "Failure", "reason": "Invalid", "code": 422, "details": {}}),
            true,
            true,
        ),
        (
            "a schema rejection",
            json!({"status": "Failure", "reason": "Invalid", "code": 422,
                   "details": {"name": "n", "kind": "NodeImage",
                               "causes": [{"reason": "FieldValueInvalid", "message": "too many", "field": "spec.images"}]}}),
            false,
            false,
        ),
        (
            "a create of an object that exists",
            json!({"status": "Failure", "reason": "AlreadyExists", "code": 409}),
            false,
            false,
        ),
        (
            "gone",
            json!({"status": "Failure", "reason": "NotFound", "code": 404}),
            false,
            false,
        ),
        (
            "a server error",
            json!({"status": "Failure", "reason": "InternalError", "code": 500}),
            false,
            false,
        ),
    ];
    for (case, answer, failed_test, stale) in cases {
        let status: kube::core::Status = serde_json::from_value(answer).expect(case);
        assert_eq!(is_failed_test(&status), failed_test, "{case}");
        assert_eq!(is_stale_write(&status), stale, "{case}");
    }
}

#[test]
fn a_status_for_the_spec_keeps_only_answering_entries() {
    use ImagePullPhase::*;
    let mut ni = NodeImage::new("n", spec(&[("a", "v1", Some(2)), ("a", "v2", None)]));
    let mut observed = status(&[
        ("a", "v1", Some(1), Succeeded),
        ("a", "v2", Some(0), Failed),
        ("gone", "v1", None, Succeeded),
    ]);
    observed.first_sync_status = Some(Default::default());
    ni.status = Some(observed);
    let mut seen = Vec::new();
    let out = status_for_spec(&ni, |image, t, old| {
        seen.push((image.to_string(), t.tag.to_string(), old.map(|o| o.phase)));
        old.cloned().unwrap_or_else(|| ImageTagStatus {
            tag: t.tag.clone(),
            version: t.version,
            ..Default::default()
        })
    });
    assert_eq!(
        seen,
        vec![
            ("a".to_string(), "v1".to_string(), None),
            ("a".to_string(), "v2".to_string(), Some(Failed)),
        ]
    );
    let images: Vec<&str> = out
        .image_statuses
        .iter()
        .flatten()
        .map(|(i, _)| i.as_str())
        .collect();
    assert_eq!(images, ["a"]);
    assert!(out.first_sync_status.is_some());
    assert_eq!(
        (out.desired, out.waiting, out.failed),
        (2, Some(1), Some(1))
    );
}

#[test]
fn failure_cause_reads_the_words_its_writers_use() {
    use FailureCause::*;
    // (message as written, cause)
    let cases = [
        ("check disk failed: 91% used > 80%", Check),
        ("check gpu is not supported (use disk, cpu or mem)", Check),
        (
            "exceeded activeDeadlineSeconds (30s) while waiting for a pull slot",
            Timeout,
        ),
        (
            "node did not respond within 10m0s (no status for version 0)",
            Timeout,
        ),
        (
            "pull did not finish within activeDeadlineSeconds (60s) of createdAt",
            Timeout,
        ),
        // Naming the field is not running out of time.
        (
            "invalid entry: pullPolicy.activeDeadlineSeconds 0 must be positive",
            Pull,
        ),
        ("not found: manifest unknown", Pull),
        ("the upgrade tool did not respond", Pull),
    ];
    for (message, want) in cases {
        assert_eq!(failure_cause(message), want, "{message}");
    }
}
