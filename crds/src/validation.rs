//! Admission rules for names, label selectors and secret references: the
//! schema fragments (with CEL rules whose messages name the field) that the
//! CRDs use, so that a malformed selector or name is refused by the API server
//! instead of leaving a job open for ever or failing on every node.

use crate::limits;
use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

/// A DNS-1123 label (namespaces): at most 63 lower-case letters, digits and '-'.
pub const DNS_LABEL: &str = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";

/// A DNS-1123 subdomain (node and secret names); the length (≤ 253) is a
/// separate `maxLength`.
pub const DNS_SUBDOMAIN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// A label key: an optional DNS subdomain prefix and '/', then a name of at
/// most 63 characters. The prefix length (≤ 253) is checked beside it.
pub const LABEL_KEY: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/// A label value: empty, or at most 63 letters, digits, '-', '_' and '.',
/// starting and ending with a letter or digit.
pub const LABEL_VALUE: &str = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$";

/// `namespace/name` of a Secret (KubeEdge's `imageSecrets`).
pub const NAMESPACED_NAME: &str = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Longest DNS subdomain.
const SUBDOMAIN_MAX: u32 = 253;
/// Longest label key: a 253-character prefix, '/', a 63-character name.
const LABEL_KEY_MAX: u32 = 317;
/// Longest label value.
const LABEL_VALUE_MAX: u32 = 63;

/// The pattern as a CEL string literal body (backslashes doubled).
pub fn cel(pattern: &str) -> String {
    pattern.replace('\\', "\\\\")
}

fn rule(rule: String, message: String) -> Value {
    json!({ "rule": rule, "message": message })
}

/// A list item that must be a DNS subdomain. A schema `pattern` (not CEL):
/// per-item CEL rules on lists this long exceed the API server's cost
/// budget, and the server's pattern message names the field and index.
fn subdomain_item(_field: &str, what: &str) -> Value {
    json!({
        "description": format!("A {what}: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit."),
        "type": "string",
        "minLength": 1,
        "maxLength": SUBDOMAIN_MAX,
        "pattern": DNS_SUBDOMAIN,
    })
}

/// A list of node names, as the field named.
pub(crate) fn node_names(field: &str, description: &str) -> Schema {
    json_schema!({
        "description": description,
        "type": "array",
        "maxItems": limits::NODE_NAMES_MAX,
        "x-kubernetes-list-type": "set",
        "items": subdomain_item(field, "node name"),
    })
}

/// `spec.selector.names` of ImagePullJob and ImageListPullJob.
pub fn job_node_names(_: &mut SchemaGenerator) -> Schema {
    node_names(
        "spec.selector.names",
        "Node names; duplicates are rejected.",
    )
}

/// `checkItems` of the KubeEdge kinds: names as KubeEdge takes them (an
/// unknown one fails the node, not the manifest), bounded.
pub fn check_items(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Checks each node passes first: disk, cpu or mem. Another name fails the node.",
        "type": "array",
        "maxItems": limits::CHECK_ITEMS_MAX,
        "items": {"type": "string", "maxLength": limits::CHECK_ITEM_CHARS_MAX},
    })
}

/// `spec.pullSecrets` of ImagePullJob and ImageListPullJob: Secret names.
pub fn job_pull_secrets(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Names of Secrets in the job's namespace with registry credentials. Cannot change after creation.",
        "type": "array",
        "maxItems": limits::PULL_SECRETS_MAX,
        "items": subdomain_item("spec.pullSecrets", "Secret name"),
    })
}

/// `namespace/name` of KubeEdge's `imageSecrets`.
pub fn namespaced_secret(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Secret with registry credentials, as `namespace/name`, of type kubernetes.io/dockerconfigjson (or kubernetes.io/dockercfg): a Secret of any other type is refused and the job's nodes fail naming it. The chart may limit the namespaces allowed (controller.imageSecretNamespaces).",
        "type": "string",
        "maxLength": 63 + 1 + SUBDOMAIN_MAX,
        "x-kubernetes-validations": [rule(
            format!("self.matches('{}') && self.indexOf('/') <= 63 && size(self) - self.indexOf('/') - 1 <= {SUBDOMAIN_MAX}", cel(NAMESPACED_NAME)),
            "spec.imagePrePullTemplate.imageSecrets must be of the form namespace/name (a namespace name, '/', a Secret name)".to_string(),
        )],
    })
}

/// An image repository, with an optional registry host and port, tag or
/// digest (the distribution reference grammar, lower-case path): what a
/// NodeUpgradeJob's `image` must be before any node runs a tool from it.
pub const IMAGE_REFERENCE: &str = r"^([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]+)?/)?[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@[A-Za-z][A-Za-z0-9]*([+._-][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?$";

/// Longest image reference accepted (bounds the CEL cost).
const IMAGE_REFERENCE_MAX: u32 = 512;

