//! A job's P2P settings: its annotations (`nodeimage_api::p2p`) over the
//! chart's default agent (`--p2p-agent`). Pure.

use chrono::TimeDelta;
use nodeimage_api::p2p as names;
use std::collections::BTreeMap;

/// How long a node waits for its agent when the job does not say.
pub const DEFAULT_AGENT_WAIT_SECONDS: i64 = 600;
/// How long a seed pulls before another node of its domain seeds too.
pub const DEFAULT_SEED_DEADLINE_SECONDS: i64 = 600;
/// Most seeds per domain a job may ask for.
pub const MAX_SEEDS: usize = 1_000;
/// Largest fan-out factor a job may ask for.
pub const MAX_FAN_OUT: usize = 1_000;

/// The Pods that are a node's P2P agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentRef {
    /// The Pods a DaemonSet controls.
    DaemonSet {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The Pods of a namespace whose labels carry every pair.
    Pods {
        /// Their namespace.
        namespace: String,
        /// Labels a Pod must carry (`key=value`, comma separated).
        labels: BTreeMap<String, String>,
    },
}

impl AgentRef {
    /// Reads `daemonset:NS/NAME`, `pods:NS/k=v[,k=v]` or `none` (no agent).
    pub fn parse(s: &str) -> Result<Option<Self>, String> {
        let s = s.trim();
        if s == "none" {
            return Ok(None);
        }
        let bad = || {
            format!(
                "{s:?} is not daemonset:NAMESPACE/NAME, pods:NAMESPACE/KEY=VALUE[,KEY=VALUE] or none"
            )
        };
        let (form, rest) = s.split_once(':').ok_or_else(bad)?;
        let (namespace, what) = rest.split_once('/').ok_or_else(bad)?;
        if !is_dns_label(namespace) {
            return Err(format!("{s:?}: namespace {namespace:?} is not a DNS label"));
        }
        let namespace = namespace.to_string();
        match form {
            "daemonset" if is_dns_subdomain(what) => Ok(Some(AgentRef::DaemonSet {
                namespace,
                name: what.to_string(),
            })),
            "daemonset" => Err(format!("{s:?}: {what:?} is not a DaemonSet name")),
            "pods" => Ok(Some(AgentRef::Pods {
                namespace,
                labels: equality_labels(what).map_err(|e| format!("{s:?}: {e}"))?,
            })),
            _ => Err(bad()),
        }
    }

    /// The namespace its Pods are in.
    pub fn namespace(&self) -> &str {
        match self {
            AgentRef::DaemonSet { namespace, .. } | AgentRef::Pods { namespace, .. } => namespace,
        }
    }

    /// How messages name it.
    pub fn describe(&self) -> String {
        match self {
            AgentRef::DaemonSet { namespace, name } => format!("DaemonSet {namespace}/{name}"),
            AgentRef::Pods { namespace, labels } => {
                let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("Pods {namespace}/{}", l.join(","))
            }
        }
    }
}

/// What a node whose agent is not Ready in time does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// Pulls from the registry.
    Direct,
    /// Fails, with the reason.
    Skip,
}

/// The agent gate's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentGate {
    /// The agent.
    pub agent: AgentRef,
    /// How long a node waits for it.
    pub wait: TimeDelta,
    /// What a node does after that.
    pub missing: Missing,
}

/// The waves' settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waves {
    /// Seed nodes per domain.
    pub seeds: usize,
    /// Each holder lets `fan_out - 1` more pull at once.
    pub fan_out: usize,
    /// The Node label of a node's domain.
    pub topology_key: String,
    /// How long a seed pulls before another seeds too.
    pub seed_deadline: TimeDelta,
}

/// A job's P2P settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// The agent gate, if the job (or the chart) names an agent.
    pub agent: Option<AgentGate>,
    /// The waves, if the job asks for seeds.
    pub waves: Option<Waves>,
}

/// Reads a job's settings; `default_agent` is the chart's (already checked
/// at start). An invalid annotation is an error that names it.
pub fn read(
    annotations: &BTreeMap<String, String>,
    default_agent: Option<&str>,
) -> Result<Settings, String> {
    let get = |k: &str| annotations.get(k).map(|v| v.trim());
    let named = |k: &str, e: String| format!("annotation {k}: {e}");
    let agent = match get(names::AGENT).or(default_agent) {
        Some(v) => AgentRef::parse(v).map_err(|e| named(names::AGENT, e))?,
        None => None,
    };
    let agent = match agent {
        Some(agent) => Some(AgentGate {
            agent,
            wait: duration(get(names::AGENT_WAIT), DEFAULT_AGENT_WAIT_SECONDS)
                .map_err(|e| named(names::AGENT_WAIT, e))?,
            missing: match get(names::AGENT_MISSING) {
                None | Some("direct") => Missing::Direct,
                Some("skip") => Missing::Skip,
                Some(v) => {
                    return Err(named(
                        names::AGENT_MISSING,
                        format!("{v:?} is not direct or skip"),
                    ));
                }
            },
        }),
        None => None,
    };
    let waves = match get(names::SEEDS) {
        None => None,
        Some(v) => Some(Waves {
            seeds: count(v, 1, MAX_SEEDS).map_err(|e| named(names::SEEDS, e))?,
            fan_out: match get(names::FAN_OUT) {
                None => 2,
                Some(f) => count(f, 2, MAX_FAN_OUT).map_err(|e| {
                    named(names::FAN_OUT, format!("{e} (0 or 1 would never widen)"))
                })?,
            },
            topology_key: match get(names::TOPOLOGY_KEY).filter(|k| !k.is_empty()) {
                None => names::DEFAULT_TOPOLOGY_KEY.to_string(),
                Some(k) if is_label_key(k) => k.to_string(),
                Some(k) => {
                    return Err(named(
                        names::TOPOLOGY_KEY,
                        format!("{k:?} is not a Node label key"),
                    ));
                }
            },
            seed_deadline: duration(get(names::SEED_DEADLINE), DEFAULT_SEED_DEADLINE_SECONDS)
                .map_err(|e| named(names::SEED_DEADLINE, e))?,
        }),
    };
    Ok(Settings { agent, waves })
}

/// A whole number within `min..=max`.
fn count(v: &str, min: usize, max: usize) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("{v:?} is not a whole number from {min} to {max}")),
    }
}

/// A duration (`90s`, `10m`, `1h`), positive and at most a week; absent: `default` seconds.
fn duration(v: Option<&str>, default: i64) -> Result<TimeDelta, String> {
    let Some(v) = v else {
        return Ok(TimeDelta::seconds(default));
    };
    let d = nodeimage_ops::duration::parse(v).map_err(|e| format!("{v:?}: {e}"))?;
    match TimeDelta::from_std(d) {
        Ok(t) if t > TimeDelta::zero() && t <= TimeDelta::days(7) => Ok(t),
        _ => Err(format!("{v:?} is not between 1s and 7 days")),
    }
}

/// `k=v[,k=v]`: label pairs, each key and value a valid label part.
fn equality_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for pair in s.split(',').map(str::trim) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not KEY=VALUE"))?;
        let (k, v) = (k.trim(), v.trim());
        if !is_label_key(k) || !is_label_value(v) {
            return Err(format!("{pair:?} is not a valid label KEY=VALUE"));
        }
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

fn is_label_value(s: &str) -> bool {
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.chars().next().is_none_or(|c| c.is_ascii_alphanumeric())
        && s.chars().last().is_none_or(|c| c.is_ascii_alphanumeric())
}

fn is_label_key(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && is_label_value(name)
}
