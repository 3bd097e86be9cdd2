//! Which references Eraser must leave alone: the images nodeimage pins, as
//! Eraser matches them. Pure, over the NodeImages.
//!
//! nodeimage pins an image while a valid tag entry wants it and its status
//! says `Succeeded` without the daemon's "not pinned" note. Eraser v1.4.1
//! ignores CRI's pinned flag; its "remove all unused" skips an image when an
//! exclusion names it exactly: one of its tags as CRI reports them
//! (`docker.io/library/nginx:1.25`, `registry:5000/team/app:v2`) or a bare
//! manifest digest (`sha256:…`, what it keeps of `repo@sha256:…`). So a tag
//! entry is listed as its full tag reference, a digest entry as its digest.

use nodeimage_api::NodeImage;
use nodeimage_api::kruise::ImagePullPhase;
use nodeimage_api::reference::ImageRef;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Most references one list holds (a ConfigMap is at most 1 MiB; 4,096
/// references of up to 255 characters stay well under it).
pub const MAX_REFERENCES: usize = 4096;

/// The exclusion list and how many references did not fit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Excluded {
    /// Sorted, distinct, at most [`MAX_REFERENCES`].
    pub references: Vec<String>,
    /// Pinned references left out by the bound.
    pub left_out: usize,
}

/// The reference Eraser matches for the entry `tag` of image `name`.
fn as_eraser_sees(name: &str, tag: &str) -> Option<String> {
    let r = ImageRef::from_name_and_tag(name, tag).ok()?;
    match (&r.digest, &r.tag) {
        (Some(d), _) => Some(d.clone()),
        (None, Some(t)) => Some(format!("{}:{t}", r.name())),
        (None, None) => Some(format!("{}:latest", r.name())),
    }
}

/// `--eraser-also-exclude`'s references as Eraser matches them; Err names
/// the first that is not an image reference.
pub fn always(references: &[String]) -> Result<Vec<String>, String> {
    let mut out = BTreeSet::new();
    for r in references
        .iter()
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
    {
        let parsed = ImageRef::parse(r).map_err(|e| format!("{r:?}: {e}"))?;
        let tag = parsed
            .digest
            .as_deref()
            .or(parsed.tag.as_deref())
            .unwrap_or("latest");
        let seen = as_eraser_sees(&parsed.name(), tag)
            .ok_or_else(|| format!("{r:?}: not an image reference"))?;
        out.insert(seen);
    }
    Ok(out.into_iter().collect())
}