/// `spec.image` of NodeUpgradeJob: a valid image repository.
pub fn upgrade_image(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Image that ships the upgrade tool (keadm); any tag or digest is replaced by version. A repository such as kubeedge/installation-package or registry.example.com:5000/edge/installer.",
        "type": "string",
        "default": "kubeedge/installation-package",
        "maxLength": IMAGE_REFERENCE_MAX,
        "x-kubernetes-validations": [rule(
            format!("self.matches('{}')", cel(IMAGE_REFERENCE)),
            "spec.image must be an image repository such as kubeedge/installation-package or registry.example.com/edge/installer (lower-case path, optional host:port, tag or digest)".to_string(),
        )],
    })
}

/// One digest of NodeUpgradeJob `imageDigestGatter`, as the field named:
/// empty, or `sha256:` and 64 lower-case hex digits (what a node compares
/// with the repository digest of what it pulled; empty means none, as in
/// KubeEdge).
fn upgrade_digest(field: &str, description: &str) -> Schema {
    json_schema!({
        "description": description,
        "type": "string",
        "nullable": true,
        "maxLength": 71,
        "x-kubernetes-validations": [rule(
            format!("self == '' || self.matches('{}')", cel(crate::limits::DIGEST_PATTERN)),
            format!("spec.imageDigestGatter.{field} must be a digest: sha256: followed by 64 lower-case hex digits (the upgrade image's manifest digest), or empty"),
        )],
    })
}

/// `imageDigestGatter.value` (v1alpha1).
pub fn digest_value(_: &mut SchemaGenerator) -> Schema {
    upgrade_digest(
        "value",
        "v1alpha1: the digest every node expects of the upgrade image, sha256:<64 hex> (empty: none).",
    )
}

/// `imageDigestGatter.amd64` (v1alpha2).
pub fn digest_amd64(_: &mut SchemaGenerator) -> Schema {
    upgrade_digest(
        "amd64",
        "v1alpha2: the digest amd64 nodes expect of the upgrade image, sha256:<64 hex> (empty: none).",
    )
}

/// `imageDigestGatter.arm64` (v1alpha2).
pub fn digest_arm64(_: &mut SchemaGenerator) -> Schema {
    upgrade_digest(
        "arm64",
        "v1alpha2: the digest arm64 nodes expect of the upgrade image, sha256:<64 hex> (empty: none).",
    )
}

/// `matchLabels`: label keys to values.
fn match_labels(field: &str) -> Value {
    json!({
        "description": "Labels that must all match (key: value).",
        "type": "object",
        "maxProperties": limits::SELECTOR_TERMS_MAX,
        "additionalProperties": {
            "type": "string",
            "maxLength": LABEL_VALUE_MAX,
            "x-kubernetes-validations": [rule(
                format!("self.matches('{}')", cel(LABEL_VALUE)),
                format!("{field}.matchLabels: values must be empty or up to 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit"),
            )],
        },
        "x-kubernetes-validations": [rule(
            format!("self.all(k, size(k) <= {LABEL_KEY_MAX} && k.indexOf('/') <= {SUBDOMAIN_MAX} && k.matches('{}'))", cel(LABEL_KEY)),
            format!("{field}.matchLabels: keys must be label keys: an optional DNS prefix and '/', then up to 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit"),
        )],
    })
}

/// `matchExpressions`: key, operator, values.
fn match_expressions(field: &str) -> Value {
    json!({
        "description": "Label requirements that must all hold.",
        "type": "array",
        "maxItems": limits::SELECTOR_TERMS_MAX,
        "x-kubernetes-list-type": "atomic",
        "items": {
            "type": "object",
            "required": ["key", "operator"],
            "properties": {
                "key": {
                    "description": "The label key.",
                    "type": "string",
                    "maxLength": LABEL_KEY_MAX,
                    "x-kubernetes-validations": [rule(
                        format!("self.indexOf('/') <= {SUBDOMAIN_MAX} && self.matches('{}')", cel(LABEL_KEY)),
                        format!("{field}.matchExpressions: key must be a label key: an optional DNS prefix and '/', then up to 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit"),
                    )],
                },
                "operator": {
                    "description": "In, NotIn, Exists or DoesNotExist.",
                    "type": "string",
                    "enum": ["In", "NotIn", "Exists", "DoesNotExist"],
                },
                "values": {
                    "description": "Values for In and NotIn (at least one); empty for Exists and DoesNotExist.",
                    "type": "array",
                    "maxItems": limits::SELECTOR_VALUES_MAX,
                    "x-kubernetes-list-type": "atomic",
                    "items": {
                        "type": "string",
                        "maxLength": LABEL_VALUE_MAX,
                        "x-kubernetes-validations": [rule(
                            format!("self.matches('{}')", cel(LABEL_VALUE)),
                            format!("{field}.matchExpressions: values must be empty or up to 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit"),
                        )],
                    },
                },
            },
            "x-kubernetes-validations": [rule(
                "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : (!has(self.values) || size(self.values) == 0)".to_string(),
                format!("{field}.matchExpressions: operators In and NotIn need at least one value; Exists and DoesNotExist take none"),
            )],
        },
    })
}

