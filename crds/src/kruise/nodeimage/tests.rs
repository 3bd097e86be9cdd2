//! Fixtures the NodeImage tests share, and the tests of the status types.

use super::*;
use crate::interned::SharedStr;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::BTreeMap;

/// A spec holding `(image, tag, version)` entries.
pub(super) fn spec(tags: &[(&str, &str, Option<i64>)]) -> NodeImageSpec {
    let mut images: BTreeMap<SharedStr, ImageSpec> = BTreeMap::new();
    for (image, tag, version) in tags {
        images
            .entry((*image).into())
            .or_default()
            .tags
            .push(ImageTagSpec {
                tag: (*tag).into(),
                version: *version,
                ..Default::default()
            });
    }
    NodeImageSpec {
        images: Some(images),
        removals: None,
    }
}

/// A status holding `(image, tag, version, phase)` entries.
pub(super) fn status(entries: &[(&str, &str, Option<i64>, ImagePullPhase)]) -> NodeImageStatus {
    let mut statuses: BTreeMap<SharedStr, ImageStatus> = BTreeMap::new();
    for (image, tag, version, phase) in entries {
        statuses
            .entry((*image).into())
            .or_default()
            .tags
            .push(ImageTagStatus {
                tag: (*tag).into(),
                version: *version,
                phase: *phase,
                ..Default::default()
            });
    }
    NodeImageStatus {
        image_statuses: Some(statuses),
        ..Default::default()
    }
}

/// The object a daemon observed: generation 1, image `reg.io/a` with
/// tag 1 at version 2 (Pulling), image `b` with tag 1 (Succeeded).
pub(super) fn observed() -> NodeImage {
    let mut ni = NodeImage::new("n", spec(&[("reg.io/a", "1", Some(2)), ("b", "1", None)]));
    ni.metadata.uid = Some("u1".into());
    ni.metadata.generation = Some(1);
    let mut st = status(&[
        ("reg.io/a", "1", Some(2), ImagePullPhase::Pulling),
        ("b", "1", None, ImagePullPhase::Succeeded),
    ]);
    st.recount(&ni.spec);
    ni.status = Some(st);
    ni
}

/// What the daemon writes on top of [`observed`]: `reg.io/a` Succeeded.
pub(super) fn written(ni: &NodeImage) -> NodeImageStatus {
    status_for_spec(ni, |_, t, old| {
        let mut e = old.cloned().unwrap_or_default();
        e.tag = t.tag.clone();
        e.phase = ImagePullPhase::Succeeded;
        e
    })
}

#[test]
fn a_tag_status_has_flat_json_and_boxes_only_what_an_upgrade_sets() {
    let pull = serde_json::json!({
        "tag": "v1", "phase": "Succeeded", "progress": 100, "version": 2,
        "imageID": "reg/a@sha256:1", "startTime": "2026-11-25T10:00:00Z",
        "completionTime": "2026-11-25T10:00:05Z", "message": "pulled",
    });
    let upgrade = serde_json::json!({
        "tag": "v1.31", "purpose": "Upgrade", "phase": "Pulling", "upgradeState": "BackingUp",
        "upgradeLog": "/var/log/up.log", "fromVersion": "v1.30", "toVersion": "v1.31",
    });
    for (case, json, boxed) in [("pull", pull, false), ("upgrade", upgrade, true)] {
        let st: ImageTagStatus = serde_json::from_value(json.clone()).expect(case);
        assert_eq!(st.upgrade.is_some(), boxed, "{case}");
        assert_eq!(serde_json::to_value(&st).expect(case), json, "{case}");
    }
    let st: ImageTagStatus = serde_json::from_value(serde_json::json!({
        "tag": "v1.31", "phase": "Succeeded", "upgradeState": "Successful",
        "fromVersion": "v1.30", "toVersion": "v1.31",
    }))
    .expect("decodes");
    assert_eq!(st.upgrade_state(), Some(UpgradeState::Successful));
    assert_eq!(
        (st.from_version(), st.to_version()),
        (Some("v1.30"), Some("v1.31"))
    );
    assert_eq!(TagUpgradeStatus::default().boxed(), None);
    assert!(std::mem::size_of::<ImageTagStatus>() < std::mem::size_of::<TagStatusFields>());
}

/// A flat status entry with every field set. Written out without `..`, so
/// a field added to the type must be added here (and so to the round trip).
fn every_field() -> TagStatusFields {
    let time = |s: &str| Time(s.parse().expect("an RFC 3339 time"));
    TagStatusFields {
        tag: "v1.31".into(),
        purpose: Purpose::Upgrade,
        phase: ImagePullPhase::Pulling,
        progress: Some(42),
        start_time: Some(time("2026-11-25T10:00:00Z")),
        completion_time: Some(time("2026-11-25T10:00:05Z")),
        version: Some(3),
        image_id: Some("reg/a@sha256:1".into()),
        message: Some("backing up".into()),
        upgrade_state: Some(UpgradeState::BackingUp),
        upgrade_log: Some("/var/log/up.log".into()),
        from_version: Some("v1.30.0".into()),
        to_version: Some("v1.31.0".into()),
    }
}

