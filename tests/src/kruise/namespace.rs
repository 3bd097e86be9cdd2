//! A namespace of one test, gone with the test.

use crate::{Cluster, random_suffix};
use std::time::Duration;

/// A namespace of one test, deleted (with its pods force-deleted first, as
/// no kubelet will ever confirm their termination) when dropped.
pub struct TestNs {
    c: Cluster,
    /// Its name.
    pub name: String,
}

impl TestNs {
    /// Creates `<prefix>-<random>` and waits for its `default` ServiceAccount.
    pub fn create(c: &Cluster, prefix: &str) -> TestNs {
        let name = format!("{prefix}-{}", &random_suffix()[..6]);
        c.kubectl_ok(&["create", "namespace", &name], None);
        let ns = TestNs { c: c.clone(), name };
        crate::wait_for(
            &format!("ServiceAccount default in {}", ns.name),
            Duration::from_secs(60),
            || {
                c.kubectl(&["get", "serviceaccount", "default", "-n", &ns.name], None)
                    .success
                    .then_some(())
            },
        );
        ns
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        let _ = self.c.kubectl(
            &[
                "delete",
                "pods",
                "--all",
                "-n",
                &self.name,
                "--grace-period=0",
                "--force",
                "--wait=false",
            ],
            None,
        );
        self.c.delete_quietly(&["namespace", &self.name]);
    }
}
