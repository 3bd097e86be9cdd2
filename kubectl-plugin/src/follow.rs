//! Following a job: watches on the job, the NodeImages and (for an
//! ImageListPullJob) the namespace's ImagePullJobs feed local caches; every
//! change recomputes the view and prints it when it differs. On a terminal
//! the table is redrawn in place; elsewhere each snapshot is printed whole.

use crate::Error;
use crate::Output;
use crate::render::{self, Style};
use crate::target::{Kind, Target};
use crate::view::{self, Inputs, Job, View};
use futures::stream::{BoxStream, SelectAll, StreamExt};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use nodeimage_api::kruise::NodeImage;
use nodeimage_api::lenient::Lenient;
use nodeimage_api::{ImageListPullJob, ImagePrePullJob, ImagePullJob, NodeUpgradeJob};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// How to follow.
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    /// Until the job finishes (else one snapshot).
    pub watch: bool,
    /// Table or JSON.
    pub output: Output,
}

/// How following ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The last view was shown.
    Shown {
        /// Whether the job had finished.
        finished: bool,
        /// Whether it reports failed nodes.
        failures: bool,
    },
    /// Interrupted (Ctrl-C).
    Interrupted,
}

/// An object from a watch, or why it does not decode.
type Item<T> = Result<T, String>;
type Events<T> = BoxStream<'static, Result<watcher::Event<(String, Item<T>)>, watcher::Error>>;

/// The objects of one watch, replaced whole at each (re)list.
#[derive(Debug)]
pub struct Cache<T> {
    items: BTreeMap<String, Item<T>>,
    relisting: Option<BTreeMap<String, Item<T>>>,
    synced: bool,
}

impl<T> Default for Cache<T> {
    fn default() -> Self {
        Self {
            items: BTreeMap::new(),
            relisting: None,
            synced: false,
        }
    }
}

impl<T> Cache<T> {
    /// Applies one watch event.
    pub fn apply(&mut self, event: watcher::Event<(String, Item<T>)>) {
        match event {
            watcher::Event::Init => self.relisting = Some(BTreeMap::new()),
            watcher::Event::InitApply((k, v)) => {
                self.relisting.get_or_insert_default().insert(k, v);
            }
            watcher::Event::InitDone => {
                if let Some(items) = self.relisting.take() {
                    self.items = items;
                }
                self.synced = true;
            }
            watcher::Event::Apply((k, v)) => {
                self.items.insert(k, v);
            }
            watcher::Event::Delete((k, _)) => {
                self.items.remove(&k);
            }
        }
    }

    /// The objects that decode.
    fn decoded(&self) -> impl Iterator<Item = &T> {
        self.items.values().filter_map(|v| v.as_ref().ok())
    }
}

/// Watches `api` (restricted by `config`) and turns each object into
/// (name, `wrap`ped object or the reason it does not decode).
fn events<K, T>(api: Api<Lenient<K>>, config: watcher::Config, wrap: fn(K) -> T) -> Events<T>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    T: Send + 'static,
{
    watcher(api, config)
        .default_backoff()
        .map(move |r| {
            r.map(|event| {
                let item = move |l: Lenient<K>| {
                    let name = l.metadata.name.clone().unwrap_or_default();
                    (name, l.object.map(wrap).map_err(|e| e.reason))
                };
                match event {
                    watcher::Event::Apply(o) => watcher::Event::Apply(item(o)),
                    watcher::Event::Delete(o) => watcher::Event::Delete(item(o)),
                    watcher::Event::Init => watcher::Event::Init,
                    watcher::Event::InitApply(o) => watcher::Event::InitApply(item(o)),
                    watcher::Event::InitDone => watcher::Event::InitDone,
                }
            })
        })
        .boxed()
}

