//! `KIND/NAME` on the command line: which of the four job kinds, and which job.

use serde::Serialize;

/// The job kinds `status` follows.
#[expect(
    clippy::enum_variant_names,
    reason = "the variants are the API's kind names"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Kind {
    /// OpenKruise: one image over a set of nodes.
    ImagePullJob,
    /// OpenKruise: a list of images, one child ImagePullJob each.
    ImageListPullJob,
    /// KubeEdge: a list of images over edge nodes.
    ImagePrePullJob,
    /// KubeEdge: a node-agent upgrade.
    NodeUpgradeJob,
}

impl Kind {
    /// Every kind, in the order help texts list them.
    pub const ALL: [Kind; 4] = [
        Kind::ImagePullJob,
        Kind::ImageListPullJob,
        Kind::ImagePrePullJob,
        Kind::NodeUpgradeJob,
    ];

    /// The kind as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ImagePullJob => "ImagePullJob",
            Kind::ImageListPullJob => "ImageListPullJob",
            Kind::ImagePrePullJob => "ImagePrePullJob",
            Kind::NodeUpgradeJob => "NodeUpgradeJob",
        }
    }

    /// The short name kubectl knows it by.
    pub fn short(self) -> &'static str {
        match self {
            Kind::ImagePullJob => "ipj",
            Kind::ImageListPullJob => "ilpj",
            Kind::ImagePrePullJob => "ippj",
            Kind::NodeUpgradeJob => "nuj",
        }
    }

    /// The API group, for fully qualified names such as `ipj.apps.kruise.io`.
    pub fn group(self) -> &'static str {
        match self {
            Kind::ImagePullJob | Kind::ImageListPullJob => "apps.kruise.io",
            Kind::ImagePrePullJob | Kind::NodeUpgradeJob => "operations.kubeedge.io",
        }
    }

    /// Whether jobs of this kind live in a namespace (the KubeEdge kinds do not).
    pub fn namespaced(self) -> bool {
        matches!(self, Kind::ImagePullJob | Kind::ImageListPullJob)
    }

    /// The kind named by `word` as kubectl would accept it: singular, plural
    /// or short name, any case, optionally followed by `.<group>` (and a
    /// version, as in `imagepulljobs.v1alpha1.apps.kruise.io`).
    pub fn parse(word: &str) -> Option<Kind> {
        let lower = word.to_ascii_lowercase();
        let (resource, rest) = match lower.split_once('.') {
            Some((r, rest)) => (r.to_string(), Some(rest.to_string())),
            None => (lower, None),
        };
        let kind = Kind::ALL.into_iter().find(|k| {
            let singular = k.as_str().to_ascii_lowercase();
            resource == singular || resource == format!("{singular}s") || resource == k.short()
        })?;
        match rest {
            None => Some(kind),
            Some(rest) => {
                let group = rest
                    .split_once('.')
                    .filter(|(version, _)| version.starts_with('v'))
                    .map(|(_, g)| g)
                    .filter(|g| *g == kind.group())
                    .unwrap_or(&rest);
                (group == kind.group()).then_some(kind)
            }
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Its kind.
    pub kind: Kind,
    /// Its name.
    pub name: String,
}

/// Why a `KIND/NAME` was not understood.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// No slash, and no separate name.
    #[error("{0:?}: expected KIND/NAME, such as ipj/my-job")]
    NoName(String),
    /// A kind none of the four answers to.
    #[error(
        "unknown kind {0:?}: expected one of imagepulljob (ipj), imagelistpulljob (ilpj), imageprepulljob (ippj), nodeupgradejob (nuj)"
    )]
    UnknownKind(String),
    /// Not a name the API server would accept.
    #[error(
        "{0:?} is not a valid object name (lower-case letters, digits, '-' and '.', at most 253 characters)"
    )]
    BadName(String),
}

