//! charts/nodeimage/README.md is generated from the chart itself: Chart.yaml,
//! the `# --` comments and defaults of values.yaml, the types and bounds of
//! values.schema.json, the kinds the templates create, and the install
//! command of docs/install.md. A value added without a description, or a
//! values.yaml key the schema does not know, fails here rather than reaching
//! users. Plain file reads, no cluster: runs with the unit tests.
//! Regenerate with `UPDATE_DOCS=1 cargo test -p nodeimage-tests --test chart_readme`.
//!
//! values.yaml is read line by line (this crate has no YAML parser, and the
//! comments are needed anyway): block mappings and lists, scalars kept as
//! written. Anything else fails the test with the line.

use nodeimage_tests::repo_root;
use serde_json::Value;
use std::collections::BTreeSet;

const REGENERATE: &str = "UPDATE_DOCS=1 cargo test -p nodeimage-tests --test chart_readme";
const CHART: &str = "charts/nodeimage";

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// One value of values.yaml: a key with a `# --` comment (its value, however
/// nested, is documented as a whole), or a scalar without one.
struct Entry {
    path: String,
    /// The `# --` comment, one string per line, `# ` removed.
    comment: Option<Vec<String>>,
    /// The default as written: a scalar, or a block in flow style.
    default: String,
    /// Lines (indent, text) of a block value.
    block: Vec<(usize, String)>,
}

fn parse_values(text: &str) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    // Open mappings without a comment of their own (`controller:`), by indent.
    let mut parents: Vec<(usize, String)> = Vec::new();
    let mut comment: Option<Vec<String>> = None;
    // The documented entry whose block is being read, and its key's indent.
    let mut block: Option<(usize, usize)> = None;
    for (n, raw) in text.lines().enumerate() {
        let indent = raw.len() - raw.trim_start().len();
        let t = raw.trim();
        let inside = block.is_some_and(|(owner, _)| indent > owner);
        if t.is_empty() {
            comment = None;
            continue;
        }
        if let Some(c) = t.strip_prefix('#') {
            if inside {
                continue;
            }
            // `# -- ` starts a description (as helm-docs reads it); a wrapped
            // line may begin with a flag such as `# --secrets-namespace`.
            if let Some(first) = c.strip_prefix(" -- ").or((c == " --").then_some("")) {
                comment = Some(vec![first.trim().to_string()]);
            } else if let Some(lines) = comment.as_mut() {
                lines.push(c.strip_prefix(' ').unwrap_or(c).to_string());
            }
            continue;
        }
        if let (true, Some((_, i))) = (inside, block) {
            entries[i].block.push((indent, t.to_string()));
            continue;
        }
        block = None;
        let Some((key, rest)) = t.split_once(':').filter(|(k, _)| is_key(k)) else {
            panic!(
                "values.yaml line {}: `{t}` is not a `key: value` line outside a documented block",
                n + 1
            );
        };
        while parents.last().is_some_and(|(i, _)| *i >= indent) {
            parents.pop();
        }
        let path: Vec<&str> = parents
            .iter()
            .map(|(_, k)| k.as_str())
            .chain([key])
            .collect();
        let path = path.join(".");
        let rest = rest.trim();
        let doc = comment.take();
        if rest.is_empty() && doc.is_none() {
            parents.push((indent, key.to_string()));
            continue;
        }
        if rest.is_empty() {
            block = Some((indent, entries.len()));
        }
        entries.push(Entry {
            path,
            comment: doc,
            default: rest.to_string(),
            block: Vec::new(),
        });
    }
    for e in &mut entries {
        if !e.block.is_empty() {
            e.default = flow(&e.block);
        }
    }
    entries
}