/// A label selector, as the field named.
pub(crate) fn label_selector(field: &str, description: &str) -> Schema {
    json_schema!({
        "description": description,
        "type": "object",
        "x-kubernetes-map-type": "atomic",
        "properties": {
            "matchLabels": match_labels(field),
            "matchExpressions": match_expressions(field),
        },
    })
}

/// `spec.selector.matchLabels` of the OpenKruise job kinds (inline in the selector).
pub fn job_match_labels(_: &mut SchemaGenerator) -> Schema {
    match_labels("spec.selector").try_into().unwrap_or_default()
}

/// `spec.selector.matchExpressions` of the OpenKruise job kinds.
pub fn job_match_expressions(_: &mut SchemaGenerator) -> Schema {
    match_expressions("spec.selector")
        .try_into()
        .unwrap_or_default()
}

/// `spec.podSelector` of the OpenKruise job kinds.
pub fn job_pod_selector(_: &mut SchemaGenerator) -> Schema {
    label_selector(
        "spec.podSelector",
        "Pull on the nodes running active, scheduled pods that match these labels in the job's namespace. Mutually exclusive with selector.",
    )
}

/// `spec.images.*.pullSecrets[].namespace` of NodeImage (a `pattern`: CEL
/// per item of a map of lists exceeds the cost budget).
pub fn secret_namespace(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Namespace of the Secret.",
        "type": "string",
        "maxLength": 63,
        "pattern": DNS_LABEL,
    })
}

/// `spec.images.*.pullSecrets[].name` of NodeImage.
pub fn secret_name(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Name of the Secret.",
        "type": "string",
        "maxLength": SUBDOMAIN_MAX,
        "pattern": DNS_SUBDOMAIN,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::Regex;

    fn re(p: &str) -> Regex {
        Regex::new(p).expect("pattern compiles")
    }

    #[test]
    fn names_and_labels() {
        let label = re(DNS_LABEL);
        let sub = re(DNS_SUBDOMAIN);
        let key = re(LABEL_KEY);
        let value = re(LABEL_VALUE);
        let long63 = "a".repeat(63);
        let long64 = "a".repeat(64);
        // (pattern name, regex, input, accepted)
        let cases: Vec<(&str, &Regex, &str, bool)> = vec![
            ("label", &label, "kube-system", true),
            ("label", &label, &long63, true),
            ("label", &label, &long64, false),
            ("label", &label, "a.b", false),
            ("label", &label, "-a", false),
            ("label", &label, "", false),
            ("subdomain", &sub, "node-1", true),
            ("subdomain", &sub, "ip-10-0-0-1.ec2.internal", true),
            ("subdomain", &sub, "Node-1", false),
            ("subdomain", &sub, "node_1", false),
            ("subdomain", &sub, "node-", false),
            ("subdomain", &sub, "a..b", false),
            ("subdomain", &sub, "", false),
            ("key", &key, "app", true),
            ("key", &key, "kubernetes.io/hostname", true),
            ("key", &key, "node-role.kubernetes.io/edge", true),
            ("key", &key, "App_Name.v1", true),
            ("key", &key, &long63, true),
            ("key", &key, &long64, false),
            ("key", &key, "bad key", false),
            ("key", &key, "/name", false),
            ("key", &key, "Example.com/name", false),
            ("key", &key, "a/b/c", false),
            ("key", &key, "", false),
            ("value", &value, "", true),
            ("value", &value, "v1.2_3-x", true),
            ("value", &value, &long63, true),
            ("value", &value, &long64, false),
            ("value", &value, "-x", false),
            ("value", &value, "a b", false),
        ];
        for (what, r, input, want) in cases {
            assert_eq!(r.is_match(input), want, "{what} {input:?}");
        }
    }

    #[test]
    fn namespaced_names() {
        let r = re(NAMESPACED_NAME);
        for (input, want) in [
            ("default/regcred", true),
            ("kube-system/my.secret", true),
            ("default", false),
            ("default/", false),
            ("/regcred", false),
            ("Default/regcred", false),
            ("a/b/c", false),
        ] {
            assert_eq!(r.is_match(input), want, "{input:?}");
        }
    }

    #[test]
    fn image_references() {
        let r = re(IMAGE_REFERENCE);
        for (input, want) in [
            ("kubeedge/installation-package", true),
            ("installation-package", true),
            ("docker.io/kubeedge/installation-package:v1.16.0", true),
            ("127.0.0.1:5000/edge/installer", true),
            ("Registry.Example.com:443/a/b_c/d__e/f-g", true),
            (
                "r.io/a@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                true,
            ),
            ("Not An/Image!!", false),
            ("kubeedge/Installation", false),
            ("kubeedge//x", false),
            ("-leading/x", false),
            ("a/b; rm -rf /", false),
            ("a/b:$(id)", false),
            ("", false),
        ] {
            assert_eq!(r.is_match(input), want, "{input:?}");
        }
    }

    #[test]
    fn cel_literals_double_backslashes() {
        assert_eq!(cel(r"a\.b"), r"a\\.b");
    }
}
