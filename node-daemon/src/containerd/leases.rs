//! The resume leases over containerd (see `resume` for the rule): CRI's
//! pull writes each blob into an ingest held by a lease of the call; when
//! the call ends (a killed daemon ends it), containerd deletes that lease
//! and its garbage collector drops the ingests at once. The daemon
//! therefore adds every ingest of its pull to a lease of its own, named
//! after the node and the image reference. containerd's fetcher resumes an
//! ingest it finds under the same name with a range request, so a pull
//! started again (after a restart, or a timed-out attempt) picks up where
//! the bytes stop. Leases a previous run left for images no longer pulled
//! are swept ([`sweep`]); one that nothing ends expires on its own
//! (`KEEP_FOR`).

use containerd_client::services::v1::leases_client::LeasesClient;
use containerd_client::services::v1::{
    AddResourceRequest, CreateRequest, DeleteRequest, ListRequest, Resource,
};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::collections::{BTreeSet, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};
use tonic::Code;
use tonic::transport::Channel;

use super::cri::namespaced;
use crate::runtime::BlobKeeper;

/// What every lease of the daemon's is named with, and only they.
const LEASE_PREFIX: &str = "nodeimage-resume-";
/// How long a lease keeps partial blobs if no pull of its image ends.
pub const KEEP_FOR: SignedDuration = SignedDuration::from_hours(6);
/// containerd's label that makes its garbage collector drop a lease.
const EXPIRE_LABEL: &str = "containerd.io/gc.expire";
/// Label naming the image a lease keeps blobs for (for `ctr leases ls`).
const IMAGE_LABEL: &str = "nodeimage.dev/image";
/// Label naming the node whose daemon made a lease: a sweep ends only its
/// own node's (test clusters run several daemons on one containerd).
const NODE_LABEL: &str = "nodeimage.dev/node";
/// How often the start-up sweep asks containerd for its leases, and how
/// long it waits between asks.
const SWEEP_ATTEMPTS: u32 = 10;
const SWEEP_RETRY: std::time::Duration = std::time::Duration::from_secs(3);
/// containerd's resource type for an ingest (a blob being written).
const INGEST: &str = "ingests";
/// Longest label value containerd accepts.
const MAX_LABEL_VALUE: usize = 4096;

