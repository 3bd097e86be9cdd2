//! Whether and how a job follows its tag, and what a lookup's outcome means
//! for it: the annotations to write, the events, and since when its nodes
//! pull the tag again. Pure; the shell (`super`) reads and writes.

use crate::engine::jobevents::JobEvent;
use crate::runtime::clock::go_duration;
use chrono::{DateTime, TimeDelta, Utc};
use nodeimage_api::followtag::{
    FOLLOW_TAG, FOLLOWED_DIGEST, MAX_INTERVAL_SECONDS, MIN_INTERVAL_SECONDS, MOVED_AT,
};
use nodeimage_api::reference::ImageRef;
use std::collections::BTreeMap;
use std::time::Duration;

/// Annotation the controller writes on a job that names a follow-tag
/// interval: what it follows now, or why not (read by people; events are
/// published when it changes, so a repeated outcome is said once).
pub const FOLLOW_STATUS: &str = "nodeimage.dev/follow-tag-status";

/// Event: the annotation's value is refused, or the image has nothing to follow.
pub const REFUSED: &str = "FollowTagRefused";
/// Event: the tag's digest is known for the first time.
pub const FOLLOWED: &str = "TagFollowed";
/// Event: the tag points to another digest; the job's nodes pull it again.
pub const MOVED: &str = "TagMoved";
/// Event: the registry did not answer the lookup.
pub const LOOKUP_FAILED: &str = "TagLookupFailed";
/// Event: the job completed; its tag is no longer followed.
pub const ENDED: &str = "FollowTagEnded";

/// What a job asks of its tag.
#[derive(Clone, Debug, PartialEq)]
pub enum Ask {
    /// No follow-tag annotation: the tag is not followed (as upstream).
    Off,
    /// Look the tag of `image` up every `interval`.
    Follow {
        /// The job's image, with a tag and no digest.
        image: ImageRef,
        /// How often.
        interval: Duration,
    },
    /// The annotation cannot be honoured; why, naming it.
    Refused(String),
}

/// Reads the job's follow-tag annotation for `image` (the job's
/// `spec.image`): an interval between a minute and a week, and a tag to
/// follow (a digest-pinned image has none).
pub fn ask(annotations: &BTreeMap<String, String>, image: &str) -> Ask {
    let Some(value) = annotations.get(FOLLOW_TAG) else {
        return Ask::Off;
    };
    let interval = match nodeimage_ops::duration::parse(value) {
        Ok(d) => d,
        Err(e) => return Ask::Refused(format!("{FOLLOW_TAG}: {e}; the tag is not followed")),
    };
    let (min, max) = (
        Duration::from_secs(MIN_INTERVAL_SECONDS),
        Duration::from_secs(MAX_INTERVAL_SECONDS),
    );
    if interval < min || interval > max {
        return Ask::Refused(format!(
            "{FOLLOW_TAG}: {value:?} is outside {} to {}; the tag is not followed",
            text(min),
            text(max)
        ));
    }
    let parsed = match ImageRef::parse(image) {
        Ok(r) => r,
        Err(e) => return Ask::Refused(format!("{FOLLOW_TAG}: cannot follow {image}: {e}")),
    };
    if parsed.digest.is_some() {
        return Ask::Refused(format!(
            "{FOLLOW_TAG}: {image} is pinned by digest: there is no tag to follow"
        ));
    }
    Ask::Follow {
        image: parsed,
        interval,
    }
}

/// `d` as Go prints a duration.
fn text(d: Duration) -> String {
    go_duration(TimeDelta::seconds(
        i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
    ))
}

/// What the lookups tell a following job this round.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Seen {
    /// The tag's digest at the last successful lookup of anyone's (None:
    /// not known yet).
    pub digest: Option<String>,
    /// The last lookup (this job's or another's) failed: why.
    pub failure: Option<String>,
}

/// What the shell does for a job's tag.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// Annotations to set (`Some`) or remove (`None`); empty: no write.
    pub annotations: BTreeMap<&'static str, Option<String>>,
    /// Events to publish on the job.
    pub events: Vec<JobEvent>,
    /// Tag entries of the job created before this pull again (the tag moved then).
    pub pull_again_before: Option<DateTime<Utc>>,
    /// The job follows its tag (its entries are pulled with `Always`).
    pub following: bool,
}

