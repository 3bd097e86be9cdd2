//! Keeps a pull's partial blobs across a restart of the daemon, so the pull
//! started again fetches only what is missing: the rule of who ends an
//! image's lease. The runtime keeps the blobs (the seam's `BlobKeeper`,
//! `ContainerRuntime::end_lease` and `sweep_leases`; over containerd in
//! `containerd::leases`). The lease is ended when the tag's outcome is
//! known, whatever it is, by the last task pulling that image reference
//! ([`Users`]), when its entry is removed mid-pull, and when the NodeImage
//! is deleted; leases a previous run left for images no longer pulled are
//! swept once the daemon has read its NodeImage (`sync`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The tasks of this daemon that pull each image reference now. Two tag
/// entries may name one reference (`nginx` and `docker.io/library/nginx`)
/// and so share its lease, which must end with the last of them, not the
/// first.
#[derive(Debug, Default)]
pub struct Users(Mutex<HashMap<String, usize>>);

impl Users {
    /// Counts a task pulling `reference` until the returned [`Use`] is left
    /// or dropped (an aborted task drops it).
    pub fn enter(self: &Arc<Self>, reference: String) -> Use {
        *self.lock().entry(reference.clone()).or_default() += 1;
        Use {
            users: self.clone(),
            reference,
        }
    }

    /// Whether a task pulls `reference` now.
    pub fn in_use(&self, reference: &str) -> bool {
        self.lock().contains_key(reference)
    }

    fn leave(&self, reference: &str) {
        let mut counts = self.lock();
        if let Some(n) = counts.get_mut(reference) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(reference);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One task's share in a reference's lease.
#[derive(Debug)]
pub struct Use {
    users: Arc<Users>,
    reference: String,
}

impl Use {
    /// Ends this task's share; returns the reference when no other task
    /// pulls it now, so that its lease may end.
    pub fn leave(self) -> Option<String> {
        let (users, reference) = (self.users.clone(), self.reference.clone());
        drop(self);
        (!users.in_use(&reference)).then_some(reference)
    }

    /// Ends this task's share and, if no other task pulls the reference,
    /// its lease (none on CRI alone). Not awaited: the outcome is reported
    /// without waiting on containerd.
    pub fn end(self, runtime: &impl crate::runtime::ContainerRuntime, node: &str) {
        if let Some(reference) = self.leave() {
            tokio::spawn(runtime.end_lease(node, reference));
        }
    }
}

impl Drop for Use {
    fn drop(&mut self) {
        self.users.leave(&self.reference);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_reference_is_released_by_its_last_user_only() {
        let users = Arc::new(Users::default());
        let a = users.enter("r".into());
        let b = users.enter("r".into());
        let other = users.enter("s".into());
        assert_eq!(a.leave(), None, "another task still pulls r");
        assert!(users.in_use("r"));
        assert_eq!(b.leave().as_deref(), Some("r"));
        assert!(!users.in_use("r"));
        // An aborted task drops its share without leaving.
        drop(other);
        assert!(!users.in_use("s"));
        let c = users.enter("s".into());
        assert_eq!(c.leave().as_deref(), Some("s"));
    }
}