/// The lease's name for a node's pulls of an image reference: stable across
/// daemon versions (FNV-1a, not std's unspecified hasher) and within
/// containerd's identifier rules (letters, digits and `-`; at most 76
/// characters).
pub fn lease_id(node: &str, reference: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    // A node name holds no NUL, so no two pairs hash the same bytes.
    for b in node.bytes().chain([0]).chain(reference.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{LEASE_PREFIX}{h:016x}")
}

/// The labels a new lease gets: when it expires, and which node and image it
/// is for.
pub fn lease_labels(node: &str, reference: &str, now: Timestamp) -> HashMap<String, String> {
    let mut labels = HashMap::new();
    labels.insert(NODE_LABEL.to_string(), node.to_string());
    if let Ok(at) = now.checked_add(KEEP_FOR) {
        labels.insert(EXPIRE_LABEL.to_string(), at.to_string());
    }
    if reference.len() <= MAX_LABEL_VALUE {
        labels.insert(IMAGE_LABEL.to_string(), reference.to_string());
    }
    labels
}

/// Why a lease call failed, for the log.
#[derive(Debug, thiserror::Error)]
#[error("containerd lease {lease}: {action}: {status}")]
pub struct LeaseError {
    lease: String,
    action: &'static str,
    status: String,
}

/// Holds one image's partial blobs under the daemon's lease while it pulls.
pub struct Keeper {
    client: LeasesClient<Channel>,
    node: String,
    reference: String,
    id: String,
    exists: bool,
    held: BTreeSet<String>,
    /// Whether a failure to hold was logged (once per pull).
    warned: bool,
}

impl Keeper {
    /// A keeper for `node`'s pulls of `reference`; it creates its lease only
    /// once it has an ingest to hold.
    pub fn new(channel: Channel, node: &str, reference: &str) -> Self {
        Keeper {
            client: LeasesClient::new(channel),
            node: node.to_string(),
            reference: reference.to_string(),
            id: lease_id(node, reference),
            exists: false,
            held: BTreeSet::new(),
            warned: false,
        }
    }

    /// Adds the ingests named by `refs` (containerd's ingest names) to the
    /// lease, creating it first (or taking over the one a previous run of the
    /// daemon left). Best effort: a failure only costs a later resume.
    pub async fn hold(&mut self, refs: &[String]) {
        for r in refs {
            if self.held.contains(r) {
                continue;
            }
            match self.add(r).await {
                Ok(()) => {
                    self.held.insert(r.clone());
                }
                Err(e) => {
                    if !self.warned {
                        self.warned = true;
                        tracing::warn!(error = %e, ingest = %r, "could not keep a partial blob for a restart; a pull started again fetches it anew");
                    }
                    return;
                }
            }
        }
    }

    async fn add(&mut self, ingest: &str) -> Result<(), LeaseError> {
        if !self.exists {
            let req = CreateRequest {
                id: self.id.clone(),
                labels: lease_labels(&self.node, &self.reference, Timestamp::now()),
            };
            match self.client.create(namespaced(req)).await {
                Ok(_) => {}
                Err(s) if s.code() == Code::AlreadyExists => {}
                Err(s) => return Err(self.error("create", &s)),
            }
            self.exists = true;
        }
        let req = AddResourceRequest {
            id: self.id.clone(),
            resource: Some(Resource {
                id: ingest.to_string(),
                r#type: INGEST.to_string(),
            }),
        };
        match self.client.add_resource(namespaced(req)).await {
            Ok(_) => Ok(()),
            Err(s) => {
                if s.code() == Code::NotFound {
                    // The lease expired or was ended: make it anew, and
                    // hold again what the old one held.
                    self.exists = false;
                    self.held.clear();
                }
                Err(self.error("add ingest", &s))
            }
        }
    }

    fn error(&self, action: &'static str, s: &tonic::Status) -> LeaseError {
        LeaseError {
            lease: self.id.clone(),
            action,
            status: s.message().to_string(),
        }
    }
}

/// Ends the lease of `reference`'s partial blobs, if there is one, so
/// containerd's garbage collector drops them: once the tag's outcome is
/// known (what the pull fetched belongs to the image now, and a failed
/// pull's partial blobs are not kept), or once its entry is gone.
/// A lease already gone (ended before, or expired) is no error.
pub async fn end(channel: Channel, node: String, reference: String) -> Result<(), tonic::Status> {
    delete(&mut LeasesClient::new(channel), lease_id(&node, &reference)).await
}

/// Ends every lease of `node`'s daemon that this run did not make, but
/// those of `pulling` (image references of the pulls now running): a
/// previous run left them for pulls that will not come back, and their
/// partial blobs would stay on disk for `KEEP_FOR`. Leases made since
/// `run_started` belong to this run's pulls and are left to them. Tries
/// again while containerd does not answer (a node just booted), then gives
/// up: the leases expire on their own.
pub async fn sweep(channel: Channel, node: String, pulling: Vec<String>, run_started: SystemTime) {
    let mut client = LeasesClient::new(channel);
    let mut attempt = 1;
    let listed = loop {
        match client.list(namespaced(ListRequest::default())).await {
            Ok(r) => break r.into_inner().leases,
            Err(s) if attempt < SWEEP_ATTEMPTS => {
                tracing::debug!(error = %s.message(), attempt, "could not list resume leases; trying again");
                attempt += 1;
                tokio::time::sleep(SWEEP_RETRY).await;
            }
            Err(s) => {
                tracing::warn!(error = %s.message(), "could not list resume leases; those a previous run left expire on their own");
                return;
            }
        }
    };
    let listed = listed.iter().map(|l| Listed {
        id: &l.id,
        node: l.labels.get(NODE_LABEL).map(String::as_str),
        created: l.created_at.as_ref().map(|t| (t.seconds, t.nanos)),
    });
    let ended = stale(listed, &node, &pulling, unix_parts(run_started));
    for id in &ended {
        let _ = delete(&mut client, id.clone()).await;
    }
    if !ended.is_empty() {
        tracing::info!(
            leases = ended.len(),
            "ended resume leases of pulls that no longer run"
        );
    }
}

/// One listed lease, as far as the sweep cares.
struct Listed<'a> {
    id: &'a str,
    /// Its node label.
    node: Option<&'a str>,
    /// When containerd made it: seconds and nanoseconds since the epoch.
    created: Option<(i64, i32)>,
}

/// A time as seconds and nanoseconds since the epoch, as containerd reports
/// lease creation (before the epoch counts as the epoch).
fn unix_parts(t: SystemTime) -> (i64, i32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    // Below one billion, so it fits.
    let nanos = i32::try_from(d.subsec_nanos()).unwrap_or(0);
    (secs, nanos)
}

/// The ids of `node`'s leases among `listed`, made before `run_started`,
/// that belong to none of `pulling`. A lease without a creation time is
/// left alone.
fn stale<'a>(
    listed: impl Iterator<Item = Listed<'a>>,
    node: &str,
    pulling: &[String],
    run_started: (i64, i32),
) -> Vec<String> {
    let keep: BTreeSet<String> = pulling.iter().map(|r| lease_id(node, r)).collect();
    listed
        .filter(|l| {
            l.id.starts_with(LEASE_PREFIX)
                && l.node == Some(node)
                && l.created.is_some_and(|c| c < run_started)
                && !keep.contains(l.id)
        })
        .map(|l| l.id.to_string())
        .collect()
}

