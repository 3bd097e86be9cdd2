//! What the docs list of the chart's alerts, metrics and values is what the
//! chart defines: a doc that names an alert, a metric or a value the chart
//! does not have fails here, and so does a list of the alerts that leaves
//! one out. Plain file reads, no cluster: runs with the unit tests.
//!
//! - Alerts: templates/_alerts.tpl is the source. docs/install.md's table
//!   of alerts is generated from it (regenerate with
//!   `UPDATE_DOCS=1 cargo test -p nodeimage-tests --test docs_chart`);
//!   values.yaml's `prometheusRule.alerts` comment (and so the generated
//!   chart README) names every one; any other alert-shaped name in the
//!   docs must be one of them; a sentence that says which alerts need
//!   kube-state-metrics names only alerts whose expression reads a
//!   kube-state-metrics series (`kube_…`).
//! - Metrics: every `nodeimage_…` metric the docs, values.yaml or the chart
//!   README name, and every one the chart's alerts and dashboard query, is
//!   in docs/metrics.md's tables; the binaries' unit tests hold those tables
//!   to the metrics each binary declares (`metrics_md_lists_what_the_…_declares`)
//!   and the chart's queries to what they export.
//! - Values: every value path the docs name in code (`daemon.port`,
//!   `--set controller.image.digest=…`) and every one values.yaml's
//!   comments name is a key of values.schema.json (which refuses unknown
//!   keys); that values.yaml and the schema agree, and that the chart README
//!   lists each, is tests/tests/chart_readme.rs.
//! - docs/release.md's install block (run by the install test) installs the
//!   chart's version and sets both image repositories the chart requires.
//! - Uninstalling: docs/install.md's marked block (run by the install
//!   test) is README's, and the chart's NOTES.txt carries it.

use nodeimage_tests::{docs, repo_root};
use serde_json::Value;
use std::collections::BTreeSet;

const REGENERATE: &str = "UPDATE_DOCS=1 cargo test -p nodeimage-tests --test docs_chart";

/// The docs a user reads for installing and running nodeimage (the
/// benchmark logs and architecture notes name code, not the chart).
const USER_DOCS: [&str; 9] = [
    "README.md",
    "docs/install.md",
    "docs/metrics.md",
    "docs/api.md",
    "docs/upgrade.md",
    "docs/migration.md",
    "docs/release.md",
    "charts/nodeimage/values.yaml",
    "charts/nodeimage/README.md",
];

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// One alert of templates/_alerts.tpl.
#[derive(Debug)]
struct Alert {
    name: String,
    expr: String,
    r#for: String,
    severity: String,
    summary: String,
}

impl Alert {
    /// Its expression reads kube-state-metrics' series.
    fn needs_kube_state_metrics(&self) -> bool {
        self.expr.contains("kube_")
    }
}

/// The alerts of the chart: top-level `NodeImage…:` keys and their fields.
fn parse_alerts(tpl: &str) -> Vec<Alert> {
    let mut out: Vec<Alert> = Vec::new();
    for line in tpl.lines() {
        if let Some(name) = line.strip_suffix(':').filter(|k| is_alert_name(k)) {
            out.push(Alert {
                name: name.to_string(),
                expr: String::new(),
                r#for: String::new(),
                severity: String::new(),
                summary: String::new(),
            });
            continue;
        }
        let (Some(a), Some((key, value))) = (out.last_mut(), line.trim().split_once(": ")) else {
            continue;
        };
        let value = value.trim().trim_matches('\'').to_string();
        match key {
            "expr" => a.expr = value,
            "for" => a.r#for = value,
            "severity" => a.severity = value,
            "summary" => a.summary = value,
            _ => {}
        }
    }
    out
}

fn chart_alerts() -> Vec<Alert> {
    let alerts = parse_alerts(&read("charts/nodeimage/templates/_alerts.tpl"));
    assert!(alerts.len() >= 5, "alerts read from the chart: {alerts:?}");
    for a in &alerts {
        assert!(
            !a.expr.is_empty() && !a.r#for.is_empty() && !a.severity.is_empty(),
            "alert {} lacks expr, for or severity in _alerts.tpl",
            a.name
        );
    }
    alerts
}

