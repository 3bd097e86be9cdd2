use super::*;

fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600 + s, 0).unwrap_or_default()
}

#[test]
fn deadlines_table() {
    let ads = |s: i64| ImageTagPullPolicy {
        active_deadline_seconds: Some(s),
        ..Default::default()
    };
    let timeout = TimeDelta::seconds(60);
    // (policy, unreported, (seconds after creation, no_response) earliest first)
    let cases = [
        (ImageTagPullPolicy::default(), false, vec![]),
        (ImageTagPullPolicy::default(), true, vec![(60, true)]),
        (ads(600), false, vec![(605, false)]),
        (ads(600), true, vec![(60, true), (605, false)]),
        (ads(10), true, vec![(15, false), (60, true)]),
        (ads(-5), false, vec![(5, false)]),
    ];
    for (policy, unreported, want) in cases {
        let got: Vec<(i64, bool)> = deadlines(at(0), 3, &policy, unreported, timeout)
            .iter()
            .map(|d| ((d.at - at(0)).num_seconds(), d.no_response))
            .collect();
        assert_eq!(got, want, "{policy:?}, unreported {unreported}");
    }
    let d = deadlines(at(0), 3, &ads(600), true, timeout);
    assert_eq!(
        d[0].message,
        "node did not respond within 1m0s (no status for version 3)"
    );
    assert_eq!(
        d[1].message,
        "pull did not finish within activeDeadlineSeconds (600s) of createdAt"
    );
}

#[test]
fn expiry_needs_a_completion_and_a_ttl() {
    let done = |t: Option<i64>| ImageTagStatus {
        completion_time: t.map(|s| api_time(at(s))),
        ..Default::default()
    };
    let ttl = Some(TimeDelta::seconds(30));
    assert_eq!(expiry(&done(Some(10)), ttl), Some(at(40)));
    assert_eq!(expiry(&done(None), ttl), None);
    assert_eq!(expiry(&done(Some(10)), None), None);
}