/// The references nodeimage pins on any of `nodeimages`, after `always`
/// (which the bound never leaves out).
pub fn excluded<'a>(
    nodeimages: impl IntoIterator<Item = &'a Arc<NodeImage>>,
    always: &[String],
) -> Excluded {
    let mut all: BTreeSet<String> = BTreeSet::new();
    for ni in nodeimages {
        let (Some(spec), Some(status)) = (ni.spec.images.as_ref(), ni.status.as_ref()) else {
            continue;
        };
        for (name, image) in spec {
            for t in &image.tags {
                let pinned = status
                    .entry_for(name, t)
                    .is_some_and(|s| s.phase == ImagePullPhase::Succeeded && !s.says_not_pinned());
                if pinned && let Some(r) = as_eraser_sees(name, &t.tag) {
                    all.insert(r);
                }
            }
        }
    }
    for a in always {
        all.remove(a);
    }
    let room = MAX_REFERENCES.saturating_sub(always.len());
    let left_out = all.len().saturating_sub(room);
    let mut references: Vec<String> = always.to_vec();
    references.extend(all.into_iter().take(room));
    references.sort();
    Excluded {
        references,
        left_out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeimage_api::kruise::nodeimage::pins::NOT_PINNED_PREFIX;
    use nodeimage_api::kruise::{
        ImageSpec, ImageStatus, ImageTagSpec, ImageTagStatus, NodeImageStatus,
    };

    const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn node(tags: &[(&str, &str, Option<(ImagePullPhase, &str)>)]) -> Arc<NodeImage> {
        let mut ni = NodeImage::new("n", Default::default());
        let mut spec = std::collections::BTreeMap::new();
        let mut status = std::collections::BTreeMap::new();
        for (name, tag, reported) in tags {
            let entry: &mut ImageSpec = spec.entry((*name).into()).or_default();
            entry.tags.push(ImageTagSpec {
                tag: (*tag).into(),
                ..Default::default()
            });
            if let Some((phase, message)) = reported {
                let st: &mut ImageStatus = status.entry((*name).into()).or_default();
                st.tags.push(ImageTagStatus {
                    tag: (*tag).into(),
                    phase: *phase,
                    message: (!message.is_empty()).then(|| (*message).into()),
                    ..Default::default()
                });
            }
        }
        ni.spec.images = Some(spec);
        ni.status = Some(NodeImageStatus {
            image_statuses: Some(status),
            ..Default::default()
        });
        Arc::new(ni)
    }

    #[test]
    fn lists_what_is_pinned_as_eraser_matches_it() {
        use ImagePullPhase::*;
        let not_pinned = format!("{NOT_PINNED_PREFIX}over the budget");
        let nodes = [
            node(&[
                ("nginx", "1.25", Some((Succeeded, ""))),
                ("registry:5000/team/app", "v2", Some((Succeeded, ""))),
                ("registry:5000/team/app", DIGEST, Some((Succeeded, ""))),
                ("registry:5000/team/pulling", "v1", Some((Pulling, ""))),
                (
                    "registry:5000/team/failed",
                    "v1",
                    Some((Failed, "not found")),
                ),
                (
                    "registry:5000/team/unpinned",
                    "v1",
                    Some((Succeeded, not_pinned.as_str())),
                ),
                ("registry:5000/team/waiting", "v1", None),
            ]),
            node(&[("nginx", "1.25", Some((Succeeded, "")))]),
        ];
        let got = excluded(nodes.iter(), &[]);
        assert_eq!(
            got.references,
            vec![
                "docker.io/library/nginx:1.25".to_string(),
                "registry:5000/team/app:v2".to_string(),
                DIGEST.to_string(),
            ]
        );
        assert_eq!(got.left_out, 0);
    }

    #[test]
    fn the_list_is_bounded() {
        let tags: Vec<String> = (0..MAX_REFERENCES + 3).map(|i| format!("v{i}")).collect();
        let entries: Vec<(&str, &str, Option<(ImagePullPhase, &str)>)> = tags
            .iter()
            .map(|t| ("r/app", t.as_str(), Some((ImagePullPhase::Succeeded, ""))))
            .collect();
        let got = excluded([node(&entries)].iter(), &[]);
        assert_eq!(got.references.len(), MAX_REFERENCES);
        assert_eq!(got.left_out, 3);
        // What the flag names is always in, whatever the bound leaves out.
        let pause = "registry.k8s.io/pause:3.10".to_string();
        let got = excluded([node(&entries)].iter(), std::slice::from_ref(&pause));
        assert_eq!(got.references.len(), MAX_REFERENCES);
        assert_eq!(got.left_out, 4);
        assert!(got.references.contains(&pause));
    }

    #[test]
    fn the_flags_references_as_eraser_matches_them() {
        let flag = |refs: &[&str]| always(&refs.iter().map(|r| r.to_string()).collect::<Vec<_>>());
        assert_eq!(
            flag(&[
                "registry.k8s.io/pause:3.10",
                " pause:3.6 ",
                "",
                &format!("r/app@{DIGEST}")
            ]),
            Ok(vec![
                "docker.io/library/pause:3.6".to_string(),
                "registry.k8s.io/pause:3.10".to_string(),
                DIGEST.to_string(),
            ])
        );
        let err = flag(&["registry.k8s.io/pause:3.10", "Not A Reference"]).expect_err("refused");
        assert!(err.contains("Not A Reference"), "{err}");
        // A pinned image the flag also names is listed once.
        let nodes = [node(&[(
            "registry.k8s.io/pause",
            "3.10",
            Some((ImagePullPhase::Succeeded, "")),
        )])];
        let got = excluded(nodes.iter(), &["registry.k8s.io/pause:3.10".to_string()]);
        assert_eq!(
            got.references,
            vec!["registry.k8s.io/pause:3.10".to_string()]
        );
    }
}
