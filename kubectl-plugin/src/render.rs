//! The table `status` prints: pure text from a [`View`], so the layout is
//! table-tested. Escape codes for redrawing live in the shell (main.rs),
//! never here: the same lines go to a terminal and to a pipe.

use crate::view::{NodeRow, Phase, View};
use k8s_openapi::jiff::Timestamp;

/// Width of the progress bar, in cells.
pub const BAR_WIDTH: usize = 20;

/// How to lay the table out.
#[derive(Clone, Debug, Default)]
pub struct Style {
    /// Block characters for the bar (a terminal); ASCII otherwise.
    pub unicode: bool,
    /// Cut every line to this many characters (a terminal's width).
    pub width: Option<usize>,
    /// At most this many lines (a terminal's height); extra nodes are summarised.
    pub max_lines: Option<usize>,
    /// Show elapsed times as of this instant (a live view); None prints none,
    /// so that plain snapshots differ only when the objects do.
    pub now: Option<Timestamp>,
}

/// A progress bar of `width` cells with the percentage, such as
/// `[#########...........]  45%`, or with blocks `█████████░░░░░░░░░░░  45%`.
pub fn bar(progress: i32, width: usize, unicode: bool) -> String {
    let p = usize::try_from(progress.clamp(0, 100)).unwrap_or(0);
    let full = p * width / 100;
    let (on, off) = if unicode { ('█', '░') } else { ('#', '.') };
    let cells: String = std::iter::repeat_n(on, full)
        .chain(std::iter::repeat_n(off, width - full))
        .collect();
    if unicode {
        format!("{cells} {p:>3}%")
    } else {
        format!("[{cells}] {p:>3}%")
    }
}

/// A duration in the largest sensible units: `42s`, `3m05s`, `2h07m`.
pub fn duration(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// `sha256:` and the first 12 hex digits of the digest in an image ID
/// (`name@sha256:…`), as `docker images` shortens IDs.
pub fn short_id(image_id: &str) -> String {
    let digest = image_id.rsplit_once('@').map_or(image_id, |(_, d)| d);
    match digest.split_once(':') {
        Some((alg, hex)) => format!("{alg}:{}", hex.chars().take(12).collect::<String>()),
        None => digest.chars().take(19).collect(),
    }
}

fn images_line(view: &View) -> String {
    let images = &view.job.images;
    let shown: Vec<&str> = images.iter().take(3).map(String::as_str).collect();
    let mut s = shown.join(", ");
    if images.len() > shown.len() {
        s.push_str(&format!(" and {} more", images.len() - shown.len()));
    }
    s
}

fn header(view: &View, now: Option<Timestamp>) -> Vec<String> {
    let j = &view.job;
    let name = match &j.namespace {
        Some(ns) => format!("{ns}/{}", j.name),
        None => j.name.clone(),
    };
    let mut out = vec![format!("{} {name}: {}", j.kind, images_line(view))];
    let st = &j.status;
    let mut fields: Vec<String> = Vec::new();
    if let Some(state) = &st.state {
        fields.push(state.clone());
        fields.push(format!("event {}", st.event.as_deref().unwrap_or("-")));
        fields.push(format!("action {}", st.action.as_deref().unwrap_or("-")));
    } else if st.desired.is_some() {
        fields.push(
            match (j.finished, st.start_time) {
                (true, _) => "Completed",
                (false, Some(_)) => "Running",
                (false, None) => "Starting",
            }
            .to_string(),
        );
        let counts = [
            ("desired", st.desired),
            ("active", st.active),
            ("completed", st.completed),
            ("succeeded", st.succeeded),
            ("failed", st.failed),
        ];
        fields.extend(
            counts
                .iter()
                .filter_map(|(k, v)| v.map(|v| format!("{k} {v}"))),
        );
    } else {
        fields.push("Starting".to_string());
    }
    if let (Some(start), Some(now)) = (st.start_time, now) {
        let end = st.completion_time.unwrap_or(now);
        let took = end.as_second().saturating_sub(start.as_second());
        fields.push(if j.finished {
            format!("took {}", duration(took))
        } else {
            format!("running for {}", duration(took))
        });
    }
    if let Some(m) = &st.message {
        fields.push(m.clone());
    }
    out.push(fields.join("  "));
    if let Some(p2p) = &j.p2p {
        out.push(format!(
            "P2P: {p2p} (nodes held for their agent or a wave wait in Init / not started)"
        ));
    }
    out
}

fn image_cell(r: &NodeRow) -> String {
    match r.images.len() {
        0 | 1 => r.image_id.as_deref().map(short_id).unwrap_or_default(),
        n => {
            let done = r
                .images
                .iter()
                .filter(|i| i.phase == Phase::Succeeded)
                .count();
            format!("{done}/{n} images")
        }
    }
}

fn footer(view: &View) -> Vec<String> {
    let mut out = Vec::new();
    if view.nodes.is_empty() && view.counts.not_shown == 0 {
        out.push("No node has work from this job yet.".to_string());
    }
    let n = view.counts.not_shown;
    if n > 0 {
        let nodes = if n == 1 { "node" } else { "nodes" };
        out.push(if view.job.finished {
            format!("{n} more {nodes}: their entries have left the NodeImages")
        } else {
            format!("{n} more {nodes}: not started yet")
        });
    }
    out
}

/// Pads `cells` into aligned columns (two spaces apart, the last one unpadded).
fn columns(rows: &[Vec<String>]) -> Vec<String> {
    let cols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                if c + 1 == cols {
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    let pad = widths[c] - cell.chars().count() + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            line.trim_end().to_string()
        })
        .collect()
}