fn is_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A YAML block (lines with their indentation) written in flow style on one
/// line, so that a default fits a table cell: `{requests: {cpu: 50m}}`.
fn flow(lines: &[(usize, String)]) -> String {
    let Some((base, first)) = lines.first() else {
        return String::new();
    };
    let list = first.starts_with('-');
    let mut parts = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let head = &lines[i].1;
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].0 <= *base)
            .unwrap_or(lines.len());
        let children = &lines[i + 1..end];
        parts.push(if list {
            let item = head.trim_start_matches('-').trim_start();
            if children.is_empty() && !item.contains(": ") && !item.ends_with(':') {
                item.to_string()
            } else {
                // A mapping item: its first key sits two columns right of the dash.
                let mut map = vec![(base + 2, item.to_string())];
                map.extend(children.iter().cloned());
                flow(&map)
            }
        } else {
            match head.split_once(':') {
                Some((k, v)) if v.trim().is_empty() => format!("{k}: {}", flow(children)),
                _ => head.to_string(),
            }
        });
        i = end;
    }
    let parts = parts.join(", ");
    if list {
        format!("[{parts}]")
    } else {
        format!("{{{parts}}}")
    }
}

/// A `# --` comment on one line; an indented part (an example) in flow style
/// as code.
fn describe(lines: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut example: Vec<(usize, String)> = Vec::new();
    for line in lines.iter().chain([&String::new()]) {
        if line.starts_with(' ') {
            let trimmed = line.trim_start();
            example.push((line.len() - trimmed.len(), trimmed.to_string()));
            continue;
        }
        if !example.is_empty() {
            out.push(format!("`{}`", flow(&example)));
            example.clear();
        }
        if !line.is_empty() {
            out.push(line.clone());
        }
    }
    out.join(" ")
}

/// The schema of a value, by its dotted path.
fn schema_at<'a>(schema: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(schema, |s, k| s.get("properties")?.get(k))
}

fn type_of(s: &Value) -> String {
    if let Some(alts) = s["anyOf"].as_array() {
        return alts.iter().map(type_of).collect::<Vec<_>>().join(" or ");
    }
    match s["type"].as_str() {
        Some("array") => match s["items"]["type"].as_str() {
            Some(t) => format!("list of {t}"),
            None => "list".into(),
        },
        Some("object") => match s["additionalProperties"]["type"].as_str() {
            Some(t) => format!("map of {t}"),
            None => "object".into(),
        },
        Some(t) => t.into(),
        None if s["enum"]
            .as_array()
            .is_some_and(|e| e.iter().all(Value::is_string)) =>
        {
            "string".into()
        }
        None => "any".into(),
    }
}

/// What the schema allows beyond the type: ranges, lengths, enums,
/// patterns, and the keys of an object value.
fn allowed(s: &Value) -> String {
    if let Some(alts) = s["anyOf"].as_array() {
        let alts: Vec<String> = alts
            .iter()
            .map(|a| format!("{} {}", type_of(a), allowed(a)).trim().to_string())
            .collect();
        return alts.join(" or ");
    }
    let mut out = Vec::new();
    let low = s
        .get("minimum")
        .map(|v| ("≥", v))
        .or(s.get("exclusiveMinimum").map(|v| (">", v)));
    let high = s
        .get("maximum")
        .map(|v| ("≤", v))
        .or(s.get("exclusiveMaximum").map(|v| ("<", v)));
    match (low, high) {
        (Some(("≥", a)), Some(("≤", b))) => out.push(format!("{a}–{b}")),
        _ => out.extend(
            [low, high]
                .into_iter()
                .flatten()
                .map(|(op, v)| format!("{op} {v}")),
        ),
    }
    if let Some(v) = s.get("minLength") {
        out.push(format!("length ≥ {v}"));
    }
    if let Some(v) = s.get("maxLength") {
        out.push(format!("length ≤ {v}"));
    }
    if let Some(e) = s["enum"].as_array() {
        let e: Vec<String> = e
            .iter()
            .map(|v| format!("`{}`", v.as_str().unwrap_or_default()))
            .collect();
        out.push(format!("one of {}", e.join(", ")));
    }
    if let Some(p) = s["pattern"].as_str() {
        out.push(format!("pattern `{p}`"));
    }
    let items = s.get("items").map(allowed).unwrap_or_default();
    if !items.is_empty() {
        out.push(format!("items: {items}"));
    }
    if let Some(props) = s["properties"].as_object() {
        let required: Vec<&str> = s["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let keys: Vec<String> = props
            .iter()
            .map(|(k, v)| {
                let req = if required.contains(&k.as_str()) {
                    ", required"
                } else {
                    ""
                };
                let more = allowed(v);
                let more = if more.is_empty() {
                    more
                } else {
                    format!(" {more}")
                };
                format!("`{k}` ({}{more}{req})", type_of(v))
            })
            .collect();
        out.push(format!("keys: {}", keys.join(", ")));
    }
    out.join("; ")
}

/// A table cell: `|` escaped everywhere (GitHub's tables split on it even
/// inside code), `<` and `>` outside code spans, so that `<release>` is shown
/// rather than taken for an HTML tag.
fn cell(s: &str) -> String {
    let s = s.replace('|', "\\|");
    s.split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                part.to_string()
            } else {
                part.replace('<', "&lt;").replace('>', "&gt;")
            }
        })
        .collect::<Vec<_>>()
        .join("`")
}

