//! The nodeimage API: Rust types for every kind nodeimage serves, and the
//! CustomResourceDefinitions generated from them.
//!
//! The OpenKruise kinds (`apps.kruise.io`) live in [`kruise`], the KubeEdge
//! kinds (`operations.kubeedge.io`) in [`kubeedge`], nodeimage's own
//! API (`nodeimage.dev`: removal entries) in [`nodeimage_dev`]. Field names, types and
//! optionality follow the upstream APIs so that manifests written for either
//! project apply unchanged; validation that upstream does in webhooks is
//! expressed here as schema constraints and CEL rules.

pub mod conditions;
pub mod crdgen;
pub mod credentials;
pub mod defaults;
pub mod followtag;
pub mod gate;
pub mod interned;
pub mod kruise;
pub mod kubeedge;
pub mod lenient;
pub mod limits;
pub mod nodeimage_dev;
pub mod nodeselector;
pub mod noproxy;
pub mod p2p;
pub mod predownload;
pub mod reference;
pub mod validation;

pub use kruise::{ImageListPullJob, ImagePullJob, NodeImage};
pub use kubeedge::{ImagePrePullJob, NodeUpgradeJob};
pub use nodeimage_dev::ImageRemovalJob;
