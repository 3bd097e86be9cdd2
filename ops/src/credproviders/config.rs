//! kubelet's `CredentialProviderConfig` file (`--image-credential-provider-config`),
//! read and checked as kubelet checks it, so that the file a node's kubelet
//! uses works here unchanged.

use super::pattern::Pattern;
use serde::Deserialize;
use std::time::Duration;

/// apiVersions of the configuration file kubelet accepts.
const CONFIG_VERSIONS: [&str; 3] = [
    "kubelet.config.k8s.io/v1",
    "kubelet.config.k8s.io/v1beta1",
    "kubelet.config.k8s.io/v1alpha1",
];
/// apiVersions of the plugin protocol kubelet speaks.
pub const PLUGIN_VERSIONS: [&str; 3] = [
    "credentialprovider.kubelet.k8s.io/v1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
    "credentialprovider.kubelet.k8s.io/v1alpha1",
];

/// Why the configuration cannot be used; the daemon does not start with it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not YAML or JSON of the expected shape.
    #[error("credential provider config: {0}")]
    Parse(#[from] serde_yaml::Error),
    /// A field breaks kubelet's rules.
    #[error("credential provider config: {0}")]
    Invalid(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConfig {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    providers: Vec<RawProvider>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawProvider {
    #[serde(default)]
    name: String,
    #[serde(default)]
    match_images: Vec<String>,
    default_cache_duration: Option<String>,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<RawEnv>,
    token_attributes: Option<serde_yaml::Value>,
}

#[derive(Deserialize)]
struct RawEnv {
    name: String,
    #[serde(default)]
    value: String,
}

/// One exec plugin, checked.
#[derive(Debug, Clone)]
pub struct Provider {
    /// Executable name in the plugin directory.
    pub name: String,
    /// Images it is asked about.
    pub match_images: Vec<Pattern>,
    /// How long its answers are kept when it does not say.
    pub default_cache: Duration,
    /// Protocol version it is spoken to in.
    pub api_version: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment added to the daemon's own.
    pub env: Vec<(String, String)>,
}

/// Parses and checks the configuration file's text (YAML or JSON).
pub fn parse(text: &str) -> Result<Vec<Provider>, ConfigError> {
    let raw: RawConfig = serde_yaml::from_str(text)?;
    check_header(&raw).map_err(ConfigError::Invalid)?;
    let mut out: Vec<Provider> = Vec::new();
    for (i, p) in raw.providers.into_iter().enumerate() {
        let provider = provider(&format!("providers[{i}]"), p, &out)?;
        out.push(provider);
    }
    Ok(out)
}

/// The file's kind and apiVersion, and that it names a provider.
fn check_header(raw: &RawConfig) -> Result<(), String> {
    if raw.kind.as_deref() != Some("CredentialProviderConfig") {
        return Err(format!(
            "kind must be CredentialProviderConfig, got {:?}",
            raw.kind.clone().unwrap_or_default()
        ));
    }
    let version = raw.api_version.clone().unwrap_or_default();
    if !CONFIG_VERSIONS.contains(&version.as_str()) {
        return Err(format!(
            "apiVersion must be one of {}, got {version:?}",
            CONFIG_VERSIONS.join(", ")
        ));
    }
    if raw.providers.is_empty() {
        return Err("providers: at least one provider is required".into());
    }
    Ok(())
}

/// One provider, checked (`at` names it in messages; `before` are the
/// providers listed before it).
fn provider(at: &str, p: RawProvider, before: &[Provider]) -> Result<Provider, ConfigError> {
    let invalid = |m: String| Err(ConfigError::Invalid(m));
    check_name(at, &p.name, before).map_err(ConfigError::Invalid)?;
    if p.match_images.is_empty() {
        return invalid(format!(
            "{at}.matchImages: at least one pattern is required"
        ));
    }
    let match_images = p
        .match_images
        .iter()
        .enumerate()
        .map(|(j, m)| Pattern::parse(m).map_err(|e| format!("{at}.matchImages[{j}]: {e}")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ConfigError::Invalid)?;
    let Some(cache) = &p.default_cache_duration else {
        return invalid(format!("{at}.defaultCacheDuration is required"));
    };
    let default_cache = crate::duration::parse(cache)
        .map_err(|e| ConfigError::Invalid(format!("{at}.defaultCacheDuration: {e}")))?;
    check_rest(at, &p).map_err(ConfigError::Invalid)?;
    Ok(Provider {
        name: p.name,
        match_images,
        default_cache,
        api_version: p.api_version,
        args: p.args,
        env: p.env.into_iter().map(|e| (e.name, e.value)).collect(),
    })
}

/// A provider's name: a file name in the plugin directory, used once.
fn check_name(at: &str, name: &str, before: &[Provider]) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{at}.name is required"));
    }
    if name.contains(['/', '\\']) || name == "." || name == ".." {
        return Err(format!(
            "{at}.name {name:?} must be a file name in the plugin directory, not a path"
        ));
    }
    if before.iter().any(|o| o.name == name) {
        return Err(format!("{at}.name {name:?} is used twice"));
    }
    Ok(())
}

/// A provider's protocol version, token attributes and environment.
fn check_rest(at: &str, p: &RawProvider) -> Result<(), String> {
    if !PLUGIN_VERSIONS.contains(&p.api_version.as_str()) {
        return Err(format!(
            "{at}.apiVersion must be one of {}, got {:?}",
            PLUGIN_VERSIONS.join(", "),
            p.api_version
        ));
    }
    if p.token_attributes.is_some() {
        return Err(format!(
            "{at}.tokenAttributes: service-account tokens for plugins are not supported by nodeimage (its pulls belong to no pod)"
        ));
    }
    if let Some(e) = p
        .env
        .iter()
        .find(|e| e.name.is_empty() || e.name.contains('='))
    {
        return Err(format!("{at}.env: invalid variable name {:?}", e.name));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: ecr-credential-provider
    matchImages:
      - "*.dkr.ecr.*.amazonaws.com"
      - "*.dkr.ecr.*.amazonaws.com.cn"
    defaultCacheDuration: "12h"
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    args: [get-credentials]
    env:
      - name: AWS_PROFILE
        value: temp
  - name: local
    matchImages: ["127.0.0.1:5001"]
    defaultCacheDuration: 0s
    apiVersion: credentialprovider.kubelet.k8s.io/v1beta1
"#;

    #[test]
    fn reads_kubelets_file() {
        let p = parse(GOOD).expect("valid");
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].name, "ecr-credential-provider");
        assert_eq!(p[0].default_cache, Duration::from_secs(12 * 3600));
        assert_eq!(p[0].args, vec!["get-credentials"]);
        assert_eq!(
            p[0].env,
            vec![("AWS_PROFILE".to_string(), "temp".to_string())]
        );
        assert!(p[0].match_images[0].matches("1.dkr.ecr.eu-west-1.amazonaws.com/app"));
        assert_eq!(p[1].default_cache, Duration::ZERO);
        // JSON is YAML too.
        let json = r#"{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[{"name":"p","matchImages":["r.io"],"defaultCacheDuration":"1m","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]}"#;
        assert_eq!(parse(json).expect("json").len(), 1);
    }

    #[test]
    fn refuses_what_kubelet_refuses_with_the_field_named() {
        let one = |provider: &str| {
            format!(
                "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - {provider}\n"
            )
        };
        let base = "apiVersion: credentialprovider.kubelet.k8s.io/v1, defaultCacheDuration: 1m";
        let table = [
            ("apiVersion: v1\nkind: Pod\n".to_string(), "kind must be CredentialProviderConfig"),
            (
                "apiVersion: kubelet.config.k8s.io/v2\nkind: CredentialProviderConfig\nproviders: []\n".to_string(),
                "apiVersion must be one of",
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n".to_string(),
                "at least one provider",
            ),
            (one(&format!("{{matchImages: [r.io], {base}}}")), "providers[0].name is required"),
            (one(&format!("{{name: ../p, matchImages: [r.io], {base}}}")), "not a path"),
            (one(&format!("{{name: p, {base}}}")), "providers[0].matchImages: at least one"),
            (one(&format!("{{name: p, matchImages: ['r.io/*'], {base}}}")), "providers[0].matchImages[0]"),
            (
                one("{name: p, matchImages: [r.io], apiVersion: credentialprovider.kubelet.k8s.io/v1}"),
                "defaultCacheDuration is required",
            ),
            (
                one("{name: p, matchImages: [r.io], apiVersion: credentialprovider.kubelet.k8s.io/v1, defaultCacheDuration: soon}"),
                "providers[0].defaultCacheDuration",
            ),
            (
                one("{name: p, matchImages: [r.io], apiVersion: example.com/v1, defaultCacheDuration: 1m}"),
                "providers[0].apiVersion must be one of",
            ),
            (
                one(&format!("{{name: p, matchImages: [r.io], {base}, tokenAttributes: {{serviceAccountTokenAudience: x}}}}")),
                "tokenAttributes",
            ),
            (
                one(&format!("{{name: p, matchImages: [r.io], {base}, env: [{{name: 'A=B'}}]}}")),
                "invalid variable name",
            ),
            (
                format!(
                    "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - {{name: p, matchImages: [r.io], {base}}}\n  - {{name: p, matchImages: [r.io], {base}}}\n"
                ),
                "providers[1].name \"p\" is used twice",
            ),
            ("providers: [".to_string(), "credential provider config"),
        ];
        for (text, want) in table {
            let e = parse(&text).expect_err(want).to_string();
            assert!(e.contains(want), "{want:?} not in {e:?} for:\n{text}");
        }
    }
}
