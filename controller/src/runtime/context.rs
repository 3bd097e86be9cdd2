//! What every controller in this binary shares: the client, the event
//! recorder and the settings from the command line.

use crate::flags::Flags;
use crate::runtime::policy::Namespaces;
use chrono::TimeDelta;
use kube::runtime::events::{Recorder, Reporter};

/// Name under which this binary reports events.
pub const REPORTER: &str = "nodeimage-controller";

/// Why the shared context could not be built from the flags.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// `--response-timeout` does not fit a signed 64-bit count of milliseconds.
    #[error("--response-timeout {0:?} is out of range")]
    ResponseTimeout(std::time::Duration),
    /// The credential-provider config or a plugin it names is unusable.
    #[error(transparent)]
    CredentialProviders(#[from] nodeimage_ops::credproviders::LoadError),
    /// `--upgrade-images` names something that is not a repository or prefix.
    #[error("{0}")]
    UpgradeImages(String),
}

/// Client, event reporter and settings, cloned into every controller.
#[derive(Clone)]
pub struct Context {
    /// The API client.
    pub client: kube::Client,
    /// Who events are reported by.
    pub reporter: Reporter,
    /// How long a node may take to report on a new tag entry.
    pub response_timeout: TimeDelta,
    /// Namespace of the pull-secret copies the daemons read.
    pub secrets_namespace: String,
    /// KubeEdge kinds run only on edge nodes.
    pub kubeedge_edge_only: bool,
    /// What the platform team allows tenants' jobs.
    pub policy: crate::runtime::policy::Policy,
    /// Reconcile metrics.
    pub metrics: crate::runtime::metrics::Metrics,
    /// Registries whose followed tags are looked up over plain HTTP.
    pub follow_tag_http_registries: Vec<String>,
    /// Most nodes a workload's pre-download adds beyond those of its Pods.
    pub predownload_max_extra_nodes: u32,
    /// Namespace of Eraser's exclusion lists, where the controller keeps the
    /// list of pinned images (None: not kept).
    pub eraser_namespace: Option<String>,
    /// References Eraser's list always names (`--eraser-also-exclude`; the
    /// controller checked them at start, `eraserlist::plan::always`).
    pub eraser_also_exclude: Vec<String>,
    /// The chart's P2P agent for jobs that name none (`engine::p2p`;
    /// checked by `lib::run` before the context is made).
    pub p2p_agent: Option<String>,
    /// kubelet's credential-provider plugins for followed-tag lookups.
    pub follow_tag_providers: Option<std::sync::Arc<nodeimage_ops::credproviders::Providers>>,
}

impl Context {
    /// Builds the context from the client and the parsed flags.
    pub fn new(client: kube::Client, flags: &Flags) -> Result<Self, ContextError> {
        let response_timeout = TimeDelta::from_std(flags.response_timeout)
            .map_err(|_| ContextError::ResponseTimeout(flags.response_timeout))?;
        let reporter = Reporter {
            controller: REPORTER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Ok(Self {
            reporter,
            client,
            response_timeout,
            secrets_namespace: flags.secrets_namespace.clone(),
            kubeedge_edge_only: !flags.kubeedge_all_nodes,
            policy: crate::runtime::policy::Policy {
                gate_namespaces: Namespaces::from_list(&flags.startup_gate_namespaces),
                image_secret_namespaces: Namespaces::from_list(&flags.image_secret_namespaces),
                predownload_namespaces: Namespaces::from_list(&flags.predownload_namespaces),
                upgrade_images: crate::runtime::policy::UpgradeImages::from_list(
                    &flags.upgrade_images,
                )
                .map_err(ContextError::UpgradeImages)?,
            },
            metrics: crate::runtime::metrics::Metrics::default(),
            follow_tag_http_registries: flags.follow_tag_http_registries.clone(),
            predownload_max_extra_nodes: flags.predownload_max_extra_nodes,
            eraser_namespace: Some(flags.eraser_namespace.trim().to_string())
                .filter(|n| !n.is_empty()),
            eraser_also_exclude: flags
                .eraser_also_exclude
                .iter()
                .map(|r| r.trim().to_string())
                .filter(|r| !r.is_empty())
                .collect(),
            p2p_agent: Some(flags.p2p_agent.trim().to_string())
                .filter(|a| !a.is_empty() && a != "none"),
            follow_tag_providers: nodeimage_ops::credproviders::Providers::from_flags((
                flags.image_credential_provider_config.as_deref(),
                flags.image_credential_provider_bin_dir.as_deref(),
            ))?,
        })
    }

    /// A recorder for one event. kube's `Recorder` folds events with the same
    /// object, reason and action into one series and keeps only the first
    /// note; the failures published here each carry their own message and
    /// happen once per tag version, so each gets a fresh recorder.
    pub fn recorder(&self) -> Recorder {
        Recorder::new(self.client.clone(), self.reporter.clone())
    }
}
