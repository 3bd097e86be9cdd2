//! An in-memory container runtime for unit tests and the runtime
//! conformance test: it answers from a table, records every call, and can
//! be told to be unavailable (a closed socket), slow, or to fail with a
//! given error; its registries can lack an image or rate-limit. The
//! conformance test (`tests/tests/runtime_conformance.rs`) checks that it
//! answers each case in the class every containerd of the test stack does.

use super::{
    BlobKeeper, Container, ContainerRuntime, Image, ListedImage, PullProbe, PullRequest,
    RuntimeError,
};
use nodeimage_api::reference::ImageRef;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

mod removal;

/// A call the daemon made, in the order it made them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// `image_status` of a reference.
    ImageStatus(String),
    /// `pull` of a reference, with the user name it pulled as (None: anonymously).
    Pull(String, Option<String>),
    /// `image_fs`.
    ImageFs,
    /// A keeper held these ingests.
    Hold(Vec<String>),
    /// The lease of a reference ended.
    EndLease(String),
    /// An image was pinned (true) or unpinned (false).
    Pin(String, bool),
    /// The leases of a previous run were swept, keeping these references'.
    SweepLeases(Vec<String>),
    /// A file was copied out of an image: the reference and the path.
    CopyFromImage(String, String),
    /// An image was removed, by ID.
    RemoveImage(String),
}

/// How the runtime answers one call.
#[derive(Clone, Debug)]
pub enum Answer {
    /// Succeeds after this long.
    Ok(Duration),
    /// Fails with this error after this long.
    Err(RuntimeError, Duration),
    /// Never answers.
    Hang,
}

#[derive(Default)]
struct State {
    present: BTreeMap<String, Image>,
    pulls: VecDeque<Answer>,
    statuses: VecDeque<RuntimeError>,
    samples: VecDeque<i32>,
    ingests: Vec<String>,
    /// Pinned images, with the node that pinned each ("" for someone else).
    pins: BTreeMap<String, String>,
    cri_only: bool,
    /// Every call fails as on a closed socket.
    down: bool,
    /// References the registries do not have.
    absent: BTreeSet<String>,
    /// Registry hosts that answer 429.
    limiting: BTreeSet<String>,
    /// Files in images: (reference, path) → content.
    files: BTreeMap<(String, String), Vec<u8>>,
    /// Containers of every state.
    containers: Vec<Container>,
    /// The sandbox image the status names.
    sandbox: Option<String>,
    /// Image IDs whose removal fails, with the error.
    refuse_removal: BTreeMap<String, RuntimeError>,
    calls: Vec<Call>,
}

/// The in-memory runtime; clones share their state.
#[derive(Clone, Default)]
pub struct FakeRuntime(Arc<Mutex<State>>);

impl FakeRuntime {
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts `reference` on the node.
    pub fn present(&self, reference: &str) -> &Self {
        let image = image_of(reference);
        self.state().present.insert(reference.to_string(), image);
        self
    }

    /// Takes `reference` off the node (kubelet's image GC, a removal by hand).
    pub fn remove(&self, reference: &str) -> &Self {
        self.state().present.remove(reference);
        self
    }

    /// Puts `reference` on the node with `size` bytes (0: not reported).
    pub fn sized(&self, reference: &str, size: u64) -> &Self {
        let mut image = image_of(reference);
        image.size = size;
        self.state().present.insert(reference.to_string(), image);
        self
    }

    /// The next pulls answer these, in order (after them, pulls succeed at once).
    pub fn pulls(&self, answers: impl IntoIterator<Item = Answer>) -> &Self {
        self.state().pulls.extend(answers);
        self
    }

    /// The next `image_status` calls fail with these, in order.
    pub fn statuses(&self, errors: impl IntoIterator<Item = RuntimeError>) -> &Self {
        self.state().statuses.extend(errors);
        self
    }

    /// Progress samples, in order, and the ingests a probe reports.
    pub fn progress(&self, samples: &[i32], ingests: &[&str]) -> &Self {
        let mut s = self.state();
        s.samples.extend(samples);
        s.ingests = ingests.iter().map(|i| i.to_string()).collect();
        drop(s);
        self
    }

    /// `reference` is on the node, pinned by `owner` ("" for someone else).
    pub fn pinned(&self, reference: &str, owner: &str) -> &Self {
        let mut s = self.state();
        if !s.present.contains_key(reference) {
            s.present.insert(reference.to_string(), image_of(reference));
        }
        s.pins.insert(reference.to_string(), owner.to_string());
        drop(s);
        self
    }

    /// The images pinned now, with who pinned each.
    pub fn pins(&self) -> BTreeMap<String, String> {
        self.state().pins.clone()
    }