fn job_events(client: &Client, target: &Target, namespace: &str) -> Events<Job> {
    let config = watcher::Config::default().fields(&format!("metadata.name={}", target.name));
    match target.kind {
        Kind::ImagePullJob => events(Api::namespaced(client.clone(), namespace), config, |j| {
            Job::Pull(Box::new(j))
        }),
        Kind::ImageListPullJob => events(
            Api::<Lenient<ImageListPullJob>>::namespaced(client.clone(), namespace),
            config,
            |j| Job::List(Box::new(j)),
        ),
        Kind::ImagePrePullJob => events(
            Api::<Lenient<ImagePrePullJob>>::all(client.clone()),
            config,
            |j| Job::PrePull(Box::new(j)),
        ),
        Kind::NodeUpgradeJob => events(
            Api::<Lenient<NodeUpgradeJob>>::all(client.clone()),
            config,
            |j| Job::Upgrade(Box::new(j)),
        ),
    }
}

/// One change from one of the watches.
enum Change {
    Job(Result<watcher::Event<(String, Item<Job>)>, watcher::Error>),
    NodeImage(Result<watcher::Event<(String, Item<Box<NodeImage>>)>, watcher::Error>),
    Child(Result<watcher::Event<(String, Item<Box<ImagePullJob>>)>, watcher::Error>),
}

/// Where the table goes.
enum Screen {
    /// A terminal, redrawn in place; `drawn` lines are on screen.
    Live { drawn: usize },
    /// A terminal, printed once.
    Once,
    /// A pipe or file.
    Plain,
}

/// Hides the cursor while the table is redrawn, and shows it again however
/// following ends.
struct HiddenCursor;

impl HiddenCursor {
    fn new() -> Result<Self, Error> {
        write_all("\x1b[?25l")?;
        Ok(HiddenCursor)
    }
}

impl Drop for HiddenCursor {
    fn drop(&mut self) {
        let _ = write_all("\x1b[?25h");
    }
}

