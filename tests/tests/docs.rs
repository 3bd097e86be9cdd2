//! The docs say what the chart and the CRDs ship: alert names, served API
//! versions. Plain file reads, no cluster: runs with the unit tests.

use nodeimage_tests::repo_root;
use std::collections::BTreeSet;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// Alert names defined in the chart (top-level keys of the alerts template).
fn chart_alerts() -> BTreeSet<String> {
    read("charts/nodeimage/templates/_alerts.tpl")
        .lines()
        .filter_map(|l| l.strip_suffix(':'))
        .filter(|k| k.starts_with("NodeImage") && k.chars().all(char::is_alphanumeric))
        .map(str::to_string)
        .collect()
}

/// Every alert the chart ships has a runbook section in docs/metrics.md,
/// and every section there names an alert the chart ships; the README's
/// count of alerts matches.
#[test]
fn alert_runbooks_match_the_chart() {
    let chart = chart_alerts();
    assert!(chart.len() >= 5, "alerts read from the chart: {chart:?}");
    let runbooks: BTreeSet<String> = read("docs/metrics.md")
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .filter(|h| h.starts_with("NodeImage"))
        .map(|h| h.trim().to_string())
        .collect();
    assert_eq!(
        chart, runbooks,
        "alerts in charts/nodeimage/templates/_alerts.tpl vs runbook sections in docs/metrics.md"
    );
    let words = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve",
    ];
    let said = words
        .get(chart.len())
        .map(|w| format!("{w} alerts"))
        .unwrap_or_else(|| format!("{} alerts", chart.len()));
    assert!(
        read("README.md").contains(&said),
        "README.md should say \"{said}\" (the chart ships {})",
        chart.len()
    );
}

/// The served versions of each CRD (crds/yaml) are the ones README.md's
/// table of kinds names for its group.
#[test]
fn readme_names_the_served_api_versions() {
    let readme = read("README.md");
    for (group, files) in [
        (
            "apps.kruise.io",
            &[
                "crds/yaml/apps.kruise.io_nodeimages.yaml",
                "crds/yaml/apps.kruise.io_imagepulljobs.yaml",
                "crds/yaml/apps.kruise.io_imagelistpulljobs.yaml",
            ][..],
        ),
        (
            "operations.kubeedge.io",
            &[
                "crds/yaml/operations.kubeedge.io_imageprepulljobs.yaml",
                "crds/yaml/operations.kubeedge.io_nodeupgradejobs.yaml",
            ][..],
        ),
        (
            "nodeimage.dev",
            &["crds/yaml/nodeimage.dev_imageremovaljobs.yaml"][..],
        ),
    ] {
        let row = readme
            .lines()
            .find(|l| l.starts_with('|') && l.contains(&format!("`{group}")))
            .unwrap_or_else(|| panic!("README.md has no table row for {group}"));
        for file in files {
            let versions: Vec<String> = read(file)
                .lines()
                .filter_map(|l| l.trim().strip_prefix("name: v"))
                .map(|v| format!("v{v}"))
                .collect();
            assert!(!versions.is_empty(), "no versions in {file}");
            for v in versions {
                assert!(
                    row.contains(&format!("`{v}`")),
                    "README.md's row for {group} does not name {v} ({file}): {row}"
                );
            }
        }
    }
}

/// The version has one source, Cargo.toml's workspace version; the chart's
/// version and appVersion are copies of it (release/set-version.sh writes
/// all three), and CHANGELOG.md has a section that will carry it.
#[test]
fn chart_and_changelog_carry_the_workspace_version() {
    let cargo = read("Cargo.toml");
    let version = cargo
        .split("[workspace.package]")
        .nth(1)
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("version = ")))
        .map(|v| v.trim().trim_matches('"').to_string())
        .expect("Cargo.toml has [workspace.package] version");
    let chart = read("charts/nodeimage/Chart.yaml");
    let field = |key: &str| {
        chart
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().trim_matches('"').to_string())
            .unwrap_or_else(|| panic!("Chart.yaml has no {key}"))
    };
    assert_eq!(
        (field("version:"), field("appVersion:")),
        (version.clone(), version.clone()),
        "Chart.yaml (version, appVersion) vs Cargo.toml's {version}: run release/set-version.sh {version}"
    );
    let changelog = read("CHANGELOG.md");
    assert!(
        changelog.contains("\n## Unreleased") || changelog.contains(&format!("\n## [{version}]")),
        "CHANGELOG.md needs '## Unreleased' or '## [{version}]'"
    );
}
