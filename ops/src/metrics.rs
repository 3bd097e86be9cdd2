//! Prometheus metrics both binaries export: build info and the process's
//! memory, CPU and open files (read from /proc), plus rendering of a registry
//! in the text exposition format.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use std::collections::BTreeSet;

/// A registry with `nodeimage_build_info` and the process metrics.
pub fn registry(component: &'static str) -> Registry {
    let mut r = Registry::default();
    r.register(
        "nodeimage_build",
        "Build of this binary: version and component",
        Info::new(vec![
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            ("component", component.to_string()),
        ]),
    );
    r.register_collector(Box::new(ProcessCollector));
    crate::apimetrics::global().register(&mut r);
    r
}

/// Renders a registry in the Prometheus/OpenMetrics text format.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        tracing::warn!(error = %e, "cannot encode metrics");
    }
    out
}

/// Content type of the OpenMetrics exposition.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the classic Prometheus text exposition.
pub const TEXT_004: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a scraper's `Accept` header asks for OpenMetrics: it must name
/// `application/openmetrics-text` with a quality above that of any plain
/// text or wildcard it also accepts. Anything else (no header, `*/*`,
/// `text/plain`) gets the classic text format, which every Prometheus and
/// `promtool check metrics` read.
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    let Some(accept) = accept else {
        return false;
    };
    let (mut om, mut text) = (0.0f32, 0.0f32);
    for part in accept.split(',') {
        let mut fields = part.split(';').map(str::trim);
        let media = fields.next().unwrap_or_default().to_ascii_lowercase();
        let q = fields
            .find_map(|f| f.strip_prefix("q="))
            .and_then(|q| q.parse::<f32>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => om = om.max(q),
            "text/plain" | "*/*" | "text/*" => text = text.max(q),
            _ => {}
        }
    }
    om > 0.0 && om > text
}

/// The classic text format (0.0.4) of an OpenMetrics exposition: counter
/// families named with their `_total` samples, `info` as a gauge named
/// `<name>_info`, and no `# UNIT`, `# EOF` or exemplars.
pub fn to_text_004(openmetrics: &str) -> String {
    // Family name → (name in text format, type in text format).
    let mut families: std::collections::HashMap<&str, (String, &str)> = Default::default();
    for rest in openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
    {
        let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
        let renamed = match kind {
            "counter" if !name.ends_with("_total") => (format!("{name}_total"), "counter"),
            "info" => (format!("{name}_info"), "gauge"),
            "gaugehistogram" => (name.to_string(), "histogram"),
            "stateset" => (name.to_string(), "gauge"),
            "counter" | "gauge" | "histogram" | "summary" => (name.to_string(), kind),
            _ => (name.to_string(), "untyped"),
        };
        families.insert(name, renamed);
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let meta = line
            .strip_prefix("# TYPE ")
            .map(|r| ("TYPE", r))
            .or_else(|| line.strip_prefix("# HELP ").map(|r| ("HELP", r)));
        match meta {
            Some((what, rest)) => {
                let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
                match (what, families.get(name)) {
                    ("TYPE", Some((n, kind))) => out.push_str(&format!("# TYPE {n} {kind}")),
                    (_, Some((n, _))) => out.push_str(&format!("# HELP {n} {text}")),
                    _ => out.push_str(line),
                }
            }
            // A sample (an exemplar after ` # ` is dropped) or a comment.
            None => out.push_str(line.split(" # ").next().unwrap_or(line)),
        }
        out.push('\n');
    }
    out
}

/// The metrics an exposition declares (its `# TYPE` lines), named as they
/// are queried: a counter with `_total`, an info metric with `_info`.
/// Unlike [`exported_names`], a labelled family with no series yet counts.
pub fn declared_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| match kind.trim() {
            "counter" if !name.ends_with("_total") => format!("{name}_total"),
            "info" => format!("{name}_info"),
            _ => name.to_string(),
        })
        .collect()
}

/// The metric names a Markdown document lists under the heading
/// `## {section}`: the code spans of its tables' first column, so tests can
/// hold docs/metrics.md to what a binary declares.
pub fn documented_names(markdown: &str, section: &str) -> BTreeSet<String> {
    let heading = format!("## {section}");
    markdown
        .lines()
        .skip_while(|l| l.trim() != heading)
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| l.strip_prefix('|')?.split('|').next())
        .flat_map(|cell| cell.split('`').skip(1).step_by(2))
        .filter(|name| name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(str::to_string)
        .collect()
}

/// Metric names (`nodeimage_*`, `process_*`) that a dashboard or alert
/// file queries, so tests can check the binaries export them.
pub fn queried_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if starts_word && (text[i..].starts_with("nodeimage_") || text[i..].starts_with("process_"))
        {
            let end = text[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(text.len(), |e| i + e);
            out.insert(text[i..end].to_string());
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// Names of the samples in a text exposition (`name{labels} value`).
pub fn exported_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// Process metrics with the standard names (`process_*`), read at scrape time.
#[derive(Debug)]
struct ProcessCollector;

/// What /proc says about this process.
#[derive(Debug, Default, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident memory, in bytes.
    pub resident_bytes: u64,
    /// Virtual memory, in bytes.
    pub virtual_bytes: u64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// Start time, in seconds since the epoch.
    pub start_time_seconds: f64,
}

/// Reads `/proc/self` (Linux); None elsewhere or on error.
pub fn process_stats() -> Option<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let page = rustix::param::page_size() as u64;
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())?;
    let mut s = parse_stat(&stat, ticks, page, boot)?;
    s.open_fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    Some(s)
}

