//! The kube client: from `--kubeconfig`, `KUBECONFIG`, or the in-cluster config.

use std::path::PathBuf;

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file could not be read or used.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// Path of the kubeconfig.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither a kubeconfig nor an in-cluster config was usable.
    #[error("no cluster configuration: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    /// The configuration was found but a client could not be built from it.
    #[error("building the client: {0}")]
    Build(#[from] kube::Error),
}

/// Builds a client, preferring an explicit kubeconfig path.
pub async fn connect(kubeconfig: Option<&PathBuf>) -> Result<kube::Client, ClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                ClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                }
            })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        None => kube::Config::infer().await?,
    };
    // Every request is counted and timed (`nodeimage_api_*`).
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&crate::apimetrics::MetricsLayer)
        .build())
}
