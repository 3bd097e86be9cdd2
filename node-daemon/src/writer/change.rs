//! What kind of change a tag's report is, which decides when it is written.

use nodeimage_api::kruise::ImageTagStatus;

/// How a tag's new report differs from its last one, for when to write it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Change {
    /// New work: the tag's first report (Waiting or Pulling), or Waiting
    /// turning Pulling with the same version and message. Held for
    /// `START_HOLD`.
    Start,
    /// An end, a failure, a new version or message, an upgrade's step:
    /// written at once.
    Urgent,
    /// Progress only: at most once per `PROGRESS_INTERVAL`.
    Progress,
}

impl Change {
    /// The change from a tag's last report `old` to its new one.
    pub(super) fn of(old: Option<&ImageTagStatus>, new: &ImageTagStatus) -> Self {
        use nodeimage_api::kruise::ImagePullPhase::{Pulling, Waiting};
        let starting = matches!(new.phase, Waiting | Pulling);
        match old {
            None if starting => Change::Start,
            None => Change::Urgent,
            Some(o)
                if o.version != new.version
                    || o.message != new.message
                    || o.upgrade != new.upgrade =>
            {
                Change::Urgent
            }
            Some(o) if o.phase == new.phase => Change::Progress,
            Some(o) if o.phase == Waiting && new.phase == Pulling => Change::Start,
            Some(_) => Change::Urgent,
        }
    }
}
