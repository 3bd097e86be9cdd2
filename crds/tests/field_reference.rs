//! The field reference in `docs/reference/` is generated from the committed
//! CRD YAML (`crds/yaml/`), so it documents exactly what the API server
//! enforces: the stored version's schema, its defaults, bounds and CEL rules.
//! Regenerate with `UPDATE_DOCS=1 cargo test -p nodeimage-api --test field_reference`
//! (after `UPDATE_CRDS=1 ... --test crd_yaml` when the types changed).

use serde_json::Value;
use std::path::{Path, PathBuf};

const REGENERATE: &str = "UPDATE_DOCS=1 cargo test -p nodeimage-api --test field_reference";

/// Upstream documents per kind: the guide users come from (whose examples
/// tests/manifests/seeds hold), and upstream's API reference where it has
/// one. The first is the one the index links.
const UPSTREAM: &[(&str, &[(&str, &str)])] = &[
    (
        "NodeImage",
        &[(
            "OpenKruise user manual: ImagePullJob and NodeImage",
            "https://openkruise.io/docs/user-manuals/imagepulljob",
        )],
    ),
    (
        "ImagePullJob",
        &[(
            "OpenKruise user manual: ImagePullJob and NodeImage",
            "https://openkruise.io/docs/user-manuals/imagepulljob",
        )],
    ),
    (
        "ImageListPullJob",
        &[(
            "OpenKruise user manual: ImagePullJob and NodeImage",
            "https://openkruise.io/docs/user-manuals/imagepulljob",
        )],
    ),
    (
        "ImagePrePullJob",
        &[
            (
                "KubeEdge image pre-pull guide",
                "https://kubeedge.io/docs/advanced/image-prepull/",
            ),
            (
                "KubeEdge API reference: ImagePrePullJob v1alpha1",
                "https://kubeedge.io/docs/reference/kubeedgeapi/operations-resources/image-pre-pull-job-v1alpha1",
            ),
        ],
    ),
    (
        "NodeUpgradeJob",
        &[
            (
                "KubeEdge API reference: NodeUpgradeJob v1alpha1",
                "https://kubeedge.io/docs/reference/kubeedgeapi/operations-resources/node-upgrade-job-v1alpha1",
            ),
            (
                "KubeEdge upgrade guide",
                "https://kubeedge.io/docs/setup/upgrade/",
            ),
        ],
    ),
    (
        "ImageRemovalJob",
        &[(
            "none: nodeimage's own kind (design: docs/removal-design.md)",
            "../removal-design.md",
        )],
    ),
];

/// One CRD as the pages need it.
struct Crd {
    file: String,
    kind: String,
    group: String,
    scope: String,
    short_names: Vec<String>,
    /// (name, stored) of every served version.
    served: Vec<(String, bool)>,
    storage: String,
    /// Whether every served version has the stored version's schema.
    one_schema: bool,
    schema: Value,
}

fn load(path: &Path) -> Crd {
    let text = std::fs::read_to_string(path).expect("read CRD YAML");
    let crd: Value = serde_yaml::from_str(&text).expect("CRD YAML parses");
    let spec = &crd["spec"];
    let versions = spec["versions"].as_array().expect("spec.versions");
    let stored = versions
        .iter()
        .find(|v| v["storage"] == true)
        .expect("a storage version");
    let schema = stored["schema"]["openAPIV3Schema"].clone();
    let served: Vec<&Value> = versions.iter().filter(|v| v["served"] == true).collect();
    Crd {
        file: path
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .into_owned(),
        kind: str_of(&spec["names"]["kind"]),
        group: str_of(&spec["group"]),
        scope: str_of(&spec["scope"]),
        short_names: strings(&spec["names"]["shortNames"]),
        one_schema: served
            .iter()
            .all(|v| v["schema"]["openAPIV3Schema"] == schema),
        served: served
            .iter()
            .map(|v| (str_of(&v["name"]), v["storage"] == true))
            .collect(),
        storage: str_of(&stored["name"]),
        schema,
    }
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(str_of).collect())
        .unwrap_or_default()
}

/// The page name of a kind: `docs/reference/<kind in lower case>.md`.
fn page(kind: &str) -> String {
    format!("{}.md", kind.to_lowercase())
}

