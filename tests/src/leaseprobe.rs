//! The probe client of `ni-sim probe` (issue 50 part 3, docs/scale.md): it
//! renews Leases the way kubelets renew theirs, under an identity that API
//! Priority and Fairness classifies as an ordinary client would be, and
//! times each renewal, so a benchmark can tell how long an ordinary
//! client's mutating calls wait while a fleet-wide pre-pull runs.
//!
//! Each Lease is renewed every `interval` (a kubelet's default is 10 s: a
//! quarter of its 40 s lease duration), the Leases spread evenly over the
//! interval. A renewal is one UPDATE (PUT) of the Lease last returned by
//! the API server with a new `renewTime`, as kubelet's lease controller
//! does; when the UPDATE fails the probe reads the Lease again (a GET, not
//! timed) and renews it at the next tick. The identity is impersonated with
//! the kubeconfig's credentials (which must be allowed to impersonate):
//! `user` may hold `{name}`, replaced by each Lease's name, so that a Lease
//! named after a node is renewed as that node (`system:node:{name}`).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};

/// What the probe does and as whom.
pub struct Probe {
    /// Kubeconfig whose credentials impersonate `user`.
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the Leases.
    pub namespace: String,
    /// Leases named `{prefix}-00001` ….
    pub prefix: String,
    /// How many Leases.
    pub leases: usize,
    /// Time between two renewals of one Lease.
    pub interval: Duration,
    /// Stop after this long (else at SIGTERM or SIGINT).
    pub duration: Option<Duration>,
    /// User to impersonate (`{name}`: the Lease's name); none: the
    /// kubeconfig's own identity.
    pub user: Option<String>,
    /// Groups to impersonate with the user.
    pub groups: Vec<String>,
    /// Where the result line is also written (replaced).
    pub stats_file: Option<PathBuf>,
}

/// Why the probe could not run.
#[derive(Debug)]
pub enum ProbeError {
    /// No client could be made.
    Client(nodeimage_ops::client::ClientError),
    /// A Lease could not be read or created before the renewals began.
    Setup(String, kube::Error),
    /// The signal handlers could not be installed.
    Signal(std::io::Error),
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Client(e) => write!(f, "client: {e}"),
            ProbeError::Setup(name, e) => write!(f, "lease {name}: {e}"),
            ProbeError::Signal(e) => write!(f, "signal handler: {e}"),
        }
    }
}

impl std::error::Error for ProbeError {}

/// What the renewals measured so far.
#[derive(Default)]
struct Tally {
    /// Time to the answer of every UPDATE, in microseconds.
    micros: Vec<u64>,
    /// Failed UPDATEs by HTTP code (`error`: no answer).
    errors: BTreeMap<String, u64>,
    /// GETs after a failed UPDATE.
    gets: u64,
}

type Shared = Arc<Mutex<Tally>>;

fn lock(t: &Shared) -> std::sync::MutexGuard<'_, Tally> {
    t.lock().unwrap_or_else(PoisonError::into_inner)
}

fn micro_now() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// One client per distinct impersonated user.
async fn clients(p: &Probe, names: &[String]) -> Result<Vec<kube::Client>, ProbeError> {
    let base = nodeimage_ops::client::load(p.kubeconfig.as_ref())
        .await
        .map_err(ProbeError::Client)?;
    let mut by_user: HashMap<Option<String>, kube::Client> = HashMap::new();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let user = p.user.as_ref().map(|u| u.replace("{name}", name));
        if let Some(c) = by_user.get(&user) {
            out.push(c.clone());
            continue;
        }
        let mut config = base.clone();
        if let Some(u) = &user {
            config.auth_info.impersonate = Some(u.clone());
            config.auth_info.impersonate_groups = Some(p.groups.clone());
        }
        let c = nodeimage_ops::client::connect_with(config).map_err(ProbeError::Client)?;
        by_user.insert(user, c.clone());
        out.push(c);
    }
    Ok(out)
}

