//! Keeps a pull's partial blobs across a restart of the daemon, so the pull
//! started again fetches only what is missing.
//!
//! CRI's pull writes each blob into an ingest held by a lease of the call;
//! when the call ends (a killed daemon ends it), containerd deletes that
//! lease and its garbage collector drops the ingests at once. The daemon
//! therefore adds every ingest of its pull to a lease of its own, named after
//! the image reference. containerd's fetcher resumes an ingest it finds
//! under the same name with a range request, so a pull started again (after a
//! restart, or a timed-out attempt) picks up where the bytes stop. The lease
//! is deleted when the tag's pull ends either way, and expires on its own
//! (`KEEP_FOR`) when no pull ends it, such as a tag removed while the daemon
//! was down.

use containerd_client::services::v1::leases_client::LeasesClient;
use containerd_client::services::v1::{AddResourceRequest, CreateRequest, DeleteRequest, Resource};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::collections::{BTreeSet, HashMap};
use tonic::Code;
use tonic::transport::Channel;

use crate::cri::namespaced;

/// How long a lease keeps partial blobs if no pull of its image ends.
pub const KEEP_FOR: SignedDuration = SignedDuration::from_hours(6);
/// containerd's label that makes its garbage collector drop a lease.
const EXPIRE_LABEL: &str = "containerd.io/gc.expire";
/// Label naming the image a lease keeps blobs for (for `ctr leases ls`).
const IMAGE_LABEL: &str = "nodeimage.dev/image";
/// containerd's resource type for an ingest (a blob being written).
const INGEST: &str = "ingests";
/// Longest label value containerd accepts.
const MAX_LABEL_VALUE: usize = 4096;

/// The lease's name for an image reference: stable across daemon versions
/// (FNV-1a, not std's unspecified hasher) and within containerd's identifier
/// rules (letters, digits and `-`; at most 76 characters).
pub fn lease_id(reference: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in reference.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("nodeimage-resume-{h:016x}")
}

/// The labels a new lease gets: when it expires, and which image it is for.
pub fn lease_labels(reference: &str, now: Timestamp) -> HashMap<String, String> {
    let mut labels = HashMap::new();
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
    channel: Channel,
    client: LeasesClient<Channel>,
    reference: String,
    id: String,
    exists: bool,
    held: BTreeSet<String>,
    /// Whether a failure to hold was logged (once per pull).
    warned: bool,
}

impl Keeper {
    /// A keeper for pulls of `reference`; it creates its lease only once it
    /// has an ingest to hold.
    pub fn new(channel: Channel, reference: &str) -> Self {
        Keeper {
            client: LeasesClient::new(channel.clone()),
            channel,
            reference: reference.to_string(),
            id: lease_id(reference),
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
                labels: lease_labels(&self.reference, Timestamp::now()),
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
                    // The lease expired or was removed by hand: make it anew.
                    self.exists = false;
                }
                Err(self.error("add ingest", &s))
            }
        }
    }

    /// Ends the lease once the tag's pull has an outcome: what the pull
    /// fetched belongs to the image now, and a failed pull's partial blobs
    /// are not kept. A lease a previous run left is ended too.
    pub async fn release(self) {
        end(self.channel, self.reference).await;
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
/// containerd's garbage collector drops them.
pub async fn end(channel: Channel, reference: String) {
    let id = lease_id(&reference);
    let req = DeleteRequest {
        id: id.clone(),
        sync: false,
    };
    match LeasesClient::new(channel).delete(namespaced(req)).await {
        Ok(_) => {}
        Err(s) if s.code() == Code::NotFound => {}
        Err(s) => {
            tracing::debug!(lease = %id, error = %s.message(), "could not end a resume lease; it expires on its own");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ids_are_stable_distinct_and_valid_identifiers() {
        let a = lease_id("127.0.0.1:5000/app:v1");
        assert_eq!(a, lease_id("127.0.0.1:5000/app:v1"));
        assert_ne!(a, lease_id("127.0.0.1:5000/app:v2"));
        // FNV-1a of the empty string is its offset basis: the rule is fixed.
        assert_eq!(lease_id(""), "nodeimage-resume-cbf29ce484222325");
        for id in [a, lease_id(&"x".repeat(10_000))] {
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
        let l = lease_labels("r/app:v1", now);
        assert_eq!(l[EXPIRE_LABEL], "2026-11-26T14:00:00Z");
        assert_eq!(l[IMAGE_LABEL], "r/app:v1");
        let long = "r/".to_string() + &"a".repeat(MAX_LABEL_VALUE);
        let l = lease_labels(&long, now);
        assert!(!l.contains_key(IMAGE_LABEL));
        assert!(l.contains_key(EXPIRE_LABEL));
        // At the end of time there is no expiry to write, and no panic.
        assert!(!lease_labels("r/app:v1", Timestamp::MAX).contains_key(EXPIRE_LABEL));
    }
}