/// Writes `s` to standard output.
pub fn write_all(s: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Prints one line on stdout.
pub fn print_line(s: &str) -> Result<(), Error> {
    write_all(&format!("{s}\n"))
}

fn now() -> Timestamp {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The terminal's (columns, rows), when stdout is one.
fn terminal_size() -> Option<(usize, usize)> {
    let ws = rustix::termios::tcgetwinsize(std::io::stdout()).ok()?;
    (ws.ws_col > 0 && ws.ws_row > 0).then(|| (usize::from(ws.ws_col), usize::from(ws.ws_row)))
}

impl Screen {
    /// Shows `view`, if it differs from what `last` says was shown.
    /// With `watch`, JSON documents are one line each (JSON Lines).
    fn show(
        &mut self,
        view: &View,
        output: Output,
        watch: bool,
        last: &mut String,
    ) -> Result<(), Error> {
        match output {
            Output::Json => {
                let text = if watch {
                    serde_json::to_string(view)?
                } else {
                    serde_json::to_string_pretty(view)?
                };
                if text != *last {
                    print_line(&text)?;
                    *last = text;
                }
            }
            Output::Table => match self {
                Screen::Live { drawn } => {
                    let size = terminal_size();
                    let style = Style {
                        unicode: true,
                        // One column spare: a line that fills the last
                        // column makes some terminals wrap early.
                        width: size.map(|(c, _)| c.saturating_sub(1).max(20)),
                        max_lines: size.map(|(_, r)| r.saturating_sub(1).max(8)),
                        now: Some(now()),
                    };
                    let lines = render::render(view, &style);
                    let text = lines.join("\n");
                    if text == *last {
                        return Ok(());
                    }
                    let mut s = String::new();
                    if *drawn > 0 {
                        // Back to the start of the first line drawn.
                        s.push_str(&format!("\x1b[{drawn}F"));
                    }
                    for l in &lines {
                        s.push_str(l);
                        s.push_str("\x1b[K\n");
                    }
                    s.push_str("\x1b[J");
                    write_all(&s)?;
                    *drawn = lines.len();
                    *last = text;
                }
                Screen::Once => {
                    let style = Style {
                        unicode: true,
                        width: terminal_size().map(|(c, _)| c.saturating_sub(1).max(20)),
                        max_lines: None,
                        now: Some(now()),
                    };
                    print_line(&render::render(view, &style).join("\n"))?;
                }
                Screen::Plain => {
                    let text = render::render(view, &Style::default()).join("\n");
                    if text != *last {
                        if !last.is_empty() {
                            print_line("")?;
                        }
                        print_line(&text)?;
                        *last = text;
                    }
                }
            },
        }
        Ok(())
    }
}

/// Shows `target` once, or with `mode.watch` until it finishes.
pub async fn follow(
    client: Client,
    target: &Target,
    namespace: &str,
    mode: Mode,
) -> Result<Outcome, Error> {
    let mut screen = match (std::io::stdout().is_terminal(), mode.watch) {
        (true, true) => Screen::Live { drawn: 0 },
        (true, false) => Screen::Once,
        (false, _) => Screen::Plain,
    };
    let mut changes = watches(&client, target, namespace);
    let mut caches = Caches::new(target.kind == Kind::ImageListPullJob);
    let mut seen_job = false;
    let mut last = String::new();
    let live_table = matches!(screen, Screen::Live { .. }) && mode.output == Output::Table;
    let _cursor = live_table.then(HiddenCursor::new).transpose()?;
    // A live table's elapsed time moves on without any change.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            change = changes.next() => {
                let Some(change) = change else { break };
                let mut pending = Some(change);
                // Apply everything already waiting before showing anything.
                while let Some(change) = pending.take() {
                    caches.apply(change)?;
                    pending = futures::FutureExt::now_or_never(changes.next()).flatten();
                }
            }
            _ = tick.tick(), if live_table => {}
            _ = &mut ctrl_c => {
                if matches!(screen, Screen::Live { .. }) {
                    let _ = write_all("\n");
                }
                return Ok(Outcome::Interrupted);
            }
        }
        if !caches.synced() {
            continue;
        }
        let v = caches.view(target, namespace, seen_job)?;
        seen_job = true;
        screen.show(&v, mode.output, mode.watch, &mut last)?;
        if !mode.watch || v.job.finished {
            return Ok(Outcome::Shown {
                finished: v.job.finished,
                failures: v.has_failures(),
            });
        }
    }
    Err(Error::Deleted {
        kind: target.kind,
        name: target.name.clone(),
    })
}

/// The watches a view of `target` reads, merged: the job, every NodeImage
/// and, for an ImageListPullJob, the namespace's ImagePullJobs.
fn watches(
    client: &Client,
    target: &Target,
    namespace: &str,
) -> SelectAll<BoxStream<'static, Change>> {
    let mut streams: Vec<BoxStream<'static, Change>> = vec![
        job_events(client, target, namespace)
            .map(Change::Job)
            .boxed(),
        events(
            Api::<Lenient<NodeImage>>::all(client.clone()),
            watcher::Config::default(),
            Box::new,
        )
        .map(Change::NodeImage)
        .boxed(),
    ];
    if target.kind == Kind::ImageListPullJob {
        streams.push(
            events(
                Api::<Lenient<ImagePullJob>>::namespaced(client.clone(), namespace),
                watcher::Config::default(),
                Box::new,
            )
            .map(Change::Child)
            .boxed(),
        );
    }
    futures::stream::select_all(streams)
}

/// What the watches of one view have seen.
struct Caches {
    jobs: Cache<Job>,
    nodeimages: Cache<Box<NodeImage>>,
    children: Cache<Box<ImagePullJob>>,
}

impl Caches {
    /// Empty caches; without `children` watched, that cache counts as synced.
    fn new(children: bool) -> Self {
        let mut caches = Caches {
            jobs: Cache::default(),
            nodeimages: Cache::default(),
            children: Cache::default(),
        };
        caches.children.synced = !children;
        caches
    }