/// Parses /proc/self/stat: fields after the command name in parentheses.
pub fn parse_stat(stat: &str, ticks: f64, page: u64, boot_time: f64) -> Option<ProcessStats> {
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state); utime=14, stime=15, starttime=22, vsize=23, rss=24.
    let num = |i: usize| f.get(i - 3)?.parse::<u64>().ok();
    Some(ProcessStats {
        cpu_seconds: (num(14)? + num(15)?) as f64 / ticks,
        start_time_seconds: boot_time + num(22)? as f64 / ticks,
        virtual_bytes: num(23)?,
        resident_bytes: num(24)? * page,
        open_fds: 0,
    })
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = process_stats() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        for (name, help, v) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                s.resident_bytes as f64,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                s.virtual_bytes as f64,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                s.open_fds as f64,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the epoch in seconds",
                s.start_time_seconds,
            ),
        ] {
            let g = ConstGauge::new(v);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dashboard serves several clusters from one Prometheus: every
    /// panel query filters on the `cluster` variable.
    #[test]
    fn every_dashboard_query_filters_on_the_cluster() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../charts/nodeimage/dashboards/nodeimage.json");
        let text = std::fs::read_to_string(&path).expect("read the dashboard");
        let queries: Vec<&str> = text.lines().filter(|l| l.contains("\"expr\":")).collect();
        assert!(queries.len() >= 10, "only {} queries found", queries.len());
        for q in queries {
            assert!(
                q.contains(r#"cluster=~\"$cluster\""#),
                "no cluster filter: {q}"
            );
        }
        assert!(text.contains(r#""name": "cluster""#), "no cluster variable");
    }

    #[test]
    fn negotiates_the_format_from_accept() {
        let cases = [
            (None, false),
            (Some("*/*"), false),
            (Some("text/plain;version=0.0.4"), false),
            (Some("application/openmetrics-text; version=1.0.0"), true),
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                true,
            ),
            (
                Some("text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5"),
                false,
            ),
            (Some("application/openmetrics-text;q=0"), false),
            (Some("application/json"), false),
        ];
        for (accept, want) in cases {
            assert_eq!(wants_openmetrics(accept), want, "{accept:?}");
        }
    }

    #[test]
    fn text_004_renames_counters_and_info_and_drops_openmetrics_lines() {
        let om = "# HELP nodeimage_build Build.\n# TYPE nodeimage_build info\nnodeimage_build_info{v=\"1\"} 1\n\
# HELP pulls Finished pulls.\n# TYPE pulls counter\n# UNIT pulls pulls\npulls_total{result=\"ok\"} 3 # {trace=\"x\"} 1.0\n\
# HELP up Up.\n# TYPE up gauge\nup 1\n# EOF\n";
        let want = "# HELP nodeimage_build_info Build.\n# TYPE nodeimage_build_info gauge\nnodeimage_build_info{v=\"1\"} 1\n\
# HELP pulls_total Finished pulls.\n# TYPE pulls_total counter\npulls_total{result=\"ok\"} 3\n\
# HELP up Up.\n# TYPE up gauge\nup 1\n";
        assert_eq!(to_text_004(om), want);
    }

    #[test]
    fn parses_proc_stat_even_with_spaces_in_the_name() {
        let stat = "123 (node daemon) S 1 123 123 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 1000 52428800 2048 18446744073709551615";
        let s = parse_stat(stat, 100.0, 4096, 1_700_000_000.0).expect("parses");
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.start_time_seconds, 1_700_000_010.0);
        assert_eq!(s.virtual_bytes, 52_428_800);
        assert_eq!(s.resident_bytes, 2048 * 4096);
        assert!(parse_stat("garbage", 100.0, 4096, 0.0).is_none());
    }

    #[test]
    fn finds_queried_and_exported_names() {
        let q = queried_names(
            r#"sum by (le) (rate(nodeimage_daemon_pull_duration_seconds_bucket[5m])) / x_nodeimage_fake + process_open_fds"#,
        );
        assert_eq!(
            q.into_iter().collect::<Vec<_>>(),
            vec![
                "nodeimage_daemon_pull_duration_seconds_bucket",
                "process_open_fds"
            ]
        );
        let e = exported_names("# HELP a b\na_total{x=\"1\"} 2\nb 3\n");
        assert_eq!(e.into_iter().collect::<Vec<_>>(), vec!["a_total", "b"]);
    }

    #[test]
    fn declared_and_documented_names() {
        let d = declared_names(
            "# HELP a_x A.\n# TYPE a_x counter\n# TYPE a_y gauge\n# TYPE a_b info\na_b_info{v=\"1\"} 1\n# TYPE a_h histogram\n",
        );
        assert_eq!(
            d.into_iter().collect::<Vec<_>>(),
            vec!["a_b_info", "a_h", "a_x_total", "a_y"]
        );
        let md = "## One\n\n| metric | type |\n|---|---|\n| `a_x_total` | counter |\n| `a_y`, `a_z` | gauge `x` |\n\n## Two\n\n| `b` | x |\n";
        assert_eq!(
            documented_names(md, "One").into_iter().collect::<Vec<_>>(),
            vec!["a_x_total", "a_y", "a_z"]
        );
        assert!(documented_names(md, "Three").is_empty());
    }

    #[test]
    fn renders_build_info_and_process_metrics() {
        let text = render(&registry("test"));
        assert!(text.contains("nodeimage_build_info{version=\""), "{text}");
        assert!(text.contains("component=\"test\""), "{text}");
        assert!(text.contains("process_resident_memory_bytes"), "{text}");
        assert!(text.contains("process_cpu_seconds_total"), "{text}");
    }
}
