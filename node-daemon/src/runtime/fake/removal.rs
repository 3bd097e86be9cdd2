//! The fake runtime's images by ID, containers and removals: what the
//! removal shell reads and asks of it.

use super::{Call, FakeRuntime, State, closed, image_of};
use crate::runtime::{Container, ListedImage, RuntimeError};
use std::collections::BTreeMap;

impl FakeRuntime {
    /// Puts `reference` on the node as the image `id` of `size` bytes
    /// (references given one ID are names of one image).
    pub fn image(&self, reference: &str, id: &str, size: u64) -> &Self {
        let mut image = self.state().present.get(reference).cloned();
        let image = image.get_or_insert_with(|| image_of(reference));
        image.id = id.to_string();
        image.size = size;
        let image = image.clone();
        self.state().present.insert(reference.to_string(), image);
        self
    }

    /// A container `name` in `state`, created from the image `image_id`.
    pub fn container(&self, name: &str, state: &str, image_id: &str) -> &Self {
        self.state().containers.push(Container {
            name: name.into(),
            state: state.into(),
            image_id: image_id.into(),
            image: String::new(),
        });
        self
    }

    /// The runtime's status names `image` as its sandbox image.
    pub fn sandbox(&self, image: &str) -> &Self {
        self.state().sandbox = Some(image.into());
        self
    }

    /// Removing the image `id` fails with `error`.
    pub fn refuse_removal(&self, id: &str, error: RuntimeError) -> &Self {
        self.state().refuse_removal.insert(id.into(), error);
        self
    }
}

/// The present references grouped into images by ID, as CRI lists them
/// (a pull's image-ID entry is not a name).
fn listed(s: &State) -> Vec<ListedImage> {
    let mut by_id: BTreeMap<String, ListedImage> = BTreeMap::new();
    for (name, image) in s.present.iter().filter(|(n, _)| !n.starts_with("sha256:")) {
        let l = by_id
            .entry(image.id.clone())
            .or_insert_with(|| ListedImage {
                id: image.id.clone(),
                size: image.size,
                ..Default::default()
            });
        if name.contains('@') {
            l.repo_digests.push(name.clone());
        } else {
            l.repo_tags.push(name.clone());
        }
        for d in &image.repo_digests {
            if !l.repo_digests.contains(d) {
                l.repo_digests.push(d.clone());
            }
        }
        l.pinned |= s.pins.contains_key(name);
    }
    by_id.into_values().collect()
}

/// Every image, as CRI lists them.
pub(super) fn list_images(rt: &FakeRuntime) -> Result<Vec<ListedImage>, RuntimeError> {
    let s = rt.state();
    if s.down {
        return Err(closed());
    }
    Ok(listed(&s))
}

/// Every container.
pub(super) fn list_containers(rt: &FakeRuntime) -> Result<Vec<Container>, RuntimeError> {
    let s = rt.state();
    if s.down {
        return Err(closed());
    }
    Ok(s.containers.clone())
}

/// Removes every name of the image `id`, as CRI does; an image already
/// gone is no error.
pub(super) fn remove_image(rt: &FakeRuntime, id: &str) -> Result<(), RuntimeError> {
    rt.record(Call::RemoveImage(id.to_string()));
    let mut s = rt.state();
    if s.down {
        return Err(closed());
    }
    if let Some(e) = s.refuse_removal.get(id) {
        return Err(e.clone());
    }
    let names: Vec<String> = s
        .present
        .iter()
        .filter(|(_, i)| i.id == id)
        .map(|(n, _)| n.clone())
        .collect();
    for n in names {
        s.present.remove(&n);
        s.pins.remove(&n);
    }
    Ok(())
}
