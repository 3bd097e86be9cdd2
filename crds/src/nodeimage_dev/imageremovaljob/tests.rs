use super::*;
use crate::reference::{ImageRef, image_pattern};
use kube::CustomResourceExt;

/// The CRD's stored schema of `spec`, as the API server gets it.
fn spec_schema() -> Value {
    let crd = serde_json::to_value(ImageRemovalJob::crd()).expect("CRD serialises");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
}

/// The messages of the rules at `schema`.
fn messages(schema: &Value) -> Vec<String> {
    schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["message"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn the_kind_is_nodeimages_own_and_cluster_scoped() {
    let crd = ImageRemovalJob::crd();
    assert_eq!(crd.spec.group, super::super::GROUP);
    assert_eq!(
        crd.spec.scope, "Cluster",
        "platform team only: no namespace"
    );
    assert_eq!(crd.spec.names.kind, "ImageRemovalJob");
    assert_eq!(crd.spec.names.short_names, Some(vec!["irj".to_string()]));
    assert_eq!(crd.spec.versions.len(), 1);
    assert!(crd.spec.versions[0].storage && crd.spec.versions[0].served);
}

/// Every refusal the issue names has a rule whose message names the field.
#[test]
fn every_refusal_names_its_field() {
    let spec = spec_schema();
    let top = messages(&spec);
    let images = &spec["properties"]["images"];
    let item = messages(&images["items"]);
    let parallelism = messages(&spec["properties"]["parallelism"]);
    // (what is refused, the rules that refuse it, words the message must hold)
    let cases: [(&str, &[String], &str); 6] = [
        (
            "an empty list",
            &top,
            "spec.images must name at least one image",
        ),
        (
            "a wildcard",
            &item,
            "spec.images: wildcards ('*') are not accepted",
        ),
        (
            "block by tag",
            &top,
            "spec.block needs every image in spec.images pinned by digest",
        ),
        (
            "block with a TTL",
            &top,
            "spec.ttlSecondsAfterFinished cannot go with spec.block",
        ),
        ("an edit", &top, "spec is immutable"),
        (
            "parallelism 0",
            &parallelism,
            "spec.parallelism must be at least 1",
        ),
    ];
    for (what, rules, words) in cases {
        assert!(
            rules.iter().any(|m| m.contains(words)),
            "{what}: no rule says {words:?} in {rules:?}"
        );
    }
    assert_eq!(
        images["maxItems"],
        json!(limits::REMOVAL_IMAGES_MAX),
        "too many images"
    );
    assert_eq!(images["x-kubernetes-list-type"], "set", "duplicates");
    assert_eq!(
        spec["properties"]["parallelism"]["minimum"].as_f64(),
        Some(1.0)
    );
    assert_eq!(spec["required"], json!(["images"]));
}

/// The items carry the project's one reference rule (not a second one),
/// after the wildcard rule.
#[test]
fn items_use_the_shared_reference_rule() {
    let spec = spec_schema();
    let item = &spec["properties"]["images"]["items"];
    let shared = serde_json::to_value(crate::reference::image_schema(
        &mut SchemaGenerator::default(),
    ))
    .expect("schema serialises");
    let rules = item["x-kubernetes-validations"].as_array().expect("rules");
    assert_eq!(rules.len(), 4);
    assert_eq!(
        &rules[1..],
        shared["x-kubernetes-validations"]
            .as_array()
            .expect("rules")
    );
    assert_eq!(item["maxLength"], shared["maxLength"]);
    assert_eq!(item["minLength"], shared["minLength"]);
}

/// What the rules refuse, checked with the shared pattern and parser (the
/// CEL text is the API server's to run; `tests/manifests/invalid.yaml`
/// runs it there).
#[test]
fn bad_references_are_refused_by_the_shared_grammar() {
    let pattern = regex::Regex::new(&image_pattern()).expect("pattern compiles");
    let d = "a".repeat(64);
    for bad in [
        "*",
        "app:*",
        "registry.example.com/*",
        "",
        "NGINX",
        "app@sha256:12",
    ] {
        assert!(
            !pattern.is_match(bad) && ImageRef::parse(bad).is_err(),
            "{bad:?} must be refused"
        );
    }
    for good in [
        "nginx:1.25",
        &format!("registry.example.com/app@sha256:{d}"),
    ] {
        assert!(
            pattern.is_match(good) && ImageRef::parse(good).is_ok(),
            "{good:?}"
        );
    }
}

#[test]
fn a_manifest_reads_and_writes_back_as_written() {
    let manifest = json!({
        "apiVersion": "nodeimage.dev/v1alpha1",
        "kind": "ImageRemovalJob",
        "metadata": {"name": "cve"},
        "spec": {
            "images": ["registry.example.com/app@sha256:0123"],
            "selector": {"matchLabels": {"pool": "gpu"}},
            "parallelism": 10,
            "activeDeadlineSeconds": 3600,
            "block": true
        }
    });
    let job: ImageRemovalJob = serde_json::from_value(manifest.clone()).expect("decodes");
    assert!(job.spec.blocks() && !job.spec.forced());
    assert_eq!(job.spec.parallelism, Some(10));
    let back = serde_json::to_value(&job).expect("encodes");
    assert_eq!(back["spec"], manifest["spec"]);
    let status = ImageRemovalJobStatus {
        bytes_freed: 73_400_320,
        kept: 1,
        ..Default::default()
    };
    let v = serde_json::to_value(&status).expect("encodes");
    assert_eq!(v["bytesFreed"], json!(73_400_320));
    assert_eq!(v["kept"], json!(1));
}