    /// Whether every watch has listed once.
    fn synced(&self) -> bool {
        self.jobs.synced && self.nodeimages.synced && self.children.synced
    }

    /// Applies one change. A watch error before the first list ends
    /// following (a missing CRD, no permission, no such namespace); later
    /// ones are retried by the watcher's backoff.
    fn apply(&mut self, change: Change) -> Result<(), Error> {
        fn step<T>(
            cache: &mut Cache<T>,
            what: &'static str,
            r: Result<watcher::Event<(String, Item<T>)>, watcher::Error>,
        ) -> Result<(), Error> {
            match r {
                Ok(event) => {
                    cache.apply(event);
                    Ok(())
                }
                Err(source) if !cache.synced => Err(Error::Watch { what, source }),
                Err(_) => Ok(()),
            }
        }
        match change {
            Change::Job(r) => step(&mut self.jobs, "the job", r),
            Change::NodeImage(r) => step(&mut self.nodeimages, "NodeImages", r),
            Change::Child(r) => step(&mut self.children, "ImagePullJobs", r),
        }
    }

    /// The view of `target` now, or why there is none: the job is gone
    /// (`seen_job`: it was there before), was never there, or does not decode.
    fn view(&self, target: &Target, namespace: &str, seen_job: bool) -> Result<View, Error> {
        let job = match self.jobs.items.get(&target.name) {
            None if seen_job => {
                return Err(Error::Deleted {
                    kind: target.kind,
                    name: target.name.clone(),
                });
            }
            None => {
                return Err(Error::NotFound {
                    kind: target.kind,
                    namespace: target.kind.namespaced().then(|| namespace.to_string()),
                    name: target.name.clone(),
                });
            }
            Some(Err(reason)) => {
                return Err(Error::Invalid {
                    kind: target.kind,
                    name: target.name.clone(),
                    reason: reason.clone(),
                });
            }
            Some(Ok(job)) => job,
        };
        let nis: Vec<NodeImage> = self.nodeimages.decoded().map(|n| (**n).clone()).collect();
        let kids: Vec<ImagePullJob> = self.children.decoded().map(|j| (**j).clone()).collect();
        Ok(view::view(&Inputs {
            job,
            children: &kids,
            nodeimages: &nis,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_follows_lists_and_changes() {
        use watcher::Event::*;
        let mut c = Cache::<i32>::default();
        let item = |k: &str, v: i32| (k.to_string(), Ok(v));
        // (event, synced after it, items after it)
        type Step<'a> = (
            watcher::Event<(String, Item<i32>)>,
            bool,
            Vec<(&'a str, i32)>,
        );
        let steps: Vec<Step> = vec![
            (Init, false, vec![]),
            (InitApply(item("a", 1)), false, vec![]),
            (InitApply(item("b", 2)), false, vec![]),
            (InitDone, true, vec![("a", 1), ("b", 2)]),
            (Apply(item("a", 3)), true, vec![("a", 3), ("b", 2)]),
            (Delete(item("b", 2)), true, vec![("a", 3)]),
            // A relist replaces everything once done; until then the old view stays.
            (Init, true, vec![("a", 3)]),
            (InitApply(item("c", 4)), true, vec![("a", 3)]),
            (InitDone, true, vec![("c", 4)]),
        ];
        for (i, (event, synced, want)) in steps.into_iter().enumerate() {
            c.apply(event);
            let got: Vec<(&str, i32)> = c
                .items
                .iter()
                .filter_map(|(k, v)| Some((k.as_str(), *v.as_ref().ok()?)))
                .collect();
            assert_eq!((c.synced, got), (synced, want), "step {i}");
        }
        c.apply(Apply(("bad".to_string(), Err("no".to_string()))));
        assert_eq!(
            c.decoded().count(),
            1,
            "an object that does not decode is skipped"
        );
    }
}