/// The Lease, read or created as its holder would.
async fn ensure(api: &Api<Lease>, name: &str) -> Result<Lease, ProbeError> {
    let setup = |e| ProbeError::Setup(name.to_string(), e);
    if let Some(l) = api.get_opt(name).await.map_err(setup)? {
        return Ok(l);
    }
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.to_string()),
            lease_duration_seconds: Some(40),
            renew_time: Some(micro_now()),
            ..Default::default()
        }),
    };
    api.create(&PostParams::default(), &lease)
        .await
        .map_err(setup)
}

/// Renews one Lease every `interval`, first after `offset`, forever.
async fn renew(api: Api<Lease>, mut lease: Lease, offset: Duration, interval: Duration, t: Shared) {
    let name = lease.metadata.name.clone().unwrap_or_default();
    tokio::time::sleep(offset).await;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Some(spec) = lease.spec.as_mut() {
            spec.renew_time = Some(micro_now());
        }
        let start = Instant::now();
        let res = api.replace(&name, &PostParams::default(), &lease).await;
        let took = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        lock(&t).micros.push(took);
        match res {
            Ok(l) => lease = l,
            Err(e) => {
                let code = match &e {
                    kube::Error::Api(ae) => ae.code.to_string(),
                    _ => "error".to_string(),
                };
                *lock(&t).errors.entry(code).or_default() += 1;
                lock(&t).gets += 1;
                if let Ok(l) = api.get(&name).await {
                    lease = l;
                }
            }
        }
    }
}

/// The value at quantile `q` of sorted values (nearest rank), in ms.
fn quantile_ms(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

/// The result line (JSON).
fn line(p: &Probe, t: &Tally, started: Instant) -> String {
    let mut v = t.micros.clone();
    v.sort_unstable();
    let over = v.iter().filter(|&&m| m > 1_000_000).count();
    serde_json::json!({
        "user": p.user,
        "groups": p.groups,
        "namespace": p.namespace,
        "leases": p.leases,
        "intervalMs": p.interval.as_millis() as u64,
        "seconds": (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
        "mutating": {
            "count": v.len(),
            "p50Ms": quantile_ms(&v, 0.50),
            "p99Ms": quantile_ms(&v, 0.99),
            "maxMs": quantile_ms(&v, 1.0),
            "over1s": over,
        },
        "errors": t.errors,
        "getsAfterErrors": t.gets,
    })
    .to_string()
}

/// Runs the probe until its duration has passed or SIGTERM/SIGINT, then
/// prints the result line (and writes it to `stats_file`).
pub async fn run(p: Probe) -> Result<(), ProbeError> {
    let names: Vec<String> = (1..=p.leases)
        .map(|i| format!("{}-{i:05}", p.prefix))
        .collect();
    let clients = clients(&p, &names).await?;
    let tally = Shared::default();
    let mut tasks = Vec::with_capacity(names.len());
    for (i, (name, client)) in names.iter().zip(clients).enumerate() {
        let api: Api<Lease> = Api::namespaced(client, &p.namespace);
        let lease = ensure(&api, name).await?;
        let offset = p.interval.mul_f64(i as f64 / p.leases.max(1) as f64);
        tasks.push(tokio::spawn(renew(
            api,
            lease,
            offset,
            p.interval,
            tally.clone(),
        )));
    }
    let started = Instant::now();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(ProbeError::Signal)?;
    let limit = async {
        match p.duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = limit => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    for t in &tasks {
        t.abort();
    }
    let out = line(&p, &lock(&tally), started);
    println!("{out}");
    if let Some(f) = &p.stats_file {
        let tmp = f.with_extension("tmp");
        if std::fs::write(&tmp, format!("{out}\n")).is_ok() {
            let _ = std::fs::rename(&tmp, f);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::quantile_ms;

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(quantile_ms(&v, 0.5), 50.0);
        assert_eq!(quantile_ms(&v, 0.99), 99.0);
        assert_eq!(quantile_ms(&v, 1.0), 100.0);
        assert_eq!(quantile_ms(&[], 0.99), 0.0);
        assert_eq!(quantile_ms(&[7000], 0.99), 7.0);
    }
}
