//! Which registry credentials a tag is pulled with, in which order to try
//! them. The reading of pull Secrets is the API crate's
//! (`nodeimage_api::credentials`), shared with the controller. Secret
//! contents never leave except as the CRI auth of a pull request.

pub use nodeimage_api::credentials::{Credential, SecretError, matching, parse_secret};

/// A pull secret listed for an image, as the daemon found it.
#[derive(Debug)]
pub enum Loaded {
    /// The Secret exists; `references` lists the jobs that supplied it when
    /// it is the controller's copy of a job's secret (None: listed by hand).
    Found {
        /// The copy's requesters, if it is a job's copy.
        references: Option<Vec<String>>,
        /// Its credentials, or why they cannot be read.
        creds: Result<Vec<Credential>, SecretError>,
    },
    /// No such Secret.
    Missing {
        /// namespace/name.
        secret: String,
    },
    /// The Secret could not be read (forbidden, API error).
    Unreadable {
        /// namespace/name.
        secret: String,
        /// Why.
        reason: String,
    },
}

/// The credentials a tag may be pulled with, and notes on the secrets that
/// could not be used (never their content).
#[derive(Debug, Default)]
pub struct Selection {
    /// Usable credentials, in the order the secrets were listed.
    pub creds: Vec<Credential>,
    /// Secrets that applied but were missing, unreadable or malformed.
    pub notes: Vec<String>,
}

/// Whose credentials a tag is pulled with: a tag requested by jobs
/// (`requesters`, as [`nodeimage_api::kruise::nodeimage::requester_key`])
/// uses only the copies those jobs supplied; a hand-written tag (no
/// requesters) uses only secrets listed by hand (no references). A secret
/// that applies but is missing or broken is noted and skipped: the pull goes
/// on with the others.
pub fn select(requesters: &[String], loaded: Vec<Loaded>) -> Selection {
    let mut out = Selection::default();
    for l in loaded {
        match l {
            Loaded::Found { references, creds } => {
                let ours = match &references {
                    Some(refs) => requesters.iter().any(|r| refs.contains(r)),
                    None => requesters.is_empty(),
                };
                if !ours {
                    continue;
                }
                match creds {
                    Ok(c) => out.creds.extend(c),
                    Err(e) => out.notes.push(e.to_string()),
                }
            }
            Loaded::Missing { secret } => out.notes.push(format!("pull secret {secret} not found")),
            Loaded::Unreadable { secret, reason } => out
                .notes
                .push(format!("pull secret {secret} unreadable: {reason}")),
        }
    }
    out
}

/// The requesters named in a copy's references annotation.
pub fn references(annotation: &str) -> Vec<String> {
    annotation
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_uses_only_its_own_requesters_credentials() {
        let cred = |u: &str| Credential {
            registry: "127.0.0.1:5001".into(),
            username: u.into(),
            password: "p".into(),
        };
        let copy = |_name: &str, refs: &[&str], user: &str| Loaded::Found {
            references: Some(refs.iter().map(|r| r.to_string()).collect()),
            creds: Ok(vec![cred(user)]),
        };
        let by_hand = |_name: &str, user: &str| Loaded::Found {
            references: None,
            creds: Ok(vec![cred(user)]),
        };
        let a = "ImagePullJob/team-a/pull".to_string();
        let b = "ImagePullJob/team-b/pull".to_string();
        // (case, requesters, secrets listed on the image, users tried, notes)
        let cases: Vec<(&str, Vec<String>, Vec<Loaded>, Vec<&str>, usize)> = vec![
            (
                "a job's tag uses its job's copy",
                vec![a.clone()],
                vec![copy("a", &["ImagePullJob/team-a/pull"], "alice")],
                vec!["alice"],
                0,
            ),
            (
                "another tenant's copy on the same image is not lent",
                vec![b.clone()],
                vec![copy("a", &["ImagePullJob/team-a/pull"], "alice")],
                vec![],
                0,
            ),
            (
                "a copy shared by two jobs serves both",
                vec![b.clone()],
                vec![copy(
                    "ab",
                    &["ImagePullJob/team-a/pull", "ImagePullJob/team-b/pull"],
                    "shared",
                )],
                vec!["shared"],
                0,
            ),
            (
                "a tag with two requesters uses both jobs' copies, in order",
                vec![a.clone(), b.clone()],
                vec![
                    copy("b", &["ImagePullJob/team-b/pull"], "bob"),
                    copy("a", &["ImagePullJob/team-a/pull"], "alice"),
                ],
                vec!["bob", "alice"],
                0,
            ),
            (
                "a job's tag does not use secrets listed by hand",
                vec![a.clone()],
                vec![by_hand("admin", "root")],
                vec![],
                0,
            ),
            (
                "a hand-written tag uses secrets listed by hand, not job copies",
                vec![],
                vec![
                    copy("a", &["ImagePullJob/team-a/pull"], "alice"),
                    by_hand("admin", "root"),
                ],
                vec!["root"],
                0,
            ),
            (
                "missing next to valid: go on with the valid one, note the missing",
                vec![],
                vec![
                    Loaded::Missing {
                        secret: "kube-system/gone".into(),
                    },
                    by_hand("admin", "root"),
                ],
                vec!["root"],
                1,
            ),
            (
                "unreadable and malformed are noted",
                vec![],
                vec![
                    Loaded::Unreadable {
                        secret: "other/x".into(),
                        reason: "forbidden (403)".into(),
                    },
                    Loaded::Found {
                        references: None,
                        creds: Err(SecretError::MissingKey {
                            secret: "kube-system/bad".into(),
                            key: ".dockerconfigjson",
                        }),
                    },
                ],
                vec![],
                2,
            ),
        ];
        for (case, requesters, loaded, users, notes) in cases {
            let s = select(&requesters, loaded);
            let got: Vec<&str> = s.creds.iter().map(|c| c.username.as_str()).collect();
            assert_eq!(got, users, "{case}");
            assert_eq!(s.notes.len(), notes, "{case}: {:?}", s.notes);
        }
        assert_eq!(
            references(" ImagePullJob/a/x, ImagePrePullJob//y ,"),
            vec![
                "ImagePullJob/a/x".to_string(),
                "ImagePrePullJob//y".to_string()
            ]
        );
    }

    #[test]
    fn debug_output_hides_password() {
        let c = Credential {
            registry: "r".into(),
            username: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
