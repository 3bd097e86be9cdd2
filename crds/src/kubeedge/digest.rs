//! The upgrade image's digest check (NodeUpgradeJob `imageDigestGatter`):
//! which digests a job asks for, which one a node expects for its
//! architecture, and whether what the node pulled has it. The one home of
//! these rules, read by the controller (what it writes into the NodeImage
//! entry, and when it refuses the job) and by the node daemon (the check
//! before the tool is taken out of the image). Pure.
//!
//! The digest compared is the image's repository digest as the runtime
//! reports it for the pulled reference (containerd's CRI `repoDigests`,
//! `name@sha256:…`): the digest of the manifest the tag resolved to when it
//! was pulled. For a multi-architecture tag that is the image index (the
//! same on every architecture), for a single-platform tag its image
//! manifest; a platform manifest inside an index is not what is compared.

use super::nodeupgradejob::ImageDigestGatter;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a digest is written (the pattern's home is `limits`, which the
/// schemas and CEL rules read).
pub use crate::limits::DIGEST_PATTERN;

/// Whether `s` is a digest as [`DIGEST_PATTERN`] says.
pub fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// nodeimage extension: the digests an upgrade image must have, as a
/// NodeImage entry carries them to the node (from the job's
/// `imageDigestGatter`). A node expects its architecture's entry, else `any`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeDigests {
    /// For any architecture (v1alpha1 `value`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = DIGEST_PATTERN))]
    pub any: Option<String>,
    /// For amd64 nodes (v1alpha2 `amd64`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = DIGEST_PATTERN))]
    pub amd64: Option<String>,
    /// For arm64 nodes (v1alpha2 `arm64`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = DIGEST_PATTERN))]
    pub arm64: Option<String>,
}

/// The digests a job's `imageDigestGatter` asks the nodes to check: None
/// when it names none (no gatter, or only empty values: no check, as
/// before KubeEdge required one); an error, naming the field, when a value
/// is not a digest or when only `registryAPI` is given (nodeimage does not
/// ask a registry: the node checks what it pulled against a digest the job
/// names).
pub fn upgrade_digests(
    gatter: Option<&ImageDigestGatter>,
) -> Result<Option<UpgradeDigests>, String> {
    let Some(g) = gatter else {
        return Ok(None);
    };
    let field = |name: &str, v: &Option<String>| -> Result<Option<String>, String> {
        match v.as_deref().map(str::trim) {
            None | Some("") => Ok(None),
            Some(d) if is_digest(d) => Ok(Some(d.to_string())),
            Some(d) => Err(format!(
                "spec.imageDigestGatter.{name} {d:?} is not a digest: it must be sha256: \
                 followed by 64 lower-case hex digits (the image's manifest digest)"
            )),
        }
    };
    let digests = UpgradeDigests {
        any: field("value", &g.value)?,
        amd64: field("amd64", &g.amd64)?,
        arm64: field("arm64", &g.arm64)?,
    };
    if digests != UpgradeDigests::default() {
        return Ok(Some(digests));
    }
    if g.registry_api.is_some() {
        return Err(
            "spec.imageDigestGatter.registryAPI alone is not supported: nodeimage \
                    does not ask a registry for the digest; give it in \
                    spec.imageDigestGatter.value (v1alpha1) or amd64/arm64 (v1alpha2)"
                .into(),
        );
    }
    Ok(None)
}

impl UpgradeDigests {
    /// The digest a node of architecture `arch` (Go's names: amd64, arm64)
    /// expects: its architecture's, else `any`; an error when neither is
    /// given (the job asked for a check this node cannot make).
    pub fn expected(&self, arch: &str) -> Result<&str, String> {
        let own = match arch {
            "amd64" => self.amd64.as_deref(),
            "arm64" => self.arm64.as_deref(),
            _ => None,
        };
        own.or(self.any.as_deref()).ok_or_else(|| {
            format!(
                "imageDigestGatter names no digest for this node's architecture {arch} \
                 (set spec.imageDigestGatter.{arch}, or value); nothing was run"
            )
        })
    }

    /// Whether the pulled image's repository digest `pulled` is the one a
    /// node of `arch` expects; the reason, naming both digests, when not.
    pub fn check(&self, arch: &str, image: &str, pulled: &str) -> Result<(), String> {
        let want = self.expected(arch)?;
        if pulled == want {
            Ok(())
        } else {
            Err(format!(
                "digest mismatch: {image} was pulled with digest {pulled}, but \
                 imageDigestGatter expects {want} for {arch}; nothing was run"
            ))
        }
    }
}

