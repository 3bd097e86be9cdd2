//! Node credentials from kubelet's credential-provider exec plugins (the
//! `CredentialProviderConfig` file and plugin directory kubelet is given):
//! for an image that a configured plugin matches, the daemon runs the plugin
//! as kubelet would and pulls with what it answers. These are node
//! credentials, like kubelet's: any tag on the node may use them, after the
//! tag's own pull secrets (kubelet's order).

pub mod config;
pub mod pattern;
pub mod response;

use config::Provider;
use nodeimage_api::credentials::Credential;
use response::Cache;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

/// Longest a plugin may run before it is killed and its image goes on without it.
const PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);
/// Most bytes of a plugin's stderr quoted in a failure message.
const STDERR_QUOTE: usize = 300;

/// Why the plugins cannot be set up; the daemon does not start with them.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The config file cannot be read.
    #[error("reading credential provider config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The config is invalid.
    #[error("{path}: {source}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: config::ConfigError,
    },
    /// A plugin named in the config is not in the directory.
    #[error("credential provider {name}: no executable {path}")]
    Missing {
        /// The provider.
        name: String,
        /// Where it was looked for.
        path: PathBuf,
    },
}

/// The configured plugins and their cached answers.
pub struct Providers {
    dir: PathBuf,
    list: Vec<Provider>,
    cache: Mutex<Cache>,
}

/// Credentials found for one image, and why any plugin gave none.
#[derive(Debug, Default)]
pub struct Found {
    /// To try, in order.
    pub creds: Vec<Credential>,
    /// One line per plugin that failed (never a secret).
    pub notes: Vec<String>,
}

impl Providers {
    /// The plugins of kubelet's two flags, `--image-credential-provider-config`
    /// and `--image-credential-provider-bin-dir` (None unless both are
    /// given), loaded and logged once at start by whichever binary has them.
    pub fn from_flags(
        (config, dir): (Option<&Path>, Option<&Path>),
    ) -> Result<Option<std::sync::Arc<Providers>>, LoadError> {
        let (Some(config), Some(dir)) = (config, dir) else {
            return Ok(None);
        };
        let p = Providers::load(config, dir)?;
        tracing::info!(config = %config.display(), dir = %dir.display(), providers = ?p.names(), "credential providers configured");
        Ok(Some(std::sync::Arc::new(p)))
    }

    /// Reads `config` and checks that every plugin is in `dir`, as kubelet
    /// does at start.
    pub fn load(config: &Path, dir: &Path) -> Result<Providers, LoadError> {
        let text = std::fs::read_to_string(config).map_err(|source| LoadError::Read {
            path: config.to_path_buf(),
            source,
        })?;
        let list = config::parse(&text).map_err(|source| LoadError::Config {
            path: config.to_path_buf(),
            source,
        })?;
        for p in &list {
            let path = dir.join(&p.name);
            if !path.is_file() {
                return Err(LoadError::Missing {
                    name: p.name.clone(),
                    path,
                });
            }
        }
        Ok(Providers {
            dir: dir.to_path_buf(),
            list,
            cache: Mutex::default(),
        })
    }

    /// Names of the plugins, for the start-up log.
    pub fn names(&self) -> Vec<&str> {
        self.list.iter().map(|p| p.name.as_str()).collect()
    }

    /// Credentials for image `name` (`host[:port]/path`) from every plugin
    /// that matches it, in the config's order; `reference` is what the
    /// plugin is told is being pulled.
    pub async fn credentials(&self, name: &str, reference: &str) -> Found {
        let mut found = Found::default();
        for p in self
            .list
            .iter()
            .filter(|p| p.match_images.iter().any(|m| m.matches(name)))
        {
            let cached = self
                .lock()
                .get(&p.name, name, Instant::now())
                .map(|auth| response::for_image(auth, name));
            if let Some(creds) = cached {
                found.creds.extend(creds);
                continue;
            }
            match self.ask(p, reference).await {
                Ok(answer) => {
                    let ttl = answer.cache.unwrap_or(p.default_cache);
                    self.lock().put(&p.name, name, &answer, ttl, Instant::now());
                    let creds = response::for_image(&answer.auth, name);
                    tracing::info!(provider = %p.name, image = %name, credentials = creds.len(), "credential provider answered");
                    found.creds.extend(creds);
                }
                Err(e) => {
                    tracing::warn!(provider = %p.name, image = %name, error = %e, "credential provider failed");
                    found
                        .notes
                        .push(format!("credential provider {}: {e}", p.name));
                }
            }
        }
        found
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs the plugin with the request on stdin; its checked answer.
    async fn ask(&self, p: &Provider, reference: &str) -> Result<response::Answer, String> {
        let request = serde_json::json!({
            "apiVersion": p.api_version,
            "kind": "CredentialProviderRequest",
            "image": reference,
        })
        .to_string();
        let mut child = tokio::process::Command::new(self.dir.join(&p.name))
            .args(&p.args)
            .envs(p.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run it: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(request.as_bytes())
                .await
                .map_err(|e| format!("writing its request: {e}"))?;
        }
        let out = tokio::time::timeout(PLUGIN_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| format!("no answer within {}s", PLUGIN_TIMEOUT.as_secs()))?
            .map_err(|e| format!("waiting for it: {e}"))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let quote: String = stderr.trim().chars().take(STDERR_QUOTE).collect();
            return Err(format!("it exited with {}: {quote}", out.status));
        }
        response::parse(p, &out.stdout)
    }
}
