//! The committed CRD YAML under `crds/yaml/` must match the Rust types.
//! Regenerate with `UPDATE_CRDS=1 cargo test -p nodeimage-api --test crd_yaml`.

use std::path::PathBuf;

#[test]
fn committed_crds_match_types() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("yaml");
    let update = std::env::var_os("UPDATE_CRDS").is_some();
    let mut stale = Vec::new();
    for (file, crd) in nodeimage_api::crdgen::all() {
        let yaml = format!(
            // The leading "---" keeps the files separate documents when
            // they are concatenated (`helm show crds`, `cat crds/yaml/*`).
            "---\n# Generated from the Rust types in crds/src; do not edit.\n# Regenerate: UPDATE_CRDS=1 cargo test -p nodeimage-api --test crd_yaml\n{}",
            serde_yaml::to_string(&crd).expect("CRD serialises")
        );
        let path = dir.join(file);
        if update {
            std::fs::write(&path, &yaml).expect("write CRD");
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(yaml.as_str()) {
            stale.push(file);
        }
    }
    assert!(
        stale.is_empty(),
        "stale CRD YAML {stale:?}: run UPDATE_CRDS=1 cargo test -p nodeimage-api --test crd_yaml"
    );
}
