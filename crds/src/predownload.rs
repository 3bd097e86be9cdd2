//! Pre-download for native workloads: the annotations a Deployment,
//! StatefulSet or DaemonSet carries to have the images of its new pod
//! template pulled onto its nodes, and the marks nodeimage puts on the
//! ImagePullJobs it makes for them. Names only: the rules are the
//! controller's (`controllers::predownload`).

/// On a Deployment, StatefulSet or DaemonSet: `"true"` turns pre-download
/// on (off by default, so no workload changes behaviour on install).
pub const ENABLED: &str = "nodeimage.dev/image-predownload";

/// OpenKruise's name: how many nodes pull at once (default 1, as upstream).
pub const PARALLELISM: &str = "apps.kruise.io/image-predownload-parallelism";

/// OpenKruise's name: seconds one pull may take (default 300, as upstream).
pub const TIMEOUT_SECONDS: &str = "apps.kruise.io/image-predownload-timeout-seconds";

/// OpenKruise's name: Pods of the new template that must be ready before
/// pre-download starts, a number or a percentage of the desired Pods
/// (default 0: at once).
pub const MIN_UPDATED_READY_PODS: &str = "apps.kruise.io/image-predownload-min-updated-ready-pods";

/// On a pre-download ImagePullJob: the UID of the workload it serves (a
/// label, so the controller lists only its own jobs).
pub const WORKLOAD_UID_LABEL: &str = "nodeimage.dev/predownload-for";

/// On a pre-download ImagePullJob: `Kind/name` of the workload it serves,
/// for people reading `kubectl get imagepulljob -o yaml`.
pub const WORKLOAD_ANNOTATION: &str = "nodeimage.dev/predownload-workload";

/// On a pre-download ImagePullJob: where its workload's pod template can be
/// scheduled (`nodeSelector`, required node affinity, tolerations) and how
/// many nodes beyond those of its Pods to pull onto, as JSON; the job
/// selects those nodes too, so new Pods find the image wherever they land.
pub const PLACEMENT_ANNOTATION: &str = "nodeimage.dev/predownload-placement";