    /// A runtime with CRI alone: no progress, no leases.
    pub fn cri_only(&self) -> &Self {
        self.state().cri_only = true;
        self
    }

    /// Every call fails as the runtime's closed socket makes it fail.
    pub fn down(&self) -> &Self {
        self.state().down = true;
        self
    }

    /// Its registry has no `reference`: a pull of it is not found.
    pub fn not_in_registry(&self, reference: &str) -> &Self {
        self.state().absent.insert(reference.to_string());
        self
    }

    /// The registry `host` (`host[:port]`) answers every pull with 429.
    pub fn rate_limiting(&self, host: &str) -> &Self {
        self.state().limiting.insert(host.to_string());
        self
    }

    /// The image `reference` holds `content` at `path`.
    pub fn file(&self, reference: &str, path: &str, content: &[u8]) -> &Self {
        let key = (reference.to_string(), path.to_string());
        self.state().files.insert(key, content.to_vec());
        self
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// How many pulls were asked for.
    pub fn pull_count(&self) -> usize {
        self.calls()
            .iter()
            .filter(|c| matches!(c, Call::Pull(..)))
            .count()
    }

    fn record(&self, call: Call) {
        self.state().calls.push(call);
    }
}

/// What a pulled image looks like: a repository digest under its name.
fn image_of(reference: &str) -> Image {
    let name = match reference.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => name,
        _ => reference,
    };
    Image {
        id: "sha256:config".into(),
        repo_digests: vec![format!("{name}@sha256:manifest")],
        size: 100,
        pinned: false,
    }
}

/// What a call says while the runtime is down.
fn closed() -> RuntimeError {
    RuntimeError::Unavailable("connection refused (fake runtime down)".into())
}

/// How the fake's registries answer a pull of `reference`, if not with the image.
fn registry_refusal(s: &State, reference: &str) -> Option<RuntimeError> {
    let said = |why: &str| format!("failed to pull and unpack image \"{reference}\": {why}");
    if s.absent.contains(reference) {
        return Some(RuntimeError::NotFound(said(&format!(
            "{reference}: not found"
        ))));
    }
    let host = ImageRef::parse(reference)
        .map(|r| r.registry)
        .unwrap_or_default();
    s.limiting
        .contains(&host)
        .then(|| RuntimeError::RateLimited(said("429 Too Many Requests")))
}

async fn answer(a: Answer) -> Result<(), RuntimeError> {
    match a {
        Answer::Ok(after) => {
            tokio::time::sleep(after).await;
            Ok(())
        }
        Answer::Err(e, after) => {
            tokio::time::sleep(after).await;
            Err(e)
        }
        Answer::Hang => std::future::pending().await,
    }
}

impl ContainerRuntime for FakeRuntime {
    type Probe = FakeProbe;
    type Keeper = FakeKeeper;

    async fn name_and_version(&self) -> Result<(String, String), RuntimeError> {
        if self.state().down {
            return Err(closed());
        }
        Ok(("containerd".into(), "v2.2.9".into()))
    }

    async fn containerd_answers(&self) -> bool {
        let s = self.state();
        !s.cri_only && !s.down
    }

    async fn image_status(&self, image: &str) -> Result<Option<Image>, RuntimeError> {
        self.record(Call::ImageStatus(image.to_string()));
        let mut s = self.state();
        if s.down {
            return Err(closed());
        }
        match s.statuses.pop_front() {
            Some(e) => Err(e),
            None => Ok(s.present.get(image).cloned().map(|mut i| {
                i.pinned = s.pins.contains_key(image);
                i
            })),
        }
    }

    async fn pull(&self, req: PullRequest) -> Result<String, RuntimeError> {
        let user = req.auth.as_ref().map(|a| a.username.clone());
        self.record(Call::Pull(req.image.clone(), user));
        let (next, refused) = {
            let mut s = self.state();
            if s.down {
                return Err(closed());
            }
            (s.pulls.pop_front(), registry_refusal(&s, &req.image))
        };
        answer(next.unwrap_or(Answer::Ok(Duration::ZERO))).await?;
        if let Some(e) = refused {
            return Err(e);
        }
        let image_ref = "sha256:config".to_string();
        let image = image_of(&req.image);
        let mut s = self.state();
        s.present.insert(req.image, image.clone());
        s.present.insert(image_ref.clone(), image);
        Ok(image_ref)
    }

    async fn image_fs(&self) -> Result<Vec<(String, u64)>, RuntimeError> {
        self.record(Call::ImageFs);
        if self.state().down {
            return Err(closed());
        }
        Ok(vec![("/".into(), 0)])
    }