/// Cuts `line` to `width` characters, ending in `…` when cut.
pub fn fit(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_string();
    }
    let mut s: String = line.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// The lines of the status table.
pub fn render(view: &View, style: &Style) -> Vec<String> {
    let mut head = header(view, style.now);
    head.push(String::new());
    // The P2P column only for a job whose nodes the P2P rules started.
    let p2p = view.nodes.iter().any(|r| r.p2p.is_some());
    let mut titles = vec!["NODE", "PHASE", "PROGRESS", "IMAGE ID"];
    if p2p {
        titles.push("P2P");
    }
    titles.push("MESSAGE");
    let mut table = vec![titles.into_iter().map(String::from).collect::<Vec<_>>()];
    for r in &view.nodes {
        let mut cells = vec![
            r.node.clone(),
            r.phase.as_str().to_string(),
            bar(r.progress, BAR_WIDTH, style.unicode),
            image_cell(r),
        ];
        if p2p {
            cells.push(r.p2p.clone().unwrap_or_else(|| "-".into()));
        }
        cells.push(r.message.clone().unwrap_or_default().replace('\n', " "));
        table.push(cells);
    }
    let mut body = columns(&table);
    let foot = footer(view);
    if let Some(max) = style.max_lines {
        let fixed = head.len() + foot.len() + 1;
        if head.len() + body.len() + foot.len() > max && max > fixed + 1 {
            let keep = max - fixed;
            let hidden = body.len() - keep;
            body.truncate(keep);
            body.push(format!(
                "… {hidden} more nodes (a taller terminal shows them)"
            ));
        }
    }
    let mut lines = head;
    lines.extend(body);
    lines.extend(foot);
    match style.width {
        Some(w) => lines.iter().map(|l| fit(l, w)).collect(),
        None => lines,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Kind;
    use crate::view::{Counts, ImageRow, JobStatus, JobSummary};

    #[test]
    fn bars() {
        let cases = [
            (0, false, "[....................]   0%"),
            (45, false, "[#########...........]  45%"),
            (100, false, "[####################] 100%"),
            (-5, false, "[....................]   0%"),
            (250, false, "[####################] 100%"),
            (50, true, "██████████░░░░░░░░░░  50%"),
        ];
        for (p, unicode, want) in cases {
            assert_eq!(bar(p, BAR_WIDTH, unicode), want, "{p}");
        }
    }

    #[test]
    fn durations_and_ids() {
        for (s, want) in [(-1, "0s"), (42, "42s"), (185, "3m05s"), (7620, "2h07m")] {
            assert_eq!(duration(s), want);
        }
        let cases = [
            ("r/a@sha256:0123456789abcdef0123", "sha256:0123456789ab"),
            ("sha256:0123456789abcdef0123", "sha256:0123456789ab"),
            ("r:5000/a@sha512:abc", "sha512:abc"),
        ];
        for (id, want) in cases {
            assert_eq!(short_id(id), want);
        }
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abcd", 4), "abcd");
    }

    fn row(
        node: &str,
        phase: Phase,
        progress: i32,
        id: Option<&str>,
        msg: Option<&str>,
    ) -> NodeRow {
        NodeRow {
            node: node.into(),
            phase,
            progress,
            image_id: id.map(Into::into),
            message: msg.map(Into::into),
            images: vec![ImageRow {
                image: "r/app:v1".into(),
                phase,
                progress,
                image_id: id.map(Into::into),
                message: msg.map(Into::into),
                upgrade_state: None,
                p2p: None,
            }],
            p2p: None,
        }
    }

    fn ipj_view(nodes: Vec<NodeRow>, status: JobStatus, finished: bool, not_shown: usize) -> View {
        View {
            job: JobSummary {
                kind: Kind::ImagePullJob,
                namespace: Some("ns".into()),
                name: "warm".into(),
                uid: "u".into(),
                images: vec!["r/app:v1".into()],
                finished,
                status,
                p2p: None,
            },
            counts: Counts {
                nodes: nodes.len(),
                not_shown,
                ..Counts::default()
            },
            nodes,
        }
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    #[test]
    fn a_p2p_column_only_for_nodes_the_p2p_rules_started() {
        let plain = ipj_view(
            vec![row("n1", Phase::Pulling, 10, None, None)],
            JobStatus::default(),
            false,
            0,
        );
        let lines = render(&plain, &Style::default());
        assert!(!lines.iter().any(|l| l.contains("P2P")), "{lines:?}");
        let mut seeded = row("a-1", Phase::Pulling, 10, None, None);
        seeded.p2p = Some("seed zone=a".into());
        let view = ipj_view(
            vec![seeded, row("a-2", Phase::Waiting, 0, None, None)],
            JobStatus::default(),
            false,
            0,
        );
        let lines = render(&view, &Style::default());
        let at = |node: &str| {
            lines
                .iter()
                .find(|l| l.starts_with(node))
                .cloned()
                .unwrap_or_default()
        };
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("NODE") && l.contains("P2P")),
            "{lines:?}"
        );
        assert!(at("a-1").contains("seed zone=a"), "{lines:?}");
        assert!(at("a-2").ends_with(" -"), "{lines:?}");
    }

    #[test]
    fn p2p_settings_get_a_line_under_the_header() {
        let mut view = ipj_view(vec![], JobStatus::default(), false, 0);
        assert!(
            !render(&view, &Style::default())
                .iter()
                .any(|l| l.starts_with("P2P:"))
        );
        view.job.p2p = Some("seeds=1 agent=daemonset:spegel/spegel".into());
        let lines = render(&view, &Style::default());
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("P2P: seeds=1 agent=daemonset:spegel/spegel")),
            "{lines:?}"
        );
    }

    #[test]
    fn tables() {
        let running = JobStatus {
            desired: Some(3),
            active: Some(1),
            succeeded: Some(1),
            failed: Some(0),
            start_time: Some(ts("2025-01-01T00:00:00Z")),
            message: Some("1/3 nodes done".into()),
            ..JobStatus::default()
        };
        let nodes = vec![
            row(
                "node-1",
                Phase::Succeeded,
                100,
                Some("r/app@sha256:0123456789abcdef"),
                None,
            ),
            row("node-2", Phase::Pulling, 45, None, None),
        ];
        let cases: Vec<(&str, View, Style, Vec<&str>)> = vec![
            (
                "running, plain",
                ipj_view(nodes.clone(), running.clone(), false, 1),
                Style::default(),
                vec![
                    "ImagePullJob ns/warm: r/app:v1",
                    "Running  desired 3  active 1  succeeded 1  failed 0  1/3 nodes done",
                    "",
                    "NODE    PHASE      PROGRESS                     IMAGE ID             MESSAGE",
                    "node-1  Succeeded  [####################] 100%  sha256:0123456789ab",
                    "node-2  Pulling    [#########...........]  45%",
                    "1 more node: not started yet",
                ],
            ),
            (
                "live: elapsed time, cut to the width",
                ipj_view(nodes.clone(), running.clone(), false, 0),
                Style {
                    unicode: true,
                    width: Some(40),
                    max_lines: None,
                    now: Some(ts("2025-01-01T00:01:05Z")),
                },
                vec![
                    "ImagePullJob ns/warm: r/app:v1",
                    "Running  desired 3  active 1  succeeded…",
                    "",
                    "NODE    PHASE      PROGRESS            …",
                    "node-1  Succeeded  ████████████████████…",
                    "node-2  Pulling    █████████░░░░░░░░░░░…",
                ],
            ),
            (
                "too tall: rows summarised",
                ipj_view(
                    (1..=5)
                        .map(|i| row(&format!("n{i}"), Phase::Waiting, 0, None, Some("queued")))
                        .collect(),
                    JobStatus {
                        desired: Some(5),
                        ..JobStatus::default()
                    },
                    false,
                    0,
                ),
                Style {
                    max_lines: Some(8),
                    ..Style::default()
                },
                vec![
                    "ImagePullJob ns/warm: r/app:v1",
                    "Starting  desired 5",
                    "",
                    "NODE  PHASE    PROGRESS                     IMAGE ID  MESSAGE",
                    "n1    Waiting  [....................]   0%            queued",
                    "n2    Waiting  [....................]   0%            queued",
                    "n3    Waiting  [....................]   0%            queued",
                    "… 2 more nodes (a taller terminal shows them)",
                ],
            ),
            (
                "finished, entries gone",
                ipj_view(
                    vec![],
                    JobStatus {
                        desired: Some(2),
                        succeeded: Some(2),
                        start_time: Some(ts("2025-01-01T00:00:00Z")),
                        completion_time: Some(ts("2025-01-01T00:00:42Z")),
                        ..JobStatus::default()
                    },
                    true,
                    2,
                ),
                Style {
                    now: Some(ts("2025-01-01T01:00:00Z")),
                    ..Style::default()
                },
                vec![
                    "ImagePullJob ns/warm: r/app:v1",
                    "Completed  desired 2  succeeded 2  took 42s",
                    "",
                    "NODE  PHASE  PROGRESS  IMAGE ID  MESSAGE",
                    "2 more nodes: their entries have left the NodeImages",
                ],
            ),
        ];
        for (name, view, style, want) in cases {
            assert_eq!(render(&view, &style), want, "{name}");
        }
    }

    #[test]
    fn kubeedge_header_and_several_images() {
        let mut r = row(
            "edge-1",
            Phase::Failed,
            50,
            None,
            Some("check disk failed: 91% used > 80%"),
        );
        r.images.push(ImageRow {
            phase: Phase::Succeeded,
            ..r.images[0].clone()
        });
        let view = View {
            job: JobSummary {
                kind: Kind::ImagePrePullJob,
                namespace: None,
                name: "edge".into(),
                uid: "u".into(),
                images: vec!["a:1".into(), "b:1".into(), "c:1".into(), "d:1".into()],
                finished: true,
                status: JobStatus {
                    state: Some("Failed".into()),
                    event: Some("Pull".into()),
                    action: Some("Failure".into()),
                    message: Some("1 of 1 nodes failed".into()),
                    ..JobStatus::default()
                },
                p2p: None,
            },
            counts: Counts::default(),
            nodes: vec![r],
        };
        assert_eq!(
            render(&view, &Style::default()),
            vec![
                "ImagePrePullJob edge: a:1, b:1, c:1 and 1 more",
                "Failed  event Pull  action Failure  1 of 1 nodes failed",
                "",
                "NODE    PHASE   PROGRESS                     IMAGE ID    MESSAGE",
                "edge-1  Failed  [##########..........]  50%  1/2 images  check disk failed: 91% used > 80%",
            ]
        );
    }
}
