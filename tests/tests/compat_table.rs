//! docs/install.md's compatibility tables ("Kubernetes versions and tools";
//! "Clusters, distributions and node kinds") and its runtime table say what
//! is tested by naming the test: a test function (`file::function` for
//! tests/tests/file.rs, `path/to/file.rs::function` for a unit test in a
//! crate) or a script, either followed by the steps it runs (`step "…"`: a
//! script's `step "…"` line, a Rust test's `step("…", …)` call, as in
//! tests/tests/install.rs). These checks keep the
//! names true, so a renamed test or step fails `cargo test`, and keep the
//! versions the tables name equal to the ones the repository builds. Plain
//! file reads, no cluster.

use nodeimage_tests::repo_root;

const DOC: &str = "docs/install.md";

/// The three things a row of a compatibility table may say.
const SUPPORTED: &str = "supported (tested)";
const EXPECTED: &str = "expected to work, not tested here (";
const UNSUPPORTED: &str = "not supported (";

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// A markdown table: its header cells and its rows, each with its line
/// number in the file.
struct Table {
    header: Vec<String>,
    rows: Vec<(usize, Vec<String>)>,
}

impl Table {
    fn column(&self, name: &str) -> Option<usize> {
        self.header
            .iter()
            .position(|h| h.eq_ignore_ascii_case(name))
    }
}

fn cells(line: &str) -> Vec<String> {
    let line = line.trim();
    let line = line.strip_prefix('|').unwrap_or(line);
    let line = line.strip_suffix('|').unwrap_or(line);
    line.split('|').map(|c| c.trim().to_string()).collect()
}

/// Every table of a markdown text (runs of lines starting with `|`, the
/// second being the separator), fenced code blocks left out.
fn tables(text: &str) -> Vec<Table> {
    let mut out = Vec::new();
    let mut current: Vec<(usize, &str)> = Vec::new();
    let mut fenced = false;
    let mut flush = |rows: &mut Vec<(usize, &str)>| {
        if rows.len() >= 2
            && rows[1]
                .1
                .trim_start_matches('|')
                .trim_start()
                .starts_with("---")
        {
            out.push(Table {
                header: cells(rows[0].1),
                rows: rows[2..].iter().map(|(n, l)| (*n, cells(l))).collect(),
            });
        }
        rows.clear();
    };
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && line.starts_with('|') {
            current.push((i + 1, line));
        } else {
            flush(&mut current);
        }
    }
    flush(&mut current);
    out
}

/// What a piece of the doc cites.
#[derive(Debug, PartialEq)]
enum Cite {
    /// A test function in a file (repository path), and the steps of it
    /// cited after it.
    Test {
        file: String,
        name: String,
        steps: Vec<String>,
    },
    /// A script (repository path) and the steps of it cited after it.
    Script { path: String, steps: Vec<String> },
    /// A file of the repository.
    File(String),
}

impl Cite {
    fn is_evidence(&self) -> bool {
        matches!(self, Cite::Test { .. } | Cite::Script { .. })
    }
}