    fn probe(&self, _: &str, _: &str, _: SystemTime) -> Option<FakeProbe> {
        let ingests = self.state().ingests.clone();
        (!self.state().cri_only).then(|| FakeProbe {
            runtime: self.clone(),
            ingests,
        })
    }

    fn keeper(&self, _: &str, _: &str) -> Option<FakeKeeper> {
        (!self.state().cri_only).then(|| FakeKeeper(self.clone()))
    }

    fn end_lease(
        &self,
        _: &str,
        reference: String,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send + 'static {
        self.record(Call::EndLease(reference));
        let s = self.state();
        // On CRI alone there is no lease, so none to end: no error either.
        let r = if s.down && !s.cri_only {
            Err(closed())
        } else {
            Ok(())
        };
        std::future::ready(r)
    }

    fn sweep_leases(
        &self,
        _: &str,
        mut pulling: Vec<String>,
        _: SystemTime,
    ) -> impl Future<Output = ()> + Send + 'static {
        if !self.state().cri_only {
            pulling.sort();
            self.record(Call::SweepLeases(pulling));
        }
        std::future::ready(())
    }

    async fn pinned_by(&self, node: &str) -> Result<Option<BTreeSet<String>>, RuntimeError> {
        let s = self.state();
        if s.down {
            return Err(closed());
        }
        if s.cri_only {
            return Ok(None);
        }
        let ours = s.pins.iter().filter(|(_, owner)| *owner == node);
        Ok(Some(ours.map(|(name, _)| name.clone()).collect()))
    }

    async fn set_pin(&self, name: &str, node: &str, pin: bool) -> Result<bool, RuntimeError> {
        self.record(Call::Pin(name.to_string(), pin));
        let mut s = self.state();
        if s.down {
            return Err(closed());
        }
        if !s.present.contains_key(name) {
            return Ok(false);
        }
        let owner = s.pins.get(name).cloned();
        Ok(match (pin, owner) {
            (true, Some(_)) => false,
            (true, None) => {
                s.pins.insert(name.to_string(), node.to_string());
                true
            }
            (false, Some(o)) if o == node => {
                s.pins.remove(name);
                true
            }
            (false, _) => false,
        })
    }

    async fn list_images(&self) -> Result<Vec<ListedImage>, RuntimeError> {
        removal::list_images(self)
    }

    async fn list_containers(&self) -> Result<Vec<Container>, RuntimeError> {
        removal::list_containers(self)
    }

    async fn sandbox_image(&self) -> Result<Option<String>, RuntimeError> {
        let s = self.state();
        if s.down {
            return Err(closed());
        }
        Ok(s.sandbox.clone())
    }

    async fn remove_image(&self, id: &str) -> Result<(), RuntimeError> {
        removal::remove_image(self, id)
    }

    async fn copy_from_image(
        &self,
        _: &str,
        image: &ImageRef,
        path: &str,
        dest: &Path,
    ) -> Result<(), String> {
        let content = self.file_of(image, path)?;
        tokio::fs::write(dest, content)
            .await
            .map_err(|e| format!("writing {}: {e}", dest.display()))
    }
}

impl FakeRuntime {
    /// The file `path` of `image`, as the fake's table holds it.
    fn file_of(&self, image: &ImageRef, path: &str) -> Result<Vec<u8>, String> {
        let reference = image.pull_ref();
        self.record(Call::CopyFromImage(reference.clone(), path.to_string()));
        let s = self.state();
        if s.cri_only {
            return Err("taking the upgrade tool out of the image needs containerd's content API; this daemon runs on CRI alone (--runtime-api)".into());
        }
        if s.down {
            return Err(closed().to_string());
        }
        if !s.present.contains_key(&reference) {
            return Err(format!("image {reference} is not on the node"));
        }
        s.files
            .get(&(reference, path.to_string()))
            .cloned()
            .ok_or_else(|| format!("{path} not found in the image"))
    }
}

/// Samples progress from the fake's list.
pub struct FakeProbe {
    runtime: FakeRuntime,
    ingests: Vec<String>,
}

impl PullProbe for FakeProbe {
    async fn sample(&mut self, _alone: bool) -> Option<i32> {
        self.runtime.state().samples.pop_front()
    }

    fn ingests(&self) -> &[String] {
        &self.ingests
    }
}

/// Records what it is asked to hold.
pub struct FakeKeeper(FakeRuntime);

impl BlobKeeper for FakeKeeper {
    async fn hold(&mut self, ingests: &[String]) {
        self.0.record(Call::Hold(ingests.to_vec()));
    }
}
