//! What the node's container runtime can do, found out once at start: its
//! name and version from CRI `Version`, and whether containerd's own API
//! answers on the same socket. Byte progress, resumable pulls and pins read
//! or write containerd's content store, leases and image labels; a runtime
//! without that API (CRI-O) still pulls, with phases, image IDs and reasons.

use crate::runtime::ContainerRuntime;
use crate::runtime::RuntimeError;
use std::fmt;

/// The runtime as the daemon found it at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeInfo {
    /// CRI `runtime_name`, e.g. `containerd` or `cri-o`.
    pub name: String,
    /// CRI `runtime_version`, e.g. `v2.2.9` or `1.6.20~ds1`.
    pub version: String,
    /// Whether containerd's own API (content, leases, images) answers.
    pub containerd_api: bool,
}

/// One thing the daemon does only where the runtime allows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    /// Byte progress of a pull (containerd's content ingests).
    Progress,
    /// A killed pull resumes its partial layers (containerd leases).
    Resume,
    /// Wanted images are kept from kubelet's image GC (containerd's pin label).
    Pinning,
}

impl Capability {
    /// Every capability, in the order they are listed.
    pub const ALL: [Capability; 3] = [
        Capability::Progress,
        Capability::Resume,
        Capability::Pinning,
    ];

    /// Its name in logs, metrics and events.
    pub fn name(self) -> &'static str {
        match self {
            Capability::Progress => "progress",
            Capability::Resume => "resume",
            Capability::Pinning => "pinning",
        }
    }
}

impl RuntimeInfo {
    /// Whether the daemon may use `c` on this runtime.
    pub fn has(&self, c: Capability) -> bool {
        match c {
            Capability::Progress | Capability::Resume => self.containerd_api,
            Capability::Pinning => self.containerd_api && pins_are_honoured(&self.version),
        }
    }

    /// The capabilities this runtime has, comma-separated (`-` for none).
    pub fn capabilities(&self) -> String {
        let have: Vec<&str> = Capability::ALL
            .into_iter()
            .filter(|c| self.has(*c))
            .map(Capability::name)
            .collect();
        if have.is_empty() {
            "-".into()
        } else {
            have.join(",")
        }
    }

    /// The capabilities this runtime lacks, comma-separated (empty for none).
    pub fn missing(&self) -> String {
        let lack: Vec<&str> = Capability::ALL
            .into_iter()
            .filter(|c| !self.has(*c))
            .map(Capability::name)
            .collect();
        lack.join(",")
    }
}

impl fmt::Display for RuntimeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} (capabilities: {})",
            self.name,
            self.version,
            self.capabilities()
        )
    }
}

/// `major.minor.patch` of a version string such as `v1.7.29`, `2.2.9` or
/// Debian's `1.6.20~ds1`; missing parts read as 0.
pub fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let v = v.trim().trim_start_matches('v');
    let mut parts = v.split('.').map(|p| {
        let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u64>().ok()
    });
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

/// Whether a containerd of this version honours the pin label
/// `io.cri-containerd.pinned=pinned` set on an image after its pull (and
/// reports it through CRI, where kubelet's GC reads it): 1.6.25+, 1.7.10+
/// and every 2.x. Earlier releases ignore it (Debian 12's 1.6.20).
pub fn pins_are_honoured(version: &str) -> bool {
    match parse_version(version) {
        Some((1, 6, p)) => p >= 25,
        Some((1, 7, p)) => p >= 10,
        Some((1, m, _)) => m > 7,
        Some((major, _, _)) => major >= 2,
        None => false,
    }
}

/// Asks the runtime what it is and whether containerd's API answers (not
/// asked when the daemon runs on CRI alone).
pub async fn detect(runtime: &impl ContainerRuntime) -> Result<RuntimeInfo, RuntimeError> {
    let (name, version) = runtime.name_and_version().await?;
    let containerd_api = runtime.containerd_answers().await;
    Ok(RuntimeInfo {
        name,
        version,
        containerd_api,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_as_runtimes_print_them() {
        let table = [
            ("v2.2.9", Some((2, 2, 9))),
            ("1.6.20~ds1", Some((1, 6, 20))),
            ("v1.7.29", Some((1, 7, 29))),
            ("1.34.1", Some((1, 34, 1))),
            ("2", Some((2, 0, 0))),
            ("", None),
            ("unknown", None),
        ];
        for (v, want) in table {
            assert_eq!(parse_version(v), want, "{v}");
        }
    }

    #[test]
    fn pins_need_a_release_that_reads_labels_after_the_pull() {
        let table = [
            ("1.6.20~ds1", false),
            ("v1.6.24", false),
            ("v1.6.25", true),
            ("v1.7.9", false),
            ("v1.7.29", true),
            ("v2.0.0", true),
            ("v2.4.2", true),
            ("garbage", false),
        ];
        for (v, want) in table {
            assert_eq!(pins_are_honoured(v), want, "{v}");
        }
    }

    #[test]
    fn capabilities_follow_the_api_and_the_version() {
        let info = |version: &str, api: bool| RuntimeInfo {
            name: "containerd".into(),
            version: version.into(),
            containerd_api: api,
        };
        assert_eq!(
            info("v2.2.9", true).capabilities(),
            "progress,resume,pinning"
        );
        assert_eq!(info("1.6.20~ds1", true).capabilities(), "progress,resume");
        assert_eq!(info("1.6.20~ds1", true).missing(), "pinning");
        assert_eq!(info("v2.2.9", false).capabilities(), "-");
        assert_eq!(info("v2.2.9", false).missing(), "progress,resume,pinning");
        assert_eq!(
            info("v2.2.9", true).to_string(),
            "containerd v2.2.9 (capabilities: progress,resume,pinning)"
        );
    }

    #[tokio::test]
    async fn detection_asks_for_containerds_api_beside_cri() {
        use crate::runtime::fake::FakeRuntime;
        for cri_only in [false, true] {
            let rt = FakeRuntime::default();
            if cri_only {
                rt.cri_only();
            }
            let found = detect(&rt).await.expect("the runtime answers");
            assert_eq!(found.containerd_api, !cri_only);
            assert_eq!(
                (found.name.as_str(), found.version.as_str()),
                ("containerd", "v2.2.9")
            );
        }
    }
}