fn served_list(crd: &Crd) -> String {
    crd.served
        .iter()
        .map(|(v, stored)| {
            if *stored {
                format!("`{v}` (stored)")
            } else {
                format!("`{v}`")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn upstream(kind: &str) -> &'static [(&'static str, &'static str)] {
    UPSTREAM
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, links)| *links)
        .unwrap_or_else(|| panic!("no upstream links for {kind}: add it to UPSTREAM"))
}

fn header(source: &str) -> String {
    format!(
        "<!-- Generated from {source} by crds/tests/field_reference.rs; do not edit.\n     Regenerate: {REGENERATE} -->\n\n"
    )
}

/// One page: the kind's facts, then a table each for spec and status.
fn kind_page(crd: &Crd) -> String {
    let mut out = header(&format!("crds/yaml/{}", crd.file));
    out += &format!("# {}\n\n{}\n\n", crd.kind, text(&crd.schema["description"]));
    out += "| | |\n|---|---|\n";
    out += &format!("| API group | `{}` |\n", crd.group);
    out += &format!("| served versions | {} |\n", served_list(crd));
    out += &format!("| scope | {} |\n", crd.scope);
    if !crd.short_names.is_empty() {
        let names: Vec<String> = crd.short_names.iter().map(|n| format!("`{n}`")).collect();
        out += &format!("| short names | {} |\n", names.join(", "));
    }
    let links: Vec<String> = upstream(&crd.kind)
        .iter()
        .map(|(title, url)| format!("[{title}]({url})"))
        .collect();
    out += &format!("| upstream | {} |\n\n", links.join("<br>"));
    let versions = if crd.one_schema {
        "every served version has this schema".to_string()
    } else {
        "the other served versions have schemas of their own, not described here".to_string()
    };
    out += &format!(
        "The tables below are the schema of the stored version, `{}`; {versions}. \
         Where nodeimage departs from upstream on purpose, [api.md](../api.md) says so and why. \
         The API server enforces the bounds and rules when an object is written.\n\n\
         In a path, `[]` stands for every item of a list and `*` for every key of a map.\n",
        crd.storage
    );
    let required = strings(&crd.schema["required"]);
    for part in ["spec", "status"] {
        let Some(schema) = crd.schema["properties"].get(part) else {
            continue;
        };
        let mut rows = Vec::new();
        walk(
            schema,
            part.to_string(),
            Some(required.iter().any(|r| r == part)),
            &mut rows,
        );
        out += &format!("\n## {part}\n\n");
        out += "| field | type | required | default | bounds | description | rules |\n";
        out += "|---|---|---|---|---|---|---|\n";
        for row in rows {
            out += &row;
            out.push('\n');
        }
    }
    let root_rules = rules(&crd.schema);
    if !root_rules.is_empty() {
        out += &format!("\nRules on the whole object: {root_rules}\n");
    }
    out
}

/// Rows for `schema` at `path` and everything under it. `required` is None
/// for list items and map values, which are not fields of their own.
fn walk(schema: &Value, path: String, required: Option<bool>, rows: &mut Vec<String>) {
    let says_something = ["description", "default", "x-kubernetes-validations"]
        .iter()
        .any(|k| schema.get(*k).is_some())
        || !bounds(schema).is_empty();
    if required.is_some() || says_something {
        let req = match required {
            Some(true) => "yes",
            _ => "",
        };
        let default = schema
            .get("default")
            .map(|d| format!("`{d}`"))
            .unwrap_or_default();
        rows.push(format!(
            "| `{path}` | {} | {req} | {} | {} | {} | {} |",
            cell(&type_name(schema)),
            cell(&default),
            cell(&bounds(schema)),
            cell(&text(&schema["description"])),
            cell(&rules(schema)),
        ));
    }
    let required = strings(&schema["required"]);
    if let Some(props) = schema["properties"].as_object() {
        for (name, child) in props {
            let req = required.iter().any(|r| r == name);
            walk(child, format!("{path}.{name}"), Some(req), rows);
        }
    }
    if let Some(items) = schema.get("items") {
        walk(items, format!("{path}[]"), None, rows);
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        walk(values, format!("{path}.*"), None, rows);
    }
}

fn type_name(s: &Value) -> String {
    if s["x-kubernetes-int-or-string"] == true {
        return "integer or string".into();
    }
    let base = match s["type"].as_str() {
        Some("array") => format!("[]{}", type_name(&s["items"])),
        Some("object") => match s.get("additionalProperties") {
            Some(v) if v.is_object() => format!("map[string]{}", type_name(v)),
            _ if s["x-kubernetes-preserve-unknown-fields"] == true => "object (any fields)".into(),
            _ => "object".into(),
        },
        Some(t) => t.to_string(),
        None => "any".into(),
    };
    match s["format"].as_str() {
        Some(f) => format!("{base} ({f})"),
        None => base,
    }
}

/// Numbers as the schema means them: YAML writes bounds as floats (`1.0`).
fn number(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e16 => format!("{}", f as i64),
        _ => v.to_string(),
    }
}

