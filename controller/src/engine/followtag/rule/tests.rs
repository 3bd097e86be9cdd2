use super::*;

fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap_or_default()
}

fn notes(a: &[(&str, &str)]) -> BTreeMap<String, String> {
    a.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const IMAGE: &str = "127.0.0.1:5000/app:stable";

#[test]
fn the_annotation_is_read_bounded_and_names_itself_when_refused() {
    // (annotation, image, Some(interval secs) when followed, else a word of the refusal)
    let cases: [(Option<&str>, &str, Result<u64, &str>); 10] = [
        (Some("10m"), IMAGE, Ok(600)),
        (Some("1m"), IMAGE, Ok(60)),
        (Some("90"), IMAGE, Ok(90)),
        (Some("168h"), IMAGE, Ok(604_800)),
        (Some("59s"), IMAGE, Err("outside 1m0s to 168h0m0s")),
        (Some("169h"), IMAGE, Err("outside")),
        (Some("often"), IMAGE, Err("is not a duration")),
        (Some(""), IMAGE, Err("is not a duration")),
        (
            Some("5m"),
            "127.0.0.1:5000/app@sha256:0000000000000000000000000000000000000000000000000000000000000000",
            Err("pinned by digest"),
        ),
        (Some("5m"), "Not A Reference", Err("cannot follow")),
    ];
    for (value, image, want) in cases {
        let a = notes(&value.map(|v| vec![(FOLLOW_TAG, v)]).unwrap_or_default());
        match (ask(&a, image), want) {
            (Ask::Follow { interval, .. }, Ok(secs)) => {
                assert_eq!(interval, Duration::from_secs(secs), "{value:?}")
            }
            (Ask::Refused(why), Err(word)) => {
                assert!(
                    why.contains(FOLLOW_TAG) && why.contains(word),
                    "{value:?}: {why}"
                )
            }
            (got, want) => panic!("{value:?} {image}: {got:?}, want {want:?}"),
        }
    }
    assert_eq!(ask(&BTreeMap::new(), IMAGE), Ask::Off);
    // A tag-less image follows `latest`.
    let Ask::Follow { image, .. } = ask(&notes(&[(FOLLOW_TAG, "1m")]), "127.0.0.1:5000/app") else {
        panic!("not followed");
    };
    assert_eq!(image.pull_ref(), "127.0.0.1:5000/app:latest");
}

#[test]
fn due_over_a_clock() {
    let m = Duration::from_secs(60);
    for (last, now, want) in [
        (None, 0, Ok(())),
        (Some(0), 0, Err(60)),
        (Some(0), 59, Err(1)),
        (Some(0), 60, Ok(())),
        (Some(0), 3600, Ok(())),
        (Some(100), 50, Err(110)),
    ] {
        let got = due(last.map(at), m, at(now)).map_err(|d| d.as_secs());
        assert_eq!(got, want, "{last:?} {now}");
    }
}

fn follow(every: &str) -> Ask {
    ask(&notes(&[(FOLLOW_TAG, every)]), IMAGE)
}

fn seen(digest: Option<&str>, failure: Option<&str>) -> Seen {
    Seen {
        digest: digest.map(str::to_string),
        failure: failure.map(str::to_string),
    }
}

/// One row: what is asked, completed, what the lookups saw, the job's
/// annotations; then the annotations written, the events' reasons, since
/// when entries pull again, following.
struct Row {
    name: &'static str,
    ask: Ask,
    completed: bool,
    seen: Seen,
    current: Vec<(&'static str, &'static str)>,
    writes: Vec<(&'static str, Option<&'static str>)>,
    events: Vec<&'static str>,
    again: Option<i64>,
    following: bool,
}

const FOLLOWING_1: &str = "following 127.0.0.1:5000/app:stable every 1m0s: sha256:1";
const MOVED_100: &str = "2027-01-15T08:01:40Z";

#[test]
fn judge_table() {
    let rows = vec![
        Row {
            name: "first digest: recorded, said once, no re-pull",
            ask: follow("1m"),
            completed: false,
            seen: seen(Some("sha256:1"), None),
            current: vec![(FOLLOW_TAG, "1m")],
            writes: vec![
                (FOLLOWED_DIGEST, Some("sha256:1")),
                (FOLLOW_STATUS, Some(FOLLOWING_1)),
            ],
            events: vec![FOLLOWED],
            again: None,
            following: true,
        },
        Row {
            name: "same digest: nothing",
            ask: follow("1m"),
            completed: false,
            seen: seen(Some("sha256:1"), None),
            current: vec![
                (FOLLOW_TAG, "1m"),
                (FOLLOWED_DIGEST, "sha256:1"),
                (FOLLOW_STATUS, FOLLOWING_1),
            ],
            writes: vec![],
            events: vec![],
            again: None,
            following: true,
        },
        Row {
            name: "moved: new digest, moved-at now, TagMoved, re-pull",
            ask: follow("1m"),
            completed: false,
            seen: seen(Some("sha256:2"), None),
            current: vec![
                (FOLLOW_TAG, "1m"),
                (FOLLOWED_DIGEST, "sha256:1"),
                (FOLLOW_STATUS, FOLLOWING_1),
            ],
            writes: vec![
                (FOLLOWED_DIGEST, Some("sha256:2")),
                (MOVED_AT, Some(MOVED_100)),
                (
                    FOLLOW_STATUS,
                    Some("following 127.0.0.1:5000/app:stable every 1m0s: sha256:2"),
                ),
            ],
            events: vec![MOVED],
            again: Some(100),
            following: true,
        },
        Row {
            name: "moved earlier: entries keep pulling again since then",
            ask: follow("1m"),
            completed: false,
            seen: seen(Some("sha256:1"), None),
            current: vec![
                (FOLLOWED_DIGEST, "sha256:1"),
                (MOVED_AT, "2027-01-15T08:00:10Z"),
                (FOLLOW_STATUS, FOLLOWING_1),
            ],
            writes: vec![],
            events: vec![],
            again: Some(10),
            following: true,
        },
        Row {
            name: "not known yet (another job is looking up): nothing",
            ask: follow("1m"),
            completed: false,
            seen: seen(None, None),
            current: vec![],
            writes: vec![],
            events: vec![],
            again: None,
            following: true,
        },
        Row {
            name: "lookup failed: status and a warning; digest kept",
            ask: follow("1m"),
            completed: false,
            seen: seen(Some("sha256:1"), Some("HTTP 429")),
            current: vec![(FOLLOWED_DIGEST, "sha256:1"), (FOLLOW_STATUS, FOLLOWING_1)],
            writes: vec![(FOLLOW_STATUS, Some("lookup failed: HTTP 429"))],
            events: vec![LOOKUP_FAILED],
            again: None,
            following: true,
        },
        Row {
            name: "the same failure again: said once",
            ask: follow("1m"),
            completed: false,
            seen: seen(None, Some("HTTP 429")),
            current: vec![(FOLLOW_STATUS, "lookup failed: HTTP 429")],
            writes: vec![],
            events: vec![],
            again: None,
            following: true,
        },
        Row {
            name: "after a failure, the same digest: status back, no event",
            ask: follow("1m"),
            completed: false,
            seen: seen(Some("sha256:1"), None),
            current: vec![
                (FOLLOWED_DIGEST, "sha256:1"),
                (FOLLOW_STATUS, "lookup failed: HTTP 429"),
            ],
            writes: vec![(FOLLOW_STATUS, Some(FOLLOWING_1))],
            events: vec![],
            again: None,
            following: true,
        },
        Row {
            name: "refused: a warning once, nothing followed",
            ask: follow("30s"),
            completed: false,
            seen: Seen::default(),
            current: vec![(FOLLOW_TAG, "30s")],
            writes: vec![(
                FOLLOW_STATUS,
                Some(
                    "nodeimage.dev/follow-tag: \"30s\" is outside 1m0s to 168h0m0s; the tag is not followed",
                ),
            )],
            events: vec![REFUSED],
            again: None,
            following: false,
        },
        Row {
            name: "completed: no longer followed, said once",
            ask: follow("1m"),
            completed: true,
            seen: Seen::default(),
            current: vec![(FOLLOWED_DIGEST, "sha256:1"), (FOLLOW_STATUS, FOLLOWING_1)],
            writes: vec![(FOLLOW_STATUS, Some("not followed: the job has completed"))],
            events: vec![ENDED],
            again: None,
            following: false,
        },
        Row {
            name: "annotation removed: our annotations go",
            ask: Ask::Off,
            completed: false,
            seen: Seen::default(),
            current: vec![
                (FOLLOWED_DIGEST, "sha256:1"),
                (MOVED_AT, MOVED_100),
                (FOLLOW_STATUS, FOLLOWING_1),
            ],
            writes: vec![
                (FOLLOWED_DIGEST, None),
                (MOVED_AT, None),
                (FOLLOW_STATUS, None),
            ],
            events: vec![],
            again: None,
            following: false,
        },
        Row {
            name: "never followed: nothing",
            ask: Ask::Off,
            completed: false,
            seen: Seen::default(),
            current: vec![],
            writes: vec![],
            events: vec![],
            again: None,
            following: false,
        },
    ];
    for row in rows {
        let v = judge(
            &row.ask,
            row.completed,
            &row.seen,
            &notes(&row.current),
            at(100),
        );
        let writes: BTreeMap<&str, Option<String>> = row
            .writes
            .iter()
            .map(|(k, v)| (*k, v.map(str::to_string)))
            .collect();
        assert_eq!(v.annotations, writes, "{}", row.name);
        let reasons: Vec<&str> = v.events.iter().map(|e| e.reason).collect();
        assert_eq!(reasons, row.events, "{}", row.name);
        assert_eq!(v.pull_again_before, row.again.map(at), "{}", row.name);
        assert_eq!(v.following, row.following, "{}", row.name);
    }
}

#[test]
fn tag_moved_names_the_old_and_new_digest() {
    let v = judge(
        &follow("1m"),
        false,
        &seen(Some("sha256:2"), None),
        &notes(&[(FOLLOWED_DIGEST, "sha256:1")]),
        at(0),
    );
    let note = &v.events[0].note;
    assert!(
        note.contains("sha256:1") && note.contains("sha256:2") && note.contains(IMAGE),
        "{note}"
    );
}
