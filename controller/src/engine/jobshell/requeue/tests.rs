use super::*;

#[test]
fn retry_table() {
    let cases = [
        (true, Failure::Conflict, Duration::from_secs(1)),
        (false, Failure::Other, Duration::from_secs(5)),
    ];
    for (conflict, failure, wait) in cases {
        assert_eq!(Failure::of(conflict), failure);
        assert_eq!(retry_after(failure), wait);
        let metrics = Metrics::default();
        let action = after_failure(&metrics, "Test", &"obj", &"boom", failure);
        assert_eq!(action, Action::requeue(wait));
    }
}

#[test]
fn success_table() {
    let ten = Duration::from_secs(10);
    assert_eq!(after_success(Some(ten)), Action::requeue(ten));
    assert_eq!(after_success(None), Action::await_change());
}

#[test]
fn api_errors_are_classed_by_the_contract() {
    let api = |code: u16, reason: &str| {
        kube::Error::Api(
            kube::core::Status::failure(reason, reason)
                .with_code(code)
                .boxed(),
        )
    };
    let cases = [
        ("conflict", api(409, "Conflict"), Failure::Conflict),
        ("failed test", api(422, "Invalid"), Failure::Conflict),
        ("not found", api(404, "NotFound"), Failure::Other),
        ("server error", api(500, "InternalError"), Failure::Other),
        (
            "no answer",
            kube::Error::LinesCodecMaxLineLengthExceeded,
            Failure::Other,
        ),
    ];
    for (case, error, failure) in cases {
        assert_eq!(failure_of(&error), failure, "{case}");
    }
}
