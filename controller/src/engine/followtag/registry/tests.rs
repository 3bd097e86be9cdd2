use super::*;

#[test]
fn challenges() {
    let bearer = |realm: &str, service: Option<&str>, scope: Option<&str>| {
        Some(Challenge::Bearer {
            realm: realm.into(),
            service: service.map(Into::into),
            scope: scope.map(Into::into),
        })
    };
    for (header, want) in [
        (r#"Basic realm="Registry Realm""#, Some(Challenge::Basic)),
        ("basic", Some(Challenge::Basic)),
        (
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull""#,
            bearer(
                "https://auth.docker.io/token",
                Some("registry.docker.io"),
                Some("repository:library/nginx:pull"),
            ),
        ),
        (
            r#"Bearer realm="https://r/token", scope="repository:a/b:pull,push""#,
            bearer("https://r/token", None, Some("repository:a/b:pull,push")),
        ),
        (
            "Bearer realm=https://r/token,service=r",
            bearer("https://r/token", Some("r"), None),
        ),
        (r#"Bearer service="r""#, None),
        ("Negotiate abc", None),
        ("", None),
    ] {
        assert_eq!(challenge(header), want, "{header}");
    }
}

#[test]
fn tokens() {
    for (body, want) in [
        (r#"{"token":"t1","expires_in":300}"#, Some("t1")),
        (r#"{"access_token":"t2"}"#, Some("t2")),
        (r#"{"token":""}"#, None),
        ("not json", None),
        ("{}", None),
    ] {
        assert_eq!(token_of(body.as_bytes()).as_deref(), want, "{body}");
    }
}

#[test]
fn urls() {
    let insecure = vec!["reg.lan:5000".to_string()];
    for (registry, want) in [
        ("127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("localhost:5000", "http://localhost:5000"),
        ("localhost", "http://localhost"),
        ("[::1]:5000", "http://[::1]:5000"),
        ("reg.lan:5000", "http://reg.lan:5000"),
        ("reg.lan:5001", "https://reg.lan:5001"),
        ("docker.io", "https://registry-1.docker.io"),
        ("ghcr.io", "https://ghcr.io"),
        ("127.example.com", "https://127.example.com"),
    ] {
        assert_eq!(base_url(registry, &insecure), want, "{registry}");
    }
    let image = ImageRef::parse("nginx:1.25").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        manifest_url(&image, &[]),
        "https://registry-1.docker.io/v2/library/nginx/manifests/1.25"
    );
    assert_eq!(
        token_url(
            "https://auth.docker.io/token",
            Some("registry.docker.io"),
            None,
            "library/nginx"
        ),
        "https://auth.docker.io/token?service=registry.docker.io&scope=repository%3Alibrary%2Fnginx%3Apull"
    );
    assert_eq!(
        token_url("https://r/t?x=1", None, Some("repository:a:pull"), "a"),
        "https://r/t?x=1&scope=repository%3Aa%3Apull"
    );
}

#[test]
fn errors_say_what_a_status_means() {
    for (status, word) in [
        (401, "unauthorized"),
        (404, "no such"),
        (429, "rate-limited"),
        (500, "HTTP 500"),
    ] {
        let e = LookupError::Status {
            url: "u".into(),
            status,
        }
        .to_string();
        assert!(e.contains(word), "{e}");
    }
}
