//! The block as containerd enforces it (containerd 2.x, opt-in with
//! `--pull-verifier-dir`): the daemon installs `verifier.sh` as an image
//! verifier in `DIR/bin` (containerd's bindir plugin runs every file there
//! before each pull, kubelet's included) and keeps `DIR/nodeimage-blocks`,
//! one line per blocked digest, as this node's block entries say. A pull
//! whose resolved digest is blocked then fails in the runtime, naming the
//! job, whatever tag or client asked for it. Owner of the list: this
//! daemon; forget rule: rewritten on every NodeImage change, never deleted
//! (a daemon restart must not lift a block).

use super::block;
use nodeimage_api::nodeimage_dev::RemovalEntry;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The verifier containerd runs (a POSIX shell script: no library of the
/// host is needed beyond /bin/sh).
const SCRIPT: &str = include_str!("verifier.sh");
/// The script's name in the bin directory.
const SCRIPT_NAME: &str = "nodeimage-block";
/// The list's name beside the bin directory (the script reads `../` of itself).
const LIST_NAME: &str = "nodeimage-blocks";

/// Why the verifier could not be installed or its list written.
#[derive(Debug, thiserror::Error)]
pub enum VerifierError {
    /// A file of the verifier directory could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The installed verifier and the last list it was given.
pub struct PullVerifier {
    dir: PathBuf,
    last: Mutex<Option<String>>,
}

impl PullVerifier {
    /// Installs the script in `dir/bin`; an existing list stays in force
    /// until the first NodeImage is read.
    pub fn install(dir: &Path) -> Result<Self, VerifierError> {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).map_err(|source| VerifierError::Write {
            path: bin.clone(),
            source,
        })?;
        // Written beside the bin directory, then moved in: every file in
        // it is run as a verifier, a half-written one included.
        let staged = dir.join(format!(".{SCRIPT_NAME}.tmp"));
        write_replace(&staged, &bin.join(SCRIPT_NAME), SCRIPT, 0o755)?;
        tracing::info!(dir = %dir.display(), "containerd image verifier installed: blocks are enforced on every pull of this node");
        Ok(Self {
            dir: dir.to_path_buf(),
            last: Mutex::new(None),
        })
    }

    /// Writes the list of `entries`' blocks if it changed.
    pub fn publish(&self, entries: &[RemovalEntry]) {
        let text = list_text(entries);
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        if last.as_deref() == Some(text.as_str()) {
            return;
        }
        let staged = self.dir.join(format!(".{LIST_NAME}.tmp"));
        match write_replace(&staged, &self.dir.join(LIST_NAME), &text, 0o644) {
            Ok(()) => {
                let blocked = text.lines().filter(|l| !l.starts_with('#')).count();
                tracing::info!(blocked, "block list of containerd's image verifier written");
                *last = Some(text);
            }
            Err(e) => {
                tracing::warn!(error = %e, "block list of containerd's image verifier not written; the last one stays")
            }
        }
    }
}

/// Writes `text` to `staged` with `mode`, then renames it over `dest`.
fn write_replace(staged: &Path, dest: &Path, text: &str, mode: u32) -> Result<(), VerifierError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| VerifierError::Write { path, source }
    };
    std::fs::write(staged, text).map_err(err(staged))?;
    std::fs::set_permissions(staged, std::fs::Permissions::from_mode(mode)).map_err(err(staged))?;
    std::fs::rename(staged, dest).map_err(err(dest))
}