/// Decides, from what the job asks, whether it has completed, what the
/// lookups saw and what the job's annotations say now (`current`), what
/// to write and say. A move is a digest other than the one recorded; the
/// first digest is recorded without a re-pull (the nodes pulled the tag as
/// it was when the job began).
pub fn judge(
    ask: &Ask,
    completed: bool,
    seen: &Seen,
    current: &BTreeMap<String, String>,
    now: DateTime<Utc>,
) -> Verdict {
    let mut v = Verdict {
        pull_again_before: moved_at(current),
        ..Default::default()
    };
    let status = |v: &mut Verdict, text: String, event: Option<JobEvent>| {
        if current.get(FOLLOW_STATUS) != Some(&text) {
            v.annotations.insert(FOLLOW_STATUS, Some(text));
            v.events.extend(event);
        }
    };
    match ask {
        Ask::Off => {
            for key in [FOLLOW_STATUS, FOLLOWED_DIGEST, MOVED_AT] {
                if current.contains_key(key) {
                    v.annotations.insert(key, None);
                }
            }
            v.pull_again_before = None;
        }
        Ask::Refused(why) => {
            status(
                &mut v,
                why.clone(),
                Some(JobEvent::warning(REFUSED, why.clone())),
            );
            v.pull_again_before = None;
        }
        Ask::Follow { .. } if completed => {
            let text = "not followed: the job has completed".to_string();
            let note = "The job has completed; its tag is no longer followed".to_string();
            status(&mut v, text, Some(JobEvent::normal(ENDED, note)));
        }
        Ask::Follow { image, interval } => followed(&mut v, image, *interval, seen, current, now),
    }
    v
}

/// A followed tag's verdict: a failure said, the first digest recorded, a
/// new digest a move (its nodes pull again since `now`), the status kept.
fn followed(
    v: &mut Verdict,
    image: &ImageRef,
    interval: Duration,
    seen: &Seen,
    current: &BTreeMap<String, String>,
    now: DateTime<Utc>,
) {
    v.following = true;
    let (every, tag) = (text(interval), image.pull_ref());
    let status = |v: &mut Verdict, text: String, event: Option<JobEvent>| {
        if current.get(FOLLOW_STATUS) != Some(&text) {
            v.annotations.insert(FOLLOW_STATUS, Some(text));
            v.events.extend(event);
        }
    };
    if let Some(why) = &seen.failure {
        let note = format!("Looking up the digest of {tag} failed: {why}");
        let event = JobEvent::warning(LOOKUP_FAILED, note);
        return status(v, format!("lookup failed: {why}"), Some(event));
    }
    let Some(digest) = &seen.digest else { return };
    let recorded = current.get(FOLLOWED_DIGEST);
    let event = match recorded {
        None => Some(JobEvent::normal(
            FOLLOWED,
            format!("Following {tag} every {every}: {digest}"),
        )),
        Some(old) if old != digest => {
            let at = crate::runtime::clock::instant(&crate::runtime::clock::api_time(now));
            let stamp = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            v.annotations.insert(MOVED_AT, Some(stamp));
            v.pull_again_before = Some(at);
            let note = format!("{tag} moved from {old} to {digest}; the job's nodes pull it again");
            Some(JobEvent::normal(MOVED, note))
        }
        Some(_) => None,
    };
    if recorded != Some(digest) {
        v.annotations.insert(FOLLOWED_DIGEST, Some(digest.clone()));
    }
    status(v, format!("following {tag} every {every}: {digest}"), None);
    v.events.extend(event);
}

/// When the tag last moved, as the job's annotation says.
fn moved_at(current: &BTreeMap<String, String>) -> Option<DateTime<Utc>> {
    let raw = current.get(MOVED_AT)?;
    DateTime::parse_from_rfc3339(raw)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Whether a lookup last made at `last` is due again for a job following
/// every `interval`, and if not, in how long.
pub fn due(
    last: Option<DateTime<Utc>>,
    interval: Duration,
    now: DateTime<Utc>,
) -> Result<(), Duration> {
    let Some(last) = last else { return Ok(()) };
    let step = TimeDelta::from_std(interval).unwrap_or(TimeDelta::MAX);
    let at = crate::runtime::clock::after(last, step);
    match (at - now).to_std() {
        Ok(wait) if !wait.is_zero() => Err(wait),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