#[test]
fn every_status_field_round_trips_through_both_status_types() {
    let json = serde_json::to_value(every_field()).expect("serialises");
    // Every field of the schema is set: none is left out of the round trip.
    let schema = serde_json::to_value(schemars::schema_for!(TagStatusFields)).expect("a schema");
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut keys: Vec<String> = v
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(keys(&json), keys(&schema["properties"]));

    // Flat to boxed: each field lands where it belongs (destructured
    // without `..`, so a new field of ImageTagStatus must be checked here).
    let ImageTagStatus {
        tag,
        purpose,
        phase,
        progress,
        start_time,
        completion_time,
        version,
        image_id,
        message,
        upgrade,
    } = ImageTagStatus::from(every_field());
    let TagUpgradeStatus {
        state,
        log,
        from_version,
        to_version,
    } = *upgrade.expect("the upgrade fields are set");
    let flat = every_field();
    assert_eq!(
        (tag, purpose, phase, progress, version, image_id, message),
        (
            flat.tag,
            flat.purpose,
            flat.phase,
            flat.progress,
            flat.version,
            flat.image_id,
            flat.message
        )
    );
    assert_eq!(
        (start_time, completion_time),
        (flat.start_time, flat.completion_time)
    );
    assert_eq!(
        (state, log, from_version, to_version),
        (
            flat.upgrade_state,
            flat.upgrade_log,
            flat.from_version,
            flat.to_version
        )
    );

    // Boxed to flat and back, and through JSON both ways: nothing is lost.
    let boxed = ImageTagStatus::from(every_field());
    let again = ImageTagStatus::from(TagStatusFields::from(boxed.clone()));
    assert_eq!(again, boxed);
    assert_eq!(
        serde_json::to_value(TagStatusFields::from(boxed.clone())).expect("serialises"),
        json
    );
    let decoded: ImageTagStatus = serde_json::from_value(json.clone()).expect("decodes");
    assert_eq!(decoded, boxed);
    assert_eq!(serde_json::to_value(&decoded).expect("serialises"), json);
}

#[test]
fn a_rate_limited_entry_names_its_registry_and_nothing_else_does() {
    use super::status::{ImagePullPhase, ImageTagStatus};
    let msg = ImageTagStatus::rate_limited_message("docker.io", 20, "429 Too Many Requests");
    let entry = |phase, message: Option<&str>| ImageTagStatus {
        tag: "v1".into(),
        phase,
        message: message.map(Into::into),
        ..Default::default()
    };
    let cases: &[(ImagePullPhase, Option<&str>, Option<&str>)] = &[
        (
            ImagePullPhase::Waiting,
            Some(msg.as_str()),
            Some("docker.io"),
        ),
        (ImagePullPhase::Pulling, Some(msg.as_str()), None),
        (ImagePullPhase::Failed, Some(msg.as_str()), None),
        (ImagePullPhase::Waiting, None, None),
        (
            ImagePullPhase::Waiting,
            Some("waiting for a pull slot"),
            None,
        ),
        (
            ImagePullPhase::Waiting,
            Some("rate limited by registry , x"),
            None,
        ),
        (
            ImagePullPhase::Waiting,
            Some("rate limited by registry 127.0.0.1:5000, next try in 5s: 429"),
            Some("127.0.0.1:5000"),
        ),
    ];
    for (phase, message, want) in cases {
        assert_eq!(
            entry(*phase, *message).rate_limited_by(),
            *want,
            "{phase:?} {message:?}"
        );
    }
}

#[test]
fn a_tag_entry_is_keyed_by_tag_and_purpose_and_pull_is_the_default() {
    // The CRD keys `tags` by both, with `purpose` defaulted (a list-map
    // key must be required or defaulted), and ties `upgrade` to it.
    let crd = serde_json::to_value(<NodeImage as kube::CustomResourceExt>::crd()).expect("crd");
    let tags = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["images"]["additionalProperties"]["properties"]["tags"];
    assert_eq!(
        tags["x-kubernetes-list-map-keys"],
        serde_json::json!(["tag", "purpose"])
    );
    assert_eq!(tags["items"]["properties"]["purpose"]["default"], "Pull");
    let rules = tags["items"]["x-kubernetes-validations"].to_string();
    assert!(rules.contains("self.purpose == 'Upgrade'"), "{rules}");
    // (case, entry JSON, purpose decoded, JSON written back)
    let cases = [
        (
            "a hand-written OpenKruise entry",
            serde_json::json!({"tag": "v1"}),
            Purpose::Pull,
            serde_json::json!({"tag": "v1", "purpose": "Pull"}),
        ),
        (
            "an upgrade",
            serde_json::json!({"tag": "v1", "purpose": "Upgrade",
                               "upgrade": {"version": "v1.2.3", "job": "j"}}),
            Purpose::Upgrade,
            serde_json::json!({"tag": "v1", "purpose": "Upgrade",
                               "upgrade": {"version": "v1.2.3", "job": "j"}}),
        ),
    ];
    for (case, json, purpose, back) in cases {
        let t: ImageTagSpec = serde_json::from_value(json).expect(case);
        assert_eq!(t.purpose, purpose, "{case}");
        // Written as the API server stores it (defaulted), so a JSON Patch
        // `test` of the entry as read matches.
        assert_eq!(serde_json::to_value(&t).expect(case), back, "{case}");
    }
    // A pull's status carries no purpose: it reads as OpenKruise's.
    let pull = ImageTagStatus {
        tag: "v1".into(),
        ..Default::default()
    };
    let json = serde_json::to_value(&pull).expect("serialises");
    assert_eq!(json, serde_json::json!({"tag": "v1", "phase": "Waiting"}));
}