fn bounds(s: &Value) -> String {
    let mut out = Vec::new();
    for (what, low, high) in [
        ("", "minimum", "maximum"),
        ("length ", "minLength", "maxLength"),
        ("items ", "minItems", "maxItems"),
        ("keys ", "minProperties", "maxProperties"),
    ] {
        // OpenAPI v3.0: exclusiveMinimum/exclusiveMaximum are flags on the
        // numeric bounds.
        let numeric = what.is_empty();
        let ge = if numeric && s["exclusiveMinimum"] == true {
            ">"
        } else {
            "≥"
        };
        let le = if numeric && s["exclusiveMaximum"] == true {
            "<"
        } else {
            "≤"
        };
        match (s.get(low), s.get(high)) {
            (Some(a), Some(b)) if ge == "≥" && le == "≤" => {
                out.push(format!("{what}{}–{}", number(a), number(b)));
            }
            (a, b) => {
                if let Some(a) = a {
                    out.push(format!("{what}{ge} {}", number(a)));
                }
                if let Some(b) = b {
                    out.push(format!("{what}{le} {}", number(b)));
                }
            }
        }
    }
    if let Some(values) = s["enum"].as_array() {
        let values: Vec<String> = values
            .iter()
            .map(|v| {
                format!(
                    "`{}`",
                    v.as_str().map_or_else(|| v.to_string(), str::to_string)
                )
            })
            .collect();
        out.push(format!("one of {}", values.join(", ")));
    }
    if let Some(p) = s["pattern"].as_str() {
        out.push(format!("pattern `{p}`"));
    }
    match s["x-kubernetes-list-type"].as_str() {
        Some("set") => out.push("unique items".into()),
        Some("map") => {
            let keys: Vec<String> = strings(&s["x-kubernetes-list-map-keys"])
                .iter()
                .map(|k| format!("`{k}`"))
                .collect();
            out.push(format!("unique by {}", keys.join(", ")));
        }
        _ => {}
    }
    out.join("; ")
}

/// The CEL rules at this level, by their messages (the rule itself when a
/// rule has no fixed message).
fn rules(s: &Value) -> String {
    let Some(rules) = s["x-kubernetes-validations"].as_array() else {
        return String::new();
    };
    rules
        .iter()
        .map(
            |r| match (r["message"].as_str(), r["messageExpression"].as_str()) {
                (Some(m), _) => m.to_string(),
                (None, Some(e)) => format!("message computed by `{e}`"),
                (None, None) => format!("`{}`", str_of(&r["rule"])),
            },
        )
        .collect::<Vec<_>>()
        .join("<br>")
}

/// Prose from the schema on one line.
fn text(v: &Value) -> String {
    v.as_str()
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// A table cell: `|` escaped everywhere (GitHub's tables split on it even
/// inside code), `<` and `>` escaped outside code spans so that text such as
/// `<name>` is not taken for HTML. `<br>` separators are ours and stay.
fn cell(s: &str) -> String {
    let s = s.replace('|', "\\|");
    s.split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                part.to_string()
            } else {
                part.split("<br>")
                    .map(|p| p.replace('<', "&lt;").replace('>', "&gt;"))
                    .collect::<Vec<_>>()
                    .join("<br>")
            }
        })
        .collect::<Vec<_>>()
        .join("`")
}

fn index(crds: &[Crd]) -> String {
    let mut out = header("crds/yaml");
    out += "# API reference\n\n\
            One page per kind, listing every field of `spec` and `status` with its type, \
            default, bounds and validation rules. The pages are generated from the CRDs in \
            `crds/yaml` (which are generated from the Rust types in `crds/src`), so they say \
            what the API server enforces. Deliberate differences from OpenKruise and KubeEdge, \
            and the reasons for them, are in [api.md](../api.md).\n\n";
    out += "| kind | API group | scope | served versions | upstream |\n|---|---|---|---|---|\n";
    for crd in crds {
        let (title, url) = upstream(&crd.kind)[0];
        out += &format!(
            "| [{}]({}) | `{}` | {} | {} | [{title}]({url}) |\n",
            crd.kind,
            page(&crd.kind),
            crd.group,
            crd.scope,
            served_list(crd)
        );
    }
    out
}

#[test]
fn field_reference_matches_crds() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let yaml_dir = root.join("yaml");
    let docs = root.join("../docs/reference");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&yaml_dir)
        .expect("read crds/yaml")
        .map(|e| e.expect("read crds/yaml entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut crds: Vec<Crd> = files.iter().map(|p| load(p)).collect();
    // Index order: OpenKruise's kinds, then KubeEdge's, as UPSTREAM lists them.
    crds.sort_by_key(|c| UPSTREAM.iter().position(|(k, _)| *k == c.kind));

    let mut pages: Vec<(String, String)> =
        crds.iter().map(|c| (page(&c.kind), kind_page(c))).collect();
    pages.push(("README.md".into(), index(&crds)));

    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::create_dir_all(&docs).expect("create docs/reference");
        for (name, text) in &pages {
            std::fs::write(docs.join(name), text).expect("write docs/reference page");
        }
    }
    let mut stale: Vec<&str> = pages
        .iter()
        .filter(|(name, text)| {
            std::fs::read_to_string(docs.join(name)).ok().as_deref() != Some(text.as_str())
        })
        .map(|(name, _)| name.as_str())
        .collect();
    // A page left behind by a renamed or removed kind is stale too.
    let extra: Vec<String> = std::fs::read_dir(&docs)
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".md") && !pages.iter().any(|(p, _)| p == n))
                .collect()
        })
        .unwrap_or_default();
    stale.extend(extra.iter().map(String::as_str));
    assert!(
        stale.is_empty(),
        "stale docs/reference pages {stale:?}: run {REGENERATE} (and delete pages of kinds that are gone)"
    );
}