/// The list the script reads: `DIGEST REGISTRY/REPOSITORY JOB` per line,
/// sorted, after a comment. Job names that are not Kubernetes names (a
/// hand-edited NodeImage) are written as `-`, so no entry can add a line.
pub fn list_text(entries: &[RemovalEntry]) -> String {
    let mut lines: Vec<String> = block::blocked(entries)
        .into_iter()
        .filter_map(|(image, job)| {
            let digest = image.digest.as_deref()?;
            let job = if !job.is_empty()
                && job
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            {
                job
            } else {
                "-"
            };
            Some(format!(
                "{digest} {}/{} {job}",
                image.registry, image.repository
            ))
        })
        .collect();
    lines.sort();
    lines.dedup();
    let mut text = String::from(
        "# Written by nodeimage-daemon: the digests ImageRemovalJobs with block: true keep off this node.\n",
    );
    for line in lines {
        text.push_str(&line);
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn entry(job: &str, block: bool, images: &[&str]) -> RemovalEntry {
        RemovalEntry {
            job: job.into(),
            uid: "u".into(),
            images: images.iter().map(|s| s.to_string()).collect(),
            block,
            ..Default::default()
        }
    }

    #[test]
    fn only_blocked_digests_are_listed_one_line_each() {
        let rows: &[(&[RemovalEntry], &[&str])] = &[
            (&[], &[]),
            (
                &[entry("plain", false, &[&format!("r.example/app@{D1}")])],
                &[],
            ),
            (&[entry("tag-only", true, &["r.example/app:v1"])], &[]),
            (
                &[
                    entry(
                        "cve",
                        true,
                        &[&format!("r.example/app:v1@{D1}"), &format!("nginx@{D1}")],
                    ),
                    entry("cve", true, &[&format!("r.example/app@{D1}")]),
                ],
                &[
                    &format!("{D1} docker.io/library/nginx cve"),
                    &format!("{D1} r.example/app cve"),
                ],
            ),
            (
                &[entry(
                    "a b\nsha256:x r/x j",
                    true,
                    &[&format!("r.example/app@{D1}")],
                )],
                &[&format!("{D1} r.example/app -")],
            ),
            (&[entry("bad", true, &["not a reference@@"])], &[]),
        ];
        for (entries, want) in rows {
            let text = list_text(entries);
            let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
            assert_eq!(lines, *want, "{entries:?}");
        }
    }

    /// A directory of the test's own, removed at the end.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let p = std::env::temp_dir().join(format!("ni-verifier-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).expect("scratch dir");
            Self(p)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Runs the installed script as containerd's bindir plugin does.
    fn judge(dir: &Path, name: &str, digest: &str) -> (bool, String) {
        let out = std::process::Command::new(dir.join("bin").join(SCRIPT_NAME))
            .args(["-name", name, "-digest", digest, "-stdin-media-type"])
            .arg("application/vnd.oci.descriptor.v1+json")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run the verifier");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    #[test]
    fn the_script_refuses_what_the_list_blocks_and_allows_the_rest() {
        let dir = Scratch::new("judge");
        let v = PullVerifier::install(dir.path()).expect("install");
        let (ok, said) = judge(dir.path(), "r.example/app:v1", D1);
        assert!(ok, "no list yet: allowed ({said})");
        v.publish(&[entry("cve-7", true, &[&format!("r.example/app@{D1}")])]);
        let d2 = D1.replace('1', "2");
        let rows: &[(&str, &str, bool)] = &[
            ("r.example/app:v1", D1, false),
            ("r.example/app:v2", D1, false),
            (
                "r.example/app@sha256:1111111111111111111111111111111111111111111111111111111111111111",
                D1,
                false,
            ),
            ("r.example/app:v1", &d2, true),
            ("r.example/other:v1", D1, true),
            ("mirror.example/app:v1", D1, true),
        ];
        for (name, digest, allowed) in rows {
            let (ok, said) = judge(dir.path(), name, digest);
            assert_eq!(ok, *allowed, "{name} {digest}: {said}");
            if !allowed {
                assert!(said.contains("blocked by ImageRemovalJob cve-7"), "{said}");
            }
        }
    }

    #[test]
    fn install_then_publish_writes_the_script_and_the_list_once() {
        let dir = Scratch::new("publish");
        let v = PullVerifier::install(dir.path()).expect("install");
        let script = dir.path().join("bin").join(SCRIPT_NAME);
        let mode = std::fs::metadata(&script)
            .expect("script")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        let bin: Vec<_> = std::fs::read_dir(dir.path().join("bin"))
            .expect("bin")
            .collect();
        assert_eq!(bin.len(), 1, "only the verifier is in the bin directory");
        assert!(
            !dir.path().join(LIST_NAME).exists(),
            "no list before a NodeImage is read"
        );
        v.publish(&[entry("cve", true, &[&format!("r.example/app@{D1}")])]);
        let list = std::fs::read_to_string(dir.path().join(LIST_NAME)).expect("list");
        assert!(list.contains(&format!("{D1} r.example/app cve")), "{list}");
        v.publish(&[]);
        let list = std::fs::read_to_string(dir.path().join(LIST_NAME)).expect("list");
        assert_eq!(
            list.lines().filter(|l| !l.starts_with('#')).count(),
            0,
            "{list}"
        );
    }
}