/// Go's name of a Rust target architecture (`std::env::consts::ARCH`), the
/// names `imageDigestGatter` and Kubernetes (`kubernetes.io/arch`) use.
pub fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeedge::RegistryApi;

    const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn digests_table() {
        let cases = [
            (A, true),
            (C, true),
            (
                "sha256:ABCDEFabcdef0123456789abcdef0123456789abcdef0123456789abcdef0123",
                false,
            ),
            ("sha256:abc", false),
            (
                "sha512:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                false,
            ),
            (
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                false,
            ),
            (
                "sha256:gggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggg",
                false,
            ),
            ("", false),
        ];
        for (s, want) in cases {
            assert_eq!(is_digest(s), want, "{s:?}");
        }
    }

    fn gatter(value: Option<&str>, amd64: Option<&str>, arm64: Option<&str>) -> ImageDigestGatter {
        ImageDigestGatter {
            value: value.map(Into::into),
            amd64: amd64.map(Into::into),
            arm64: arm64.map(Into::into),
            registry_api: None,
        }
    }

    #[test]
    fn what_a_job_asks_for_table() {
        let registry = ImageDigestGatter {
            registry_api: Some(RegistryApi {
                host: "registry.example.com".into(),
                token: "t".into(),
            }),
            ..Default::default()
        };
        let with_value_and_registry = ImageDigestGatter {
            value: Some(A.into()),
            ..registry.clone()
        };
        let some = |any: Option<&str>, amd64: Option<&str>, arm64: Option<&str>| {
            Ok(Some(UpgradeDigests {
                any: any.map(Into::into),
                amd64: amd64.map(Into::into),
                arm64: arm64.map(Into::into),
            }))
        };
        let cases: Vec<(
            Option<ImageDigestGatter>,
            Result<Option<UpgradeDigests>, &str>,
        )> = vec![
            (None, Ok(None)),
            (Some(ImageDigestGatter::default()), Ok(None)),
            (Some(gatter(Some(""), Some(""), Some(" "))), Ok(None)),
            (Some(gatter(Some(A), None, None)), some(Some(A), None, None)),
            (
                Some(gatter(None, Some(A), Some(B))),
                some(None, Some(A), Some(B)),
            ),
            (
                Some(gatter(None, Some(A), Some(""))),
                some(None, Some(A), None),
            ),
            (Some(with_value_and_registry), some(Some(A), None, None)),
            (Some(registry), Err("registryAPI alone is not supported")),
            (
                Some(gatter(Some("latest"), None, None)),
                Err("spec.imageDigestGatter.value"),
            ),
            (
                Some(gatter(None, Some(A), Some("sha256:x"))),
                Err("spec.imageDigestGatter.arm64"),
            ),
            (
                Some(gatter(None, Some(&A.to_uppercase()), None)),
                Err("spec.imageDigestGatter.amd64"),
            ),
        ];
        for (g, want) in cases {
            let got = upgrade_digests(g.as_ref());
            match (&got, &want) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{g:?}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{g:?}: {e}"),
                _ => panic!("{g:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn what_a_node_expects_and_checks_table() {
        let per_arch = UpgradeDigests {
            any: None,
            amd64: Some(A.into()),
            arm64: Some(B.into()),
        };
        let any = UpgradeDigests {
            any: Some(C.into()),
            ..Default::default()
        };
        let both = UpgradeDigests {
            any: Some(C.into()),
            arm64: Some(B.into()),
            ..Default::default()
        };
        let only_arm = UpgradeDigests {
            arm64: Some(B.into()),
            ..Default::default()
        };
        let cases = [
            (&per_arch, "amd64", A, Ok(())),
            (&per_arch, "arm64", B, Ok(())),
            (
                &per_arch,
                "amd64",
                B,
                Err(format!(
                    "pulled with digest {B}, but imageDigestGatter expects {A} for amd64"
                )),
            ),
            (
                &per_arch,
                "riscv64",
                A,
                Err("no digest for this node's architecture riscv64".into()),
            ),
            (&any, "amd64", C, Ok(())),
            (&any, "riscv64", C, Ok(())),
            (&any, "arm64", A, Err(format!("expects {C} for arm64"))),
            (&both, "arm64", B, Ok(())),
            (&both, "arm64", C, Err(format!("expects {B} for arm64"))),
            (&both, "amd64", C, Ok(())),
            (
                &only_arm,
                "amd64",
                B,
                Err("no digest for this node's architecture amd64".into()),
            ),
        ];
        for (d, arch, pulled, want) in cases {
            let got = d.check(arch, "r/i:v1", pulled);
            match (&got, &want) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(w)) => {
                    assert!(e.contains(w.as_str()), "{d:?} {arch}: {e}");
                    assert!(e.contains("nothing was run"), "{e}");
                }
                _ => panic!("{d:?} {arch} {pulled}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn architectures_table() {
        for (rust, go) in [
            ("x86_64", "amd64"),
            ("aarch64", "arm64"),
            ("riscv64", "riscv64"),
            ("s390x", "s390x"),
        ] {
            assert_eq!(go_arch(rust), go);
        }
    }
}