/// A schema description as a sentence, for values without a `# --` comment.
fn sentence(s: &str) -> String {
    let mut c = s.chars();
    let mut out: String = c
        .next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default();
    if !out.is_empty() && !out.ends_with('.') {
        out.push('.');
    }
    out
}

/// Every property path of the schema.
fn schema_paths(s: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Some(props) = s["properties"].as_object() {
        for (k, v) in props {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            out.push(path.clone());
            schema_paths(v, &path, out);
        }
    }
}

/// A `key: value` line at the top of Chart.yaml; a folded `>-` value joined.
fn chart_field(chart: &str, key: &str) -> String {
    let mut lines = chart
        .lines()
        .skip_while(|l| !l.starts_with(&format!("{key}:")));
    let Some(first) = lines.next() else {
        panic!("Chart.yaml has no {key}");
    };
    let value = first[key.len() + 1..].trim();
    if value.starts_with('>') || value.starts_with('|') {
        let folded: Vec<&str> = lines
            .take_while(|l| l.starts_with(' '))
            .map(str::trim)
            .collect();
        return folded.join(" ");
    }
    value.trim_matches('"').to_string()
}

/// The `helm install` block of docs/install.md's "Installing with Helm".
fn install_command(install: &str) -> String {
    let section = install
        .split("\n## Installing with Helm")
        .nth(1)
        .expect("docs/install.md has a section \"## Installing with Helm\"");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a ```sh block in docs/install.md's \"Installing with Helm\"");
    assert!(
        block.contains("helm install"),
        "the first sh block of \"Installing with Helm\" has no helm install:\n{block}"
    );
    block.to_string()
}

fn render() -> String {
    let chart = read(&format!("{CHART}/Chart.yaml"));
    let values = parse_values(&read(&format!("{CHART}/values.yaml")));
    let schema: Value = serde_json::from_str(&read(&format!("{CHART}/values.schema.json")))
        .expect("values.schema.json is JSON");

    let mut kinds = BTreeSet::new();
    let dir = repo_root().join(CHART).join("templates");
    for entry in std::fs::read_dir(&dir).expect("read the chart's templates") {
        let text = std::fs::read_to_string(entry.expect("templates entry").path())
            .expect("read a template");
        kinds.extend(
            text.lines()
                .filter_map(|l| l.strip_prefix("kind: "))
                .map(|k| k.trim().to_string()),
        );
    }

    let mut out = format!(
        "<!-- Generated from Chart.yaml, values.yaml, values.schema.json and templates/ (and the install\n     command of docs/install.md) by tests/tests/chart_readme.rs; do not edit.\n     Regenerate: {REGENERATE} -->\n\n"
    );
    out += &format!(
        "# {} Helm chart\n\n{}\n\n",
        chart_field(&chart, "name"),
        chart_field(&chart, "description")
    );
    // Not the chart's version: release/set-version.sh bumps it, and a copy
    // here would make every release regenerate this file.
    out += &format!(
        "It needs Kubernetes `{}`. The image tags default to the chart's `appVersion` \
         (`helm show chart charts/nodeimage`).\n\n",
        chart_field(&chart, "kubeVersion"),
    );
    out += "It installs the CRDs of the five kinds (`crds/`), nodeimage-controller (a Deployment), \
            nodeimage-daemon (a DaemonSet on every node), their RBAC and, when enabled, \
            Prometheus Operator objects and a Grafana dashboard. Kinds its templates create \
            (some only when enabled): ";
    out += &kinds
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    out += ".\n\n## Installing\n\nNo nodeimage images are published yet: build and push them first \
            ([Building the images](../../docs/install.md#building-the-images)). Then, from the \
            repository root:\n\n```sh\n";
    out += &install_command(&read("docs/install.md"));
    out += "```\n\nUpgrades, high availability, credential providers, monitoring and removal: \
            [docs/install.md](../../docs/install.md). The API the chart serves, field by field: \
            [docs/reference/README.md](../../docs/reference/README.md).\n\n## Values\n\n\
            `values.schema.json` checks every value's type and the bounds listed here, and \
            refuses keys it does not know. Defaults of nested values are written in YAML's \
            flow style.\n\n| key | type | default | allowed | description |\n|---|---|---|---|---|\n";

    let mut problems = Vec::new();
    for e in &values {
        let Some(s) = schema_at(&schema, &e.path) else {
            problems.push(format!(
                "{}: in values.yaml, not in values.schema.json",
                e.path
            ));
            continue;
        };
        let description = match (&e.comment, s["description"].as_str()) {
            (Some(c), _) => describe(c),
            (None, Some(d)) => sentence(d),
            (None, None) => {
                problems.push(format!(
                    "{}: no `# --` comment in values.yaml and no schema description",
                    e.path
                ));
                String::new()
            }
        };
        out += &format!(
            "| `{}` | {} | {} | {} | {} |\n",
            e.path,
            type_of(s),
            cell(&format!("`{}`", e.default)),
            cell(&allowed(s)),
            cell(&description)
        );
    }

    // Keys the schema accepts that values.yaml neither sets nor contains.
    let mut paths = Vec::new();
    schema_paths(&schema, "", &mut paths);
    let unset: Vec<&String> = paths
        .iter()
        .filter(|p| {
            !values.iter().any(|e| {
                e.path == **p
                    || p.starts_with(&format!("{}.", e.path))
                    || e.path.starts_with(&format!("{p}."))
            })
        })
        .collect();
    if !unset.is_empty() {
        out += "\nAccepted by the schema, not set by default:\n\n| key | type | allowed | description |\n|---|---|---|---|\n";
        for p in unset {
            let s = schema_at(&schema, p).expect("a path from the schema");
            out += &format!(
                "| `{p}` | {} | {} | {} |\n",
                type_of(s),
                cell(&allowed(s)),
                cell(&s["description"].as_str().map_or("—".into(), sentence))
            );
        }
    }
    assert!(
        problems.is_empty(),
        "charts/nodeimage values:\n{}",
        problems.join("\n")
    );
    out
}