fn is_ident(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn is_repo_path(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('/')
        && !s.starts_with('.')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-'))
}

/// What one code span names, if it names a test, a script or a file.
fn classify(span: &str) -> Option<Cite> {
    if let Some((file, name)) = span.rsplit_once("::") {
        if !is_ident(name) {
            return None;
        }
        if is_ident(file) {
            return Some(Cite::Test {
                file: format!("tests/tests/{file}.rs"),
                name: name.to_string(),
                steps: Vec::new(),
            });
        }
        if file.ends_with(".rs") && is_repo_path(file) {
            return Some(Cite::Test {
                file: file.to_string(),
                name: name.to_string(),
                steps: Vec::new(),
            });
        }
        return None;
    }
    if !is_repo_path(span) {
        return None;
    }
    if span.ends_with(".sh") && span.contains('/') {
        return Some(Cite::Script {
            path: span.to_string(),
            steps: Vec::new(),
        });
    }
    if span.ends_with(".rs") {
        return Some(Cite::File(if span.contains('/') {
            span.to_string()
        } else {
            format!("tests/tests/{span}")
        }));
    }
    let known = [".go", ".mod", ".toml", ".yaml"];
    (span.contains('/') && known.iter().any(|e| span.ends_with(e)))
        .then(|| Cite::File(span.to_string()))
}

/// The citations of a text, in order: code spans, and `step "…"` written
/// outside code spans, each step going to the script or test cited last
/// before it.
fn citations(text: &str) -> Result<Vec<Cite>, String> {
    let mut out: Vec<Cite> = Vec::new();
    let mut rest = text;
    loop {
        let (plain, after) = match rest.split_once('`') {
            Some((p, a)) => (p, Some(a)),
            None => (rest, None),
        };
        let mut p = plain;
        while let Some(at) = p.find("step \"") {
            let tail = &p[at + "step \"".len()..];
            let Some(end) = tail.find('"') else {
                return Err(format!("an unterminated step \"… in: {text}"));
            };
            let step = tail[..end].to_string();
            match out
                .iter_mut()
                .rev()
                .find(|c| matches!(c, Cite::Script { .. } | Cite::Test { .. }))
            {
                Some(Cite::Script { steps, .. } | Cite::Test { steps, .. }) => steps.push(step),
                _ => {
                    return Err(format!(
                        "step \"{step}\" follows no script or test in: {text}"
                    ));
                }
            }
            p = &tail[end + 1..];
        }
        let Some(after) = after else { break };
        let Some((span, next)) = after.split_once('`') else {
            return Err(format!("an unterminated code span in: {text}"));
        };
        out.extend(classify(span));
        rest = next;
    }
    Ok(out)
}

/// Whether `file` has a test function `name` (`fn name(` under a `#[test]`
/// or `#[tokio::test…]` attribute, past doc comments and other attributes).
fn has_test(file: &str, name: &str) -> bool {
    let text = read(file);
    let lines: Vec<&str> = text.lines().collect();
    let decl = [format!("fn {name}("), format!("fn {name}<")];
    lines.iter().enumerate().any(|(i, line)| {
        let l = line.trim_start();
        let l = l.strip_prefix("pub ").unwrap_or(l);
        let l = l.strip_prefix("async ").unwrap_or(l);
        if !decl.iter().any(|d| l.starts_with(d.as_str())) {
            return false;
        }
        lines[..i]
            .iter()
            .rev()
            .map(|l| l.trim())
            .take_while(|l| l.starts_with("#[") || l.starts_with("//"))
            .any(|l| l == "#[test]" || l.starts_with("#[tokio::test"))
    })
}

/// The steps a Rust test file runs: the string literals that open its
/// `step(` calls (`t.step("…", …)`, as tests/tests/install.rs runs them).
fn rust_steps(text: &str) -> Vec<String> {
    text.split("step(")
        .skip(1)
        .filter_map(|rest| {
            let rest = rest.trim_start().strip_prefix('"')?;
            rest.split_once('"').map(|(step, _)| step.to_string())
        })
        .collect()
}

/// Why a citation does not hold, if it does not.
fn check(cite: &Cite) -> Option<String> {
    match cite {
        Cite::Test { file, name, steps } => {
            if !repo_root().join(file).is_file() {
                Some(format!("`{name}`: there is no {file}"))
            } else if !has_test(file, name) {
                Some(format!("{file} has no test function `{name}`"))
            } else {
                let ran = rust_steps(&read(file));
                let missing: Vec<&String> = steps.iter().filter(|s| !ran.contains(s)).collect();
                (!missing.is_empty()).then(|| format!("{file} has no step {missing:?}"))
            }
        }
        Cite::Script { path, steps } => {
            if !repo_root().join(path).is_file() {
                return Some(format!("there is no script {path}"));
            }
            let text = read(path);
            let missing: Vec<&String> = steps
                .iter()
                .filter(|s| !text.contains(&format!("step \"{s}\"")))
                .collect();
            (!missing.is_empty()).then(|| format!("{path} has no step {missing:?}"))
        }
        Cite::File(path) => {
            (!repo_root().join(path).exists()).then(|| format!("there is no {path}"))
        }
    }
}

/// Paragraphs of the doc outside fenced code blocks and tables, each with
/// the line it starts on (code spans may wrap within a paragraph).
fn paragraphs(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        if fence {
            fenced = !fenced;
        }
        if fence || fenced || line.trim().is_empty() || line.starts_with('|') {
            out.extend(current.take());
            continue;
        }
        match &mut current {
            Some((_, p)) => {
                p.push(' ');
                p.push_str(line.trim());
            }
            None => current = Some((i + 1, line.trim().to_string())),
        }
    }
    out.extend(current);
    out
}