/// `NodeImage` followed by a capitalised word: the chart's alert names
/// (the kind itself, `NodeImage` and `NodeImages`, is not one).
fn is_alert_name(w: &str) -> bool {
    w.strip_prefix("NodeImage").is_some_and(|rest| {
        rest.len() > 1
            && rest.starts_with(|c: char| c.is_ascii_uppercase())
            && rest.chars().all(|c| c.is_ascii_alphanumeric())
    })
}

/// Words of `text`: runs of ASCII letters, digits and `_`.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

fn alert_names_in(text: &str) -> BTreeSet<String> {
    words(text)
        .filter(|w| is_alert_name(w))
        .map(str::to_string)
        .collect()
}

const TABLE_START: &str = "<!-- alerts: generated from charts/nodeimage/templates/_alerts.tpl by tests/tests/docs_chart.rs; do not edit -->";
const TABLE_END: &str = "<!-- end of the generated alerts -->";

/// docs/install.md's table of the chart's alerts.
fn alert_table(alerts: &[Alert]) -> String {
    let mut out = format!(
        "{TABLE_START}\n\n| alert | severity | fires after | needs kube-state-metrics | when |\n|---|---|---|---|---|\n"
    );
    for a in alerts {
        out += &format!(
            "| [`{}`](metrics.md#{}) | {} | {} | {} | {} |\n",
            a.name,
            a.name.to_lowercase(),
            a.severity,
            if a.r#for == "0m" { "at once" } else { &a.r#for },
            if a.needs_kube_state_metrics() {
                "yes"
            } else {
                "no"
            },
            a.summary.replace('|', "\\|")
        );
    }
    out + "\n" + TABLE_END
}

#[test]
fn install_md_lists_the_charts_alerts_as_generated() {
    let path = repo_root().join("docs/install.md");
    let text = read("docs/install.md");
    let (Some(start), Some(end)) = (text.find(TABLE_START), text.find(TABLE_END)) else {
        panic!("docs/install.md has no generated table of alerts ({TABLE_START} … {TABLE_END})");
    };
    let want = alert_table(&chart_alerts());
    let got = &text[start..end + TABLE_END.len()];
    if got != want && std::env::var_os("UPDATE_DOCS").is_some() {
        let updated = format!("{}{want}{}", &text[..start], &text[end + TABLE_END.len()..]);
        std::fs::write(&path, updated).expect("write docs/install.md");
        return;
    }
    assert!(
        got == want,
        "docs/install.md's table of alerts is stale: run {REGENERATE}"
    );
}