#[test]
fn chart_readme_is_current() {
    let readme = render();
    let path = repo_root().join(CHART).join("README.md");
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &readme).expect("write charts/nodeimage/README.md");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == readme,
        "charts/nodeimage/README.md is stale: run {REGENERATE}"
    );
}

/// The reader of values.yaml on the shapes the chart uses.
#[test]
fn values_reader_understands_blocks_and_comments() {
    let text = "\
# header, not a value
top: 1
outer:
  # -- Documented as a whole, passed as
  # --a-flag.
  res:
    requests:
      cpu: 50m
    drop: [\"ALL\"]
  # -- A list.
  list:
    - a=b
    - operator: Exists
      effect: NoSchedule
  # -- With an example:
  #   alerts:
  #     X: {for: 1m}
  ex: {}
plain: false
";
    let e = parse_values(text);
    let got: Vec<(&str, &str)> = e
        .iter()
        .map(|e| (e.path.as_str(), e.default.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("top", "1"),
            ("outer.res", "{requests: {cpu: 50m}, drop: [\"ALL\"]}"),
            (
                "outer.list",
                "[a=b, {operator: Exists, effect: NoSchedule}]"
            ),
            ("outer.ex", "{}"),
            ("plain", "false"),
        ]
    );
    assert_eq!(
        describe(e[1].comment.as_ref().expect("comment")),
        "Documented as a whole, passed as --a-flag."
    );
    assert_eq!(
        describe(e[3].comment.as_ref().expect("comment")),
        "With an example: `{alerts: {X: {for: 1m}}}`"
    );
    assert!(e[0].comment.is_none() && e[4].comment.is_none());
}