/// Reads `KIND/NAME`, or `KIND` followed by `NAME` as a separate word (as
/// `kubectl get ipj my-job` takes them).
pub fn parse_target(first: &str, second: Option<&str>) -> Result<Target, TargetError> {
    let (kind, name) = match (first.split_once('/'), second) {
        (Some((kind, name)), None) => (kind, name),
        (None, Some(name)) => (first, name),
        (Some(_), Some(_)) | (None, None) => {
            return Err(TargetError::NoName(
                [Some(first), second]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(" "),
            ));
        }
    };
    let kind = Kind::parse(kind).ok_or_else(|| TargetError::UnknownKind(kind.to_string()))?;
    if !is_object_name(name) {
        return Err(TargetError::BadName(name.to_string()));
    }
    Ok(Target {
        kind,
        name: name.to_string(),
    })
}

/// A DNS subdomain, as the API server requires of these kinds' names.
pub fn is_object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_and_name() {
        use Kind::*;
        let ok = |k, n: &str| {
            Ok(Target {
                kind: k,
                name: n.to_string(),
            })
        };
        let cases: Vec<(&str, Option<&str>, Result<Target, TargetError>)> = vec![
            ("imagepulljob/x", None, ok(ImagePullJob, "x")),
            ("imagepulljobs/x", None, ok(ImagePullJob, "x")),
            ("ipj/warm-up.v2", None, ok(ImagePullJob, "warm-up.v2")),
            ("ImagePullJob/x", None, ok(ImagePullJob, "x")),
            ("ipj.apps.kruise.io/x", None, ok(ImagePullJob, "x")),
            (
                "imagepulljobs.v1beta1.apps.kruise.io/x",
                None,
                ok(ImagePullJob, "x"),
            ),
            ("imagelistpulljob/x", None, ok(ImageListPullJob, "x")),
            ("ilpj/x", None, ok(ImageListPullJob, "x")),
            ("imageprepulljob/x", None, ok(ImagePrePullJob, "x")),
            ("ippj/x", None, ok(ImagePrePullJob, "x")),
            (
                "ippj.operations.kubeedge.io/x",
                None,
                ok(ImagePrePullJob, "x"),
            ),
            ("nodeupgradejob/x", None, ok(NodeUpgradeJob, "x")),
            ("NUJ/x", None, ok(NodeUpgradeJob, "x")),
            ("ipj", Some("x"), ok(ImagePullJob, "x")),
            ("nuj", Some("up-1"), ok(NodeUpgradeJob, "up-1")),
            ("ipj", None, Err(TargetError::NoName("ipj".into()))),
            (
                "ipj/x",
                Some("y"),
                Err(TargetError::NoName("ipj/x y".into())),
            ),
            ("pod/x", None, Err(TargetError::UnknownKind("pod".into()))),
            (
                "ipj.operations.kubeedge.io/x",
                None,
                Err(TargetError::UnknownKind(
                    "ipj.operations.kubeedge.io".into(),
                )),
            ),
            (
                "nodeimage/x",
                None,
                Err(TargetError::UnknownKind("nodeimage".into())),
            ),
            ("ipj/", None, Err(TargetError::BadName("".into()))),
            ("ipj/a/b", None, Err(TargetError::BadName("a/b".into()))),
            ("ipj/Upper", None, Err(TargetError::BadName("Upper".into()))),
            ("ipj/-x", None, Err(TargetError::BadName("-x".into()))),
            ("ipj/a..b", None, Err(TargetError::BadName("a..b".into()))),
        ];
        for (first, second, want) in cases {
            assert_eq!(parse_target(first, second), want, "{first:?} {second:?}");
        }
    }

    #[test]
    fn long_names() {
        let max =
            "a".repeat(63) + "." + &"b".repeat(63) + "." + &"c".repeat(63) + "." + &"d".repeat(61);
        assert_eq!(max.len(), 253);
        assert!(is_object_name(&max));
        assert!(!is_object_name(&(max + "e")));
    }
}