async fn delete(client: &mut LeasesClient<Channel>, id: String) -> Result<(), tonic::Status> {
    let req = DeleteRequest {
        id: id.clone(),
        sync: false,
    };
    match client.delete(namespaced(req)).await {
        Ok(_) => Ok(()),
        Err(s) if s.code() == Code::NotFound => Ok(()),
        Err(s) => {
            tracing::debug!(lease = %id, error = %s.message(), "could not end a resume lease; it expires on its own");
            Err(s)
        }
    }
}

impl BlobKeeper for Keeper {
    fn hold(&mut self, ingests: &[String]) -> impl Future<Output = ()> + Send {
        Keeper::hold(self, ingests)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_ends_only_the_daemons_leases_of_images_not_pulling() {
        let app = "127.0.0.1:5000/app:v1".to_string();
        let gone = "127.0.0.1:5000/gone:v1".to_string();
        let (app_id, gone_id) = (lease_id("n1", &app), lease_id("n1", &gone));
        let other_node = lease_id("n2", &gone);
        let new_id = lease_id("n1", "127.0.0.1:5000/new:v1");
        let started = (1_000, 500);
        let before = Some((999, 900));
        let listed = || {
            [
                (app_id.as_str(), Some("n1"), before),
                (gone_id.as_str(), Some("n1"), before),
                // Made by this run (a pull started after the keep list was
                // taken), even within the same second.
                (new_id.as_str(), Some("n1"), Some((1_000, 501))),
                // Another daemon's on the same containerd, one of no node,
                // one of no creation time, and containerd's own and other
                // tools' leases are never touched.
                (other_node.as_str(), Some("n2"), before),
                ("nodeimage-resume-cbf29ce484222325", None, before),
                (gone_id.as_str(), Some("n1"), None),
                ("k8s.io/pull-1", Some("n1"), before),
                (
                    "other-nodeimage-resume-0000000000000000",
                    Some("n1"),
                    before,
                ),
            ]
            .into_iter()
            .map(|(id, node, created)| Listed { id, node, created })
        };
        let cases: Vec<(&str, Vec<String>, Vec<String>)> = vec![
            (
                "nothing pulling",
                vec![],
                vec![app_id.clone(), gone_id.clone()],
            ),
            ("one pulling", vec![app.clone()], vec![gone_id.clone()]),
            ("both pulling", vec![app.clone(), gone.clone()], vec![]),
        ];
        for (name, pulling, want) in cases {
            assert_eq!(stale(listed(), "n1", &pulling, started), want, "{name}");
        }
    }

    #[test]
    fn times_before_the_epoch_or_past_the_range_do_not_panic() {
        assert_eq!(unix_parts(UNIX_EPOCH), (0, 0));
        let before = UNIX_EPOCH - std::time::Duration::from_secs(5);
        assert_eq!(unix_parts(before), (0, 0));
        let t = UNIX_EPOCH + std::time::Duration::new(7, 9);
        assert_eq!(unix_parts(t), (7, 9));
    }

    #[test]
    fn lease_ids_are_stable_distinct_and_valid_identifiers() {
        let a = lease_id("n1", "127.0.0.1:5000/app:v1");
        assert_eq!(a, lease_id("n1", "127.0.0.1:5000/app:v1"));
        assert_ne!(a, lease_id("n1", "127.0.0.1:5000/app:v2"));
        assert_ne!(a, lease_id("n2", "127.0.0.1:5000/app:v1"));
        // The separator keeps the node's bytes apart from the reference's.
        assert_ne!(lease_id("n1", "x/app:v1"), lease_id("n1x", "/app:v1"));
        // FNV-1a of one NUL byte: the rule is fixed.
        assert_eq!(lease_id("", ""), "nodeimage-resume-af63bd4c8601b7df");
        for id in [a, lease_id(&"n".repeat(253), &"x".repeat(10_000))] {
            assert!(id.len() <= 76, "{id}");
            assert!(
                id.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{id}"
            );
        }
    }

    #[test]
    fn labels_expire_later_and_skip_overlong_references() {
        let now: Timestamp = "2026-11-26T08:00:00Z".parse().expect("a timestamp");
        let l = lease_labels("n1", "r/app:v1", now);
        assert_eq!(l[EXPIRE_LABEL], "2026-11-26T14:00:00Z");
        assert_eq!(l[IMAGE_LABEL], "r/app:v1");
        assert_eq!(l[NODE_LABEL], "n1");
        let long = "r/".to_string() + &"a".repeat(MAX_LABEL_VALUE);
        let l = lease_labels("n1", &long, now);
        assert!(!l.contains_key(IMAGE_LABEL));
        assert!(l.contains_key(EXPIRE_LABEL));
        // At the end of time there is no expiry to write, and no panic.
        assert!(!lease_labels("n1", "r/app:v1", Timestamp::MAX).contains_key(EXPIRE_LABEL));
    }
}
