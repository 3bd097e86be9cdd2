//! `kubectl nodeimage openkruise-check`: before docs/migration.md's way A
//! (uninstall OpenKruise), find every object of an OpenKruise kind other
//! than its three image kinds. Uninstalling OpenKruise deletes its CRDs,
//! and every CloneSet, Advanced StatefulSet, SidecarSet… with them (and
//! their Pods); a cluster that has any must take way B instead. Discovery
//! finds the kinds the cluster serves, so kinds of later OpenKruise
//! versions count too. The verdict ([`verdict`]) is pure.

use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::Discovery;
use std::fmt::Write as _;

/// OpenKruise's API groups (its chart installs CRDs in both).
pub const GROUPS: [&str; 2] = ["apps.kruise.io", "policy.kruise.io"];

/// The kinds nodeimage serves: moving them is the migration itself.
pub const IMAGE_KINDS: [&str; 3] = ["NodeImage", "ImagePullJob", "ImageListPullJob"];

/// Kinds whose objects OpenKruise itself keeps, one per Node, from what
/// users wrote elsewhere (NodePodProbe: the probes of PodProbeMarkers, which
/// are counted): losing them loses nothing of the user's. Seen against a
/// real kruise-manager v1.9, which makes one per Node on its own.
pub const DERIVED_KINDS: [&str; 1] = ["NodePodProbe"];

/// Most object names listed per kind.
const NAMES_SHOWN: usize = 5;

/// The objects of one OpenKruise kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Kind, e.g. CloneSet.
    pub kind: String,
    /// API group.
    pub group: String,
    /// How many objects.
    pub count: usize,
    /// `namespace/name` (or `name`) of the first few.
    pub names: Vec<String>,
}

/// What the check says, and whether way A is safe.
pub fn verdict(found: &[Found]) -> (bool, String) {
    let used: Vec<&Found> = found.iter().filter(|f| f.count > 0).collect();
    let mut out = String::new();
    if used.is_empty() {
        out.push_str(
            "No objects of OpenKruise kinds other than NodeImage, ImagePullJob and \
             ImageListPullJob: OpenKruise is used only for pre-pulling, and \
             docs/migration.md way A (uninstall it) is safe.\n",
        );
        return (true, out);
    }
    out.push_str("OpenKruise is used for more than image pre-pulling:\n");
    for f in used {
        let more = f.count.saturating_sub(f.names.len());
        let tail = if more > 0 {
            format!(", and {more} more")
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {}.{}: {} ({}{tail})",
            f.kind,
            f.group,
            f.count,
            f.names.join(", ")
        );
    }
    out.push_str(
        "Uninstalling OpenKruise (way A) would delete its CRDs and all of these with them \
         (and the Pods of its workloads). Take docs/migration.md way B: keep OpenKruise \
         and turn off its image controllers.\n",
    );
    (false, out)
}

/// Lists the objects of every OpenKruise kind the cluster serves but the
/// image kinds.
pub async fn find(client: &kube::Client) -> Result<Vec<Found>, kube::Error> {
    let discovery = Discovery::new(client.clone()).filter(&GROUPS).run().await?;
    let mut found = Vec::new();
    for group in discovery.groups() {
        // Every version: a kind served only in a version other than the
        // group's preferred one (CloneSet v1alpha1 beside NodeImage
        // v1beta1) is not among the preferred version's resources.
        let mut seen = std::collections::BTreeSet::new();
        let versions = group.versions().map(str::to_string).collect::<Vec<_>>();
        for (ar, _) in versions.iter().flat_map(|v| group.versioned_resources(v)) {
            let kind = ar.kind.as_str();
            let ours_or_derived = IMAGE_KINDS.contains(&kind) || DERIVED_KINDS.contains(&kind);
            if ours_or_derived || ar.plural.contains('/') || !seen.insert(ar.kind.clone()) {
                continue;
            }
            // Every namespace, or the cluster scope: one list either way.
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let list = api.list_metadata(&ListParams::default()).await?;
            let names = list
                .items
                .iter()
                .take(NAMES_SHOWN)
                .map(|o| match &o.metadata.namespace {
                    Some(ns) => format!("{ns}/{}", o.metadata.name.clone().unwrap_or_default()),
                    None => o.metadata.name.clone().unwrap_or_default(),
                })
                .collect();
            found.push(Found {
                kind: ar.kind.clone(),
                group: ar.group.clone(),
                count: list.items.len(),
                names,
            });
        }
    }
    found.sort_by(|a, b| (&a.group, &a.kind).cmp(&(&b.group, &b.kind)));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(kind: &str, names: &[&str], count: usize) -> Found {
        Found {
            kind: kind.into(),
            group: "apps.kruise.io".into(),
            count,
            names: names.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn only_objects_of_other_kinds_block_way_a() {
        let (ok, text) = verdict(&[]);
        assert!(
            ok && text.contains("way A (uninstall it) is safe"),
            "{text}"
        );
        let (ok, _) = verdict(&[f("CloneSet", &[], 0), f("SidecarSet", &[], 0)]);
        assert!(ok);
        let (ok, text) = verdict(&[
            f("CloneSet", &["default/web", "shop/api"], 2),
            f("SidecarSet", &[], 0),
            f("BroadcastJob", &["a/1", "a/2", "a/3", "a/4", "a/5"], 7),
        ]);
        assert!(!ok);
        assert!(
            text.contains("CloneSet.apps.kruise.io: 2 (default/web, shop/api)"),
            "{text}"
        );
        assert!(
            text.contains("BroadcastJob.apps.kruise.io: 7 (a/1, a/2, a/3, a/4, a/5, and 2 more)"),
            "{text}"
        );
        assert!(!text.contains("SidecarSet"), "{text}");
        assert!(text.contains("Take docs/migration.md way B"), "{text}");
    }
}
