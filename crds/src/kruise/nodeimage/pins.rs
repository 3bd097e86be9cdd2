//! Why a pulled image is not pinned on its node: the words a daemon puts in
//! the message of a `Succeeded` tag whose image the pin budget left out,
//! written once so the daemon (which writes and later clears them), the
//! tests and the docs read the same text. The tag's phase stays
//! `Succeeded`: the pull worked, only kubelet's image GC may take the image.

use super::status::{ImagePullPhase, ImageTagStatus};

/// How every such message begins.
pub const NOT_PINNED_PREFIX: &str = "pulled, not pinned: ";

/// Why the pin budget leaves an image on the node unpinned.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NotPinned {
    /// Images ranked before it fill the budget (`percent` of the image
    /// filesystem).
    OverBudget {
        /// The budget, in percent of the image filesystem.
        percent: f64,
    },
    /// The runtime reports no size for the image, so it cannot be counted.
    UnknownSize,
    /// The image filesystem's size is unknown, so no budget can be worked out.
    UnknownCapacity,
}

impl NotPinned {
    /// The tag's message (also the note of the daemon's Warning event).
    pub fn message(&self) -> String {
        let why = match self {
            NotPinned::OverBudget { percent } => format!(
                "over this node's pin budget ({percent}% of the image filesystem), which images ranked before it fill"
            ),
            NotPinned::UnknownSize => {
                "the runtime reports no size for it, so it cannot be counted against the pin budget"
                    .to_string()
            }
            NotPinned::UnknownCapacity => {
                "the image filesystem's size is unknown, so the pin budget cannot be checked"
                    .to_string()
            }
        };
        format!("{NOT_PINNED_PREFIX}{why}; kubelet's image GC may remove it")
    }
}

impl ImageTagStatus {
    /// Whether this entry carries a daemon's "not pinned" message.
    pub fn says_not_pinned(&self) -> bool {
        self.phase == ImagePullPhase::Succeeded
            && self
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with(NOT_PINNED_PREFIX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_begin_with_the_prefix_and_name_the_budget() {
        let over = NotPinned::OverBudget { percent: 40.0 }.message();
        assert!(over.starts_with(NOT_PINNED_PREFIX), "{over}");
        assert!(over.contains("40% of the image filesystem"), "{over}");
        let tiny = NotPinned::OverBudget { percent: 0.5 }.message();
        assert!(tiny.contains("0.5% of"), "{tiny}");
        for why in [NotPinned::UnknownSize, NotPinned::UnknownCapacity] {
            let m = why.message();
            assert!(m.starts_with(NOT_PINNED_PREFIX), "{m}");
            assert!(m.contains("pin budget"), "{m}");
        }
        let mut st = ImageTagStatus {
            phase: ImagePullPhase::Succeeded,
            message: Some(over.into()),
            ..Default::default()
        };
        assert!(st.says_not_pinned());
        st.phase = ImagePullPhase::Pulling;
        assert!(!st.says_not_pinned(), "only a Succeeded tag says it");
        st.phase = ImagePullPhase::Succeeded;
        st.message = Some("other".into());
        assert!(!st.says_not_pinned());
    }
}
