//! The events a job's plan asks its shell to publish on the job, one type
//! for every kind so plans stay pure and the shell publishes them alike.

/// An event to publish on the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEvent {
    /// Warning rather than Normal.
    pub warning: bool,
    /// Short CamelCase reason.
    pub reason: &'static str,
    /// Human text.
    pub note: String,
}

impl JobEvent {
    /// A Normal event.
    pub fn normal(reason: &'static str, note: String) -> Self {
        Self {
            warning: false,
            reason,
            note,
        }
    }

    /// A Warning event.
    pub fn warning(reason: &'static str, note: String) -> Self {
        Self {
            warning: true,
            reason,
            note,
        }
    }
}
