//! The kube client: from `--kubeconfig`, `KUBECONFIG`, or the in-cluster config.

use hyper_util::client::legacy::connect::HttpConnector;
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use std::path::PathBuf;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

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
    /// The kubeconfig (or HTTPS_PROXY) names a proxy, which this build
    /// cannot use; connecting around it would surprise more than failing.
    #[error(
        "proxy {0} from the kubeconfig or HTTPS_PROXY: proxies are not supported; unset it or set NO_PROXY"
    )]
    Proxy(String),
}

/// Builds a client, preferring an explicit kubeconfig path.
pub async fn connect(kubeconfig: Option<&PathBuf>) -> Result<kube::Client, ClientError> {
    connect_with(load(kubeconfig).await?)
}

/// The configuration [`connect`] uses: an explicit kubeconfig path, else
/// `KUBECONFIG`, `~/.kube/config` or the in-cluster config.
pub async fn load(kubeconfig: Option<&PathBuf>) -> Result<kube::Config, ClientError> {
    Ok(match kubeconfig {
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
    })
}

/// Builds a client from a configuration (one changed by the caller, e.g.
/// to impersonate a user), as [`connect`] does.
pub fn connect_with(config: kube::Config) -> Result<kube::Client, ClientError> {
    if let Some(proxy) = &config.proxy_url {
        return Err(ClientError::Proxy(proxy.to_string()));
    }
    // kube's own stack (`ClientBuilder::try_from`), built here for one
    // socket option: kube leaves Nagle's algorithm on (kube-rs/kube#2056),
    // so a small request sent while an earlier one is unacknowledged waits
    // for the API server's delayed ACK, up to 40 ms (a daemon's Succeeded
    // status write sent beside its event did, in tests/bench/pull.sh). Go
    // clients, kubelet and client-go among them, send with TCP_NODELAY.
    // Left out of kube's stack: its tracing layer (callers log their
    // failures; `nodeimage_api_*` counts them) and the expiry of an exec
    // plugin's client certificate, which nothing here reads.
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client =
        hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    let retry = config
        .default_retry
        .then(|| RetryLayer::new(RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http_client);
    // Every request is counted and timed (`nodeimage_api_*`).
    Ok(
        kube::client::ClientBuilder::new(service, config.default_namespace.clone())
            .with_layer(&crate::apimetrics::MetricsLayer)
            .build(),
    )
}