/// Every test, script step and file the doc cites exists: in every table
/// cell (the runtime table and the compatibility tables) and in the prose.
#[test]
fn every_cited_test_and_script_step_exists() {
    let doc = read(DOC);
    let mut places: Vec<(usize, String)> = paragraphs(&doc);
    for t in tables(&doc) {
        for (line, row) in t.rows {
            places.extend(row.into_iter().map(|c| (line, c)));
        }
    }
    let mut problems = Vec::new();
    let mut tests = 0;
    for (line, text) in places {
        match citations(&text) {
            Err(e) => problems.push(format!("{DOC}:{line}: {e}")),
            Ok(cites) => {
                tests += cites
                    .iter()
                    .filter(|c| matches!(c, Cite::Test { .. }))
                    .count();
                problems.extend(
                    cites
                        .iter()
                        .filter_map(check)
                        .map(|p| format!("{DOC}:{line}: {p}")),
                );
            }
        }
    }
    assert!(tests >= 30, "only {tests} test citations read from {DOC}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The compatibility tables (those with a "status" column): each row is
/// supported and tested, naming a test or a script step; or expected to
/// work and not tested, with the reason; or not supported, with the reason.
/// The platforms the tables promise to cover each have a row.
#[test]
fn every_row_says_tested_expected_or_unsupported() {
    let doc = read(DOC);
    let compat: Vec<Table> = tables(&doc)
        .into_iter()
        .filter(|t| t.column("status").is_some())
        .collect();
    assert_eq!(
        compat.len(),
        2,
        "{DOC}: the compatibility tables (versions and tools; clusters) have a \"status\" column"
    );
    let mut problems = Vec::new();
    let mut supported = 0;
    for t in &compat {
        let status = t.column("status").expect("a status column");
        for (line, row) in &t.rows {
            let what = format!("{DOC}:{line} ({})", row[0]);
            if row.len() != t.header.len() {
                problems.push(format!(
                    "{what}: {} cells, the header has {}",
                    row.len(),
                    t.header.len()
                ));
                continue;
            }
            let s = row[status].as_str();
            if s == SUPPORTED {
                supported += 1;
                let evidence = row
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != status)
                    .filter_map(|(_, c)| citations(c).ok())
                    .flatten()
                    .filter(Cite::is_evidence)
                    .count();
                if evidence == 0 {
                    problems.push(format!(
                        "{what}: \"{SUPPORTED}\" names no test (`file::function`) or script"
                    ));
                }
            } else if let Some(reason) = s
                .strip_prefix(EXPECTED)
                .or_else(|| s.strip_prefix(UNSUPPORTED))
            {
                if reason.trim_end_matches(')').trim().len() < 10 || !reason.ends_with(')') {
                    problems.push(format!("{what}: the reason in parentheses is missing: {s}"));
                }
            } else {
                problems.push(format!(
                    "{what}: status must be \"{SUPPORTED}\", \"{EXPECTED}…)\" or \"{UNSUPPORTED}…)\", not {s:?}"
                ));
            }
        }
    }
    assert!(supported >= 4, "only {supported} supported rows");
    let firsts: Vec<&str> = compat
        .iter()
        .flat_map(|t| t.rows.iter().map(|(_, r)| r[0].as_str()))
        .collect();
    for platform in [
        "upstream Kubernetes",
        "GKE Standard",
        "GKE Autopilot",
        "EKS, EC2 nodes",
        "EKS Fargate",
        "AKS",
        "k3s",
        "RKE2",
        "k0s",
        "MicroK8s",
        "Talos",
        "OpenShift",
        "Windows nodes",
        "virtual-kubelet",
        "Helm",
        "kubectl",
    ] {
        if !firsts.iter().any(|f| f.starts_with(platform)) {
            problems.push(format!("{DOC}: no compatibility row for {platform}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The row of a compatibility table whose first cell starts with `first`.
fn row<'a>(tables: &'a [Table], first: &str) -> &'a [String] {
    tables
        .iter()
        .filter(|t| t.column("status").is_some())
        .flat_map(|t| t.rows.iter())
        .map(|(_, r)| r.as_slice())
        .find(|r| r[0].starts_with(first))
        .unwrap_or_else(|| panic!("{DOC}: no compatibility row starting with {first:?}"))
}

/// `key version` of a go.mod's require lines.
fn go_require(path: &str, module: &str) -> String {
    read(path)
        .lines()
        .map(|l| l.trim().trim_start_matches("require").trim())
        .find_map(|l| {
            let (m, v) = l.split_once(char::is_whitespace)?;
            (m == module).then(|| v.split_whitespace().next().unwrap_or("").to_string())
        })
        .unwrap_or_else(|| panic!("{path} does not require {module}"))
}

/// The versions the tables name are the ones the repository builds and
/// pins: the tested Kubernetes (tests/kube/go.mod), the chart's floor
/// (Chart.yaml), helm (tests/chart.sh), the k8s-openapi version and feature
/// of the crates, and the containerd releases of the test nodes.
#[test]
fn the_tables_name_the_versions_the_repository_builds() {
    let raw = read(DOC);
    let all = tables(&raw);
    // Prose wraps: compare with every run of white space as one space.
    let doc = raw.split_whitespace().collect::<Vec<_>>().join(" ");

    // Kubernetes: what the local cluster is built from is the tested row.
    let k8s = go_require("tests/kube/go.mod", "k8s.io/kubernetes");
    let minor: String = k8s
        .trim_start_matches('v')
        .split('.')
        .take(2)
        .collect::<Vec<_>>()
        .join(".");
    let tested = row(&all, &format!("Kubernetes {minor} ({k8s})"));
    assert_eq!(tested[1], SUPPORTED, "Kubernetes {minor}: {tested:?}");

    // Every other version the local cluster builds (tests/kube/versions,
    // up.sh's NODEIMAGE_KUBE_VERSION) has its row, naming its command.
    let dir = repo_root().join("tests/kube/versions");
    let mut others: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    others.sort();
    assert!(!others.is_empty(), "no module in {}", dir.display());
    for dir in others {
        let version = go_require(
            &format!("tests/kube/versions/{dir}/go.mod"),
            "k8s.io/kubernetes",
        );
        let minor = dir.trim_start_matches('v');
        assert!(
            version.starts_with(&format!("{dir}.")),
            "tests/kube/versions/{dir} builds {version}"
        );
        let other = row(&all, &format!("Kubernetes {minor} ({version})"));
        let command = format!("KUBE_VERSION={version} make test-kube-version");
        assert!(
            other.iter().any(|c| c.contains(&command)),
            "the row of Kubernetes {minor} names `{command}`: {other:?}"
        );
    }

    // The chart's floor: the row of older versions is refused, and the
    // table quotes Chart.yaml's kubeVersion.
    let chart = read("charts/nodeimage/Chart.yaml");
    let kube_version = chart
        .lines()
        .find_map(|l| l.strip_prefix("kubeVersion:"))
        .map(|v| v.trim().trim_matches('"').to_string())
        .expect("kubeVersion in Chart.yaml");
    let floor: String = kube_version
        .trim_start_matches(">=")
        .split('.')
        .take(2)
        .collect::<Vec<_>>()
        .join(".");
    let older = row(&all, &format!("Kubernetes before {floor}"));
    assert!(older[1].starts_with(UNSUPPORTED), "{older:?}");
    assert!(
        doc.contains(&format!("`kubeVersion: \"{kube_version}\"`")),
        "{DOC} quotes Chart.yaml's kubeVersion: \"{kube_version}\""
    );
    assert!(
        doc.contains(&format!("Kubernetes {floor} or later")),
        "{DOC}'s requirements name the floor {floor}"
    );

    // helm: the version tests/chart.sh installs is the tested row.
    let chart_sh = read("tests/chart.sh");
    let helm = chart_sh
        .lines()
        .find_map(|l| l.strip_prefix("HELM_VERSION=${HELM_VERSION:-"))
        .and_then(|v| v.strip_suffix('}'))
        .expect("HELM_VERSION's default in tests/chart.sh");
    let helm_row = row(&all, &format!("Helm {}", helm.trim_start_matches('v')));
    assert_eq!(helm_row[1], SUPPORTED, "{helm_row:?}");
    assert!(
        helm_row[2].contains(helm),
        "the helm row names {helm}: {helm_row:?}"
    );

    // k8s-openapi: the workspace's version and the one feature the crates pick.
    let workspace = read("Cargo.toml");
    let openapi = workspace
        .lines()
        .find_map(|l| l.strip_prefix("k8s-openapi = { version = \""))
        .and_then(|l| l.split('"').next())
        .expect("k8s-openapi's version in Cargo.toml");
    let members = workspace
        .lines()
        .find_map(|l| l.strip_prefix("members = ["))
        .expect("the workspace members");
    let mut features = std::collections::BTreeSet::new();
    for member in members.trim_end_matches(']').split(',') {
        let member = member.trim().trim_matches('"');
        let manifest = format!("{member}/Cargo.toml");
        for line in read(&manifest)
            .lines()
            .filter(|l| l.starts_with("k8s-openapi"))
        {
            features.extend(
                line.split('"')
                    .filter(|w| w.starts_with("v1_"))
                    .map(str::to_string),
            );
        }
    }
    assert_eq!(
        features.len(),
        1,
        "the crates pick one k8s-openapi version feature: {features:?}"
    );
    let feature = features.first().expect("one feature");
    assert!(
        doc.contains(&format!(
            "`k8s-openapi` {openapi} with its feature `{feature}`"
        )),
        "{DOC} says the crates build with `k8s-openapi` {openapi} and its feature `{feature}`"
    );

    // containerd: every release the test nodes build is named.
    let dir = repo_root().join("tests/containerd");
    let mut lines: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('v'))
        .collect();
    lines.sort();
    assert!(lines.len() >= 3, "containerd lines: {lines:?}");
    for line in lines {
        let gomod = format!("tests/containerd/{line}/go.mod");
        let module = if line.starts_with("v1.") {
            "github.com/containerd/containerd"
        } else {
            "github.com/containerd/containerd/v2"
        };
        let version = go_require(&gomod, module);
        let bare = version.trim_start_matches('v');
        assert!(
            doc.contains(&format!("containerd {bare}")),
            "{DOC} names containerd {bare} ({gomod})"
        );
    }
}

/// How a cell's citations are read.
#[test]
fn citations_read_tests_scripts_steps_and_files() {
    let cell = "a test (`chart::chart_x`), a unit test (`controller/src/nodes.rs::t`), \
                `tests/chart.sh`, step \"one\", then step \"two\"; `install::install_y`, \
                step \"three\"; `nodeimage.rs`, \
                `tests/kube/go.mod`, and no citation: `daemon.containerdSocket`, \
                `/run/containerd/containerd.sock`, `<file>::<function>`, `step \"x\"`";
    assert_eq!(
        citations(cell).expect("citations"),
        vec![
            Cite::Test {
                file: "tests/tests/chart.rs".into(),
                name: "chart_x".into(),
                steps: vec![],
            },
            Cite::Test {
                file: "controller/src/nodes.rs".into(),
                name: "t".into(),
                steps: vec![],
            },
            Cite::Script {
                path: "tests/chart.sh".into(),
                steps: vec!["one".into(), "two".into()]
            },
            Cite::Test {
                file: "tests/tests/install.rs".into(),
                name: "install_y".into(),
                steps: vec!["three".into()],
            },
            Cite::File("tests/tests/nodeimage.rs".into()),
            Cite::File("tests/kube/go.mod".into()),
        ]
    );
    assert!(citations("step \"orphan\" with no script").is_err());
    assert!(citations("an `unterminated span").is_err());
}

/// How the steps of a Rust test are read.
#[test]
fn rust_steps_are_the_literals_opening_step_calls() {
    let text = "t.step(\"one\", f);\n    t.step(\n        \"two, long\",\n        |t| g(t),\n    );\n\
                t.step(&format!(\"not {x}\"), h);\nfn step<T>(name: &str) {}\n";
    assert_eq!(
        rust_steps(text),
        vec!["one".to_string(), "two, long".to_string()]
    );
}