/// values.yaml's comment on `prometheusRule.alerts` names every alert.
#[test]
fn values_yaml_names_every_alert() {
    let values = read("charts/nodeimage/values.yaml");
    let comment: String = values
        .lines()
        .skip_while(|l| l.trim() != "prometheusRule:")
        .take_while(|l| !l.trim_start().starts_with("alerts:"))
        .filter(|l| l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let named = alert_names_in(&comment);
    let chart: BTreeSet<String> = chart_alerts().into_iter().map(|a| a.name).collect();
    assert_eq!(
        named, chart,
        "alerts named by values.yaml's prometheusRule.alerts comment vs templates/_alerts.tpl"
    );
}

/// No doc names an alert the chart does not define.
#[test]
fn docs_name_only_the_charts_alerts() {
    let chart: BTreeSet<String> = chart_alerts().into_iter().map(|a| a.name).collect();
    let mut unknown = Vec::new();
    for doc in USER_DOCS {
        for name in alert_names_in(&read(doc)) {
            if !chart.contains(&name) {
                unknown.push(format!("{doc}: {name}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "alerts the chart does not define:\n{}",
        unknown.join("\n")
    );
}

/// The sentences of `text`'s paragraphs (comment markers of values.yaml
/// removed); table rows and HTML comments are not prose.
fn sentences(text: &str) -> Vec<String> {
    let mut paragraphs = vec![String::new()];
    for line in text.lines() {
        let l = line.trim().trim_start_matches('#').trim();
        if l.is_empty() || l.starts_with('|') || l.starts_with("<!--") {
            paragraphs.push(String::new());
        } else {
            let p = paragraphs.last_mut().expect("one");
            p.push(' ');
            p.push_str(l);
        }
    }
    paragraphs
        .iter()
        .flat_map(|p| p.split(". "))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// A sentence that mentions kube-state-metrics names only alerts that need
/// it (`NoLeader` reads the controller's own metric, not kube-state-metrics).
#[test]
fn kube_state_metrics_is_said_only_of_alerts_that_need_it() {
    let alerts = chart_alerts();
    let needing: BTreeSet<&str> = alerts
        .iter()
        .filter(|a| a.needs_kube_state_metrics())
        .map(|a| a.name.as_str())
        .collect();
    assert!(!needing.is_empty(), "no alert reads kube-state-metrics?");
    let mut wrong = Vec::new();
    for doc in USER_DOCS {
        for s in sentences(&read(doc)) {
            if !s.contains("kube-state-metrics") {
                continue;
            }
            for name in alert_names_in(&s) {
                if !needing.contains(name.as_str()) {
                    wrong.push(format!("{doc}: {name} in \"{s}\""));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "said to need kube-state-metrics, but the expression reads none of its series:\n{}",
        wrong.join("\n")
    );
}

/// The metric names of docs/metrics.md's tables (first column).
fn documented_metrics() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in read("docs/metrics.md").lines() {
        let Some(first) = line.strip_prefix('|').and_then(|l| l.split('|').next()) else {
            continue;
        };
        for span in first.split('`').skip(1).step_by(2) {
            if span.starts_with("nodeimage_") || span.starts_with("process_") {
                out.insert(span.to_string());
            }
        }
    }
    out
}

/// `nodeimage_…` words of `text` that name metrics: not a crate's path
/// (`nodeimage_api::…`) or a log filter (`nodeimage_daemon=debug`).
fn metric_names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("nodeimage_") {
        let before = rest[..i].chars().next_back();
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let after = &tail[end..];
        // Not `kubectl-nodeimage_<version>` or `nodeimage_daemon::x`.
        let word_start = !before.is_some_and(|c| c.is_ascii_alphanumeric() || "_-".contains(c));
        let whole = end > "nodeimage_".len() && !tail[..end].ends_with('_');
        if word_start && whole && !after.starts_with("::") && !after.starts_with('=') {
            out.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}

/// A histogram's series (`_bucket`, `_sum`, `_count`) count as its name.
fn is_documented(name: &str, documented: &BTreeSet<String>) -> bool {
    documented.contains(name)
        || ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|s| name.strip_suffix(s))
            .any(|base| documented.contains(base))
}

#[test]
fn docs_and_the_chart_name_only_documented_metrics() {
    let documented = documented_metrics();
    assert!(
        documented.len() >= 20,
        "metrics.md's tables: {documented:?}"
    );
    let mut sources: Vec<(String, String)> =
        USER_DOCS.iter().map(|d| (d.to_string(), read(d))).collect();
    for dir in ["templates", "dashboards"] {
        let path = repo_root().join("charts/nodeimage").join(dir);
        for entry in std::fs::read_dir(&path).expect("read the chart") {
            let p = entry.expect("a chart file").path();
            let text = std::fs::read_to_string(&p).expect("read a chart file");
            sources.push((p.display().to_string(), text));
        }
    }
    let mut unknown = Vec::new();
    for (file, text) in &sources {
        for m in metric_names_in(text) {
            if !is_documented(&m, &documented) {
                unknown.push(format!("{file}: {m}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "metrics named or queried but not in docs/metrics.md's tables:\n{}",
        unknown.join("\n")
    );
}

/// Whether `path` (dotted, `<name>` for any key, `\.` inside a key) is a
/// value the schema accepts.
fn schema_accepts(schema: &Value, path: &str) -> bool {
    let mut node = schema;
    for seg in split_path(path) {
        match node["properties"].get(&seg) {
            Some(next) => node = next,
            // A map (nodeSelector, alerts): any key below it.
            None => return node["additionalProperties"] != Value::Bool(false),
        }
    }
    true
}

/// `a.b\.c.d` → `["a", "b.c", "d"]`.
fn split_path(path: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'.') => {
                out.last_mut().expect("one").push('.');
                chars.next();
            }
            '.' => out.push(String::new()),
            c => out.last_mut().expect("one").push(c),
        }
    }
    out
}

/// Value paths a doc names: code spans outside fenced blocks, `--set`
/// arguments inside them, and for values.yaml the words of its comments;
/// only dotted paths under a top-level key of the schema (`daemon.port`,
/// not `apps.kruise.io` or `metrics.md`).
fn value_paths_in(text: &str, yaml: bool, top: &BTreeSet<String>) -> BTreeSet<String> {
    let mut candidates: Vec<String> = Vec::new();
    if yaml {
        for line in text.lines().filter(|l| l.trim_start().starts_with('#')) {
            candidates.extend(line.split_whitespace().map(str::to_string));
        }
    } else {
        let mut fenced = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if fenced {
                let mut ws = line.split_whitespace();
                while let Some(w) = ws.next() {
                    if matches!(w, "--set" | "--set-string" | "--set-json")
                        && let Some(arg) = ws.next()
                    {
                        candidates.extend(arg.split(',').map(str::to_string));
                    }
                }
            } else {
                candidates.extend(line.split('`').skip(1).step_by(2).map(str::to_string));
            }
        }
    }
    candidates
        .iter()
        .map(|c| {
            let c = c.split(['=', ' ']).next().unwrap_or_default();
            c.trim_matches(|c: char| "\"'(),;:.".contains(c))
                .to_string()
        })
        .filter(|c| {
            let first = c.split('.').next().unwrap_or_default();
            c.contains('.')
                && top.contains(first)
                && c.chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || "._-<>\\/".contains(ch))
                && ![".md", ".yaml", ".json", ".tpl", ".rs", ".sh"]
                    .iter()
                    .any(|ext| c.ends_with(ext))
        })
        .collect()
}

#[test]
fn docs_name_only_values_the_chart_has() {
    let schema: Value = serde_json::from_str(&read("charts/nodeimage/values.schema.json"))
        .expect("values.schema.json is JSON");
    let top: BTreeSet<String> = schema["properties"]
        .as_object()
        .expect("the schema's properties")
        .keys()
        .cloned()
        .collect();
    let mut unknown = Vec::new();
    let mut seen = 0;
    for doc in USER_DOCS {
        for path in value_paths_in(&read(doc), doc.ends_with(".yaml"), &top) {
            seen += 1;
            if !schema_accepts(&schema, &path) {
                unknown.push(format!("{doc}: {path}"));
            }
        }
    }
    assert!(seen >= 30, "only {seen} value paths found in the docs");
    assert!(
        unknown.is_empty(),
        "values the chart does not have (charts/nodeimage/values.schema.json):\n{}",
        unknown.join("\n")
    );
}

/// docs/release.md's block that the install test runs: the chart's
/// version, both image repositories (the chart requires them), the CRDs
/// applied before the release is installed or upgraded.
#[test]
fn release_install_block_matches_the_chart() {
    let block = docs::marked_block(&read("docs/release.md"), "release-install")
        .unwrap_or_else(|e| panic!("docs/release.md: {e}"));
    let chart = read("charts/nodeimage/Chart.yaml");
    let version = chart
        .lines()
        .find_map(|l| l.strip_prefix("version:"))
        .map(str::trim)
        .expect("Chart.yaml has a version");
    assert_eq!(
        block.var("VERSION"),
        Some(version),
        "docs/release.md's install block installs another version than Chart.yaml's"
    );
    let body = &block.body;
    for needle in [
        "--set controller.image.repository=",
        "--set daemon.image.repository=",
        "--version $VERSION",
    ] {
        assert!(
            body.contains(needle),
            "docs/release.md's install block lacks {needle}:\n{body}"
        );
    }
    let crds = body.find("helm show crds").expect("a CRD step");
    let install = body
        .find("helm upgrade --install")
        .expect("helm upgrade --install");
    assert!(
        crds < install,
        "the CRDs must be applied before the chart:\n{body}"
    );
}

/// The chart's NOTES.txt as the template source of `line`: the doc's
/// release namespace, name, daemon port and taint key are the values the
/// NOTES fill in from the release and the chart's values.
fn notes_template_of(line: &str) -> String {
    line.replace(
        "NS=nodeimage-system RELEASE=nodeimage",
        "NS={{ .Release.Namespace }} RELEASE={{ .Release.Name }}",
    )
    .replace(":10226/", ":{{ .Values.daemon.port }}/")
    .replace(
        "nodeimage.dev/images-pending-",
        "{{ .Values.startupGate.taintKey }}-",
    )
}

/// README, docs/install.md and the chart's NOTES give one uninstall
/// procedure: docs/install.md's marked block (run by the install test),
/// copied unchanged into README and, indented, into NOTES.txt with the
/// release's and the values' own names.
#[test]
fn uninstall_is_one_procedure_in_readme_install_md_and_notes() {
    let install = docs::marked_block(&read("docs/install.md"), "uninstall")
        .unwrap_or_else(|e| panic!("docs/install.md: {e}"));
    let readme = docs::marked_block(&read("README.md"), "uninstall")
        .unwrap_or_else(|e| panic!("README.md: {e}"));
    assert_eq!(
        readme, install,
        "README's uninstall block differs from docs/install.md's"
    );
    for (name, value) in [("NS", "nodeimage-system"), ("RELEASE", "nodeimage")] {
        assert_eq!(install.var(name), Some(value), "the block's {name}");
    }
    let body = &install.body;
    for step in [
        "kubectl delete imagepulljobs,imagelistpulljobs -A --all",
        "--set daemon.pinning.enabled=false --wait",
        "nodeimage_daemon_pinned_images 0",
        "helm uninstall $RELEASE",
        "nodeimage.dev/images-pending-",
    ] {
        assert!(
            body.contains(step),
            "the uninstall block lacks {step:?}:\n{body}"
        );
    }
    let order: Vec<usize> = [
        "kubectl delete",
        "daemon.pinning.enabled=false",
        "helm uninstall",
    ]
    .iter()
    .map(|s| body.find(s).expect("each step"))
    .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "jobs, then pins, then the release:\n{body}"
    );
    let md = read("docs/install.md");
    let first = md
        .lines()
        .find(|l| l.starts_with("NS=nodeimage-system RELEASE="))
        .expect("the block's first line");
    let notes = read("charts/nodeimage/templates/NOTES.txt");
    let want: String = std::iter::once(first)
        .chain(body.lines())
        .map(|l| format!("  {}\n", notes_template_of(l)))
        .collect();
    assert!(
        notes.contains(&want),
        "charts/nodeimage/templates/NOTES.txt must carry docs/install.md's uninstall block \
         (indented by two spaces, the release's and values' names filled in):\n{want}"
    );
}

/// The scanners on small inputs, so that a scanner that finds nothing
/// cannot make the checks above pass.
#[test]
fn the_scanners_find_what_they_look_for() {
    assert_eq!(
        alert_names_in("NodeImage, NodeImages, `NodeImageDaemonDown`; NodeImageX9 fires"),
        BTreeSet::from(["NodeImageDaemonDown".to_string(), "NodeImageX9".to_string()])
    );
    assert_eq!(
        metric_names_in(
            "rate(nodeimage_daemon_pulls_total[5m]) `nodeimage_api::x` info,nodeimage_daemon=debug xnodeimage_y kubectl-nodeimage_<v>"
        ),
        BTreeSet::from(["nodeimage_daemon_pulls_total".to_string()])
    );
    let top = BTreeSet::from(["daemon".to_string(), "metrics".to_string()]);
    let md = "Set `daemon.port` and `daemon.x.y=1`, see `metrics.md`, `apps.kruise.io`.\n\
              ```sh\nhelm install x --set daemon.a=1,daemon.b\\.c/d=2 --set other.z=1\n```\n";
    assert_eq!(
        value_paths_in(md, false, &top),
        BTreeSet::from([
            "daemon.port".to_string(),
            "daemon.x.y".to_string(),
            "daemon.a".to_string(),
            "daemon.b\\.c/d".to_string(),
        ])
    );
    assert_eq!(
        value_paths_in(
            "# -- see daemon.port, and (metrics.path).\nx: 1 # daemon.no\n",
            true,
            &top
        ),
        BTreeSet::from(["daemon.port".to_string(), "metrics.path".to_string()])
    );
    let schema: Value = serde_json::json!({"properties": {"daemon": {
        "additionalProperties": false,
        "properties": {"port": {}, "sel": {"additionalProperties": {"type": "string"}}}}}});
    assert!(schema_accepts(&schema, "daemon.port"));
    assert!(schema_accepts(
        &schema,
        "daemon.sel.kubernetes\\.io/hostname"
    ));
    assert!(!schema_accepts(&schema, "daemon.porr"));
    let tpl = "NodeImageKsm:\n  expr: 'kube_x > 0'\n  for: 5m\n  severity: warning\n  summary: S\nNodeImageUp:\n  expr: 'up == 0'\n";
    let a = parse_alerts(tpl);
    assert_eq!(a.len(), 2);
    assert!(a[0].needs_kube_state_metrics() && !a[1].needs_kube_state_metrics());
    assert_eq!((a[0].r#for.as_str(), a[0].summary.as_str()), ("5m", "S"));
}
