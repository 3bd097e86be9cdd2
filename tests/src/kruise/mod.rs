//! Support for the OpenKruise job tests (ImagePullJob, ImageListPullJob):
//! per-test namespaces, jobs read and awaited through `kubectl`, pull-secret
//! copies, fake NodeImages failed by hand (upstream's `FailNodeImageFast`),
//! a slow registry the shared containerds can reach, and stopping and
//! restarting the shared controller.
//!
//! By what they do: `kubectl` (objects through kubectl), `namespace`
//! ([`TestNs`]), `jobs` (job status and waits), `waits`, `entries` (a job's
//! NodeImage entries), `history` ([`NodeImageHistory`]), `fake`
//! ([`FakeNodeImage`]), `secrets` (pull secrets and their copies), `images`
//! (registries, pushes, [`SlowRegistry`], [`SlowImage`]) and `controller`
//! ([`SharedController`]). Everything is re-exported here, so tests name
//! it `kruise::…`.

mod controller;
mod entries;
mod fake;
mod history;
mod images;
mod jobs;
mod kubectl;
mod namespace;
mod secrets;
mod waits;

pub use controller::SharedController;
pub use entries::{
    find, image_in_spec, is_pulling, job_phase, nodeimages, nodeimages_summary, owned_by, spec_tag,
    status_tag,
};
pub use fake::{FAKE_LABEL, FakeNodeImage, chrono_now};
pub use history::NodeImageHistory;
pub use images::{
    SlowImage, SlowRegistry, auth_registry, push_unique, registry, remove_from_nodes, via,
};
pub use jobs::{ILPJ, IPJ, completed, count, describe, wait_gone, wait_job};
pub use kubectl::{create, delete, events_of, get, list, parse};
pub use namespace::TestNs;
pub use secrets::{
    COPY_LABEL, REFERENCES_ANNOTATION, SECRETS_NS, SOURCE_ANNOTATION, copies_of, docker_cfg,
    docker_config_json, job_reference, put_secret, references, wait_copy, wait_no_copy,
};
pub use waits::{consistently, eventually};
