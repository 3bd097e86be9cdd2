//! The registry pacing gauges, read at scrape time through the callback the
//! pacing module hands over in `runtime::readers` (the metrics sit below it
//! and cannot name it).

use crate::runtime::readers::RegistryGauge;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// Labels of a per-registry gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RegistryLabels {
    registry: String,
}

/// Encodes the four per-registry gauges.
pub fn encode(rows: &[RegistryGauge], encoder: &mut DescriptorEncoder) -> std::fmt::Result {
    let gauges: [(&str, &str, fn(&RegistryGauge) -> Option<usize>); 4] = [
        (
            "nodeimage_registry_pulls_in_flight",
            "Nodes pulling from each registry now: tag entries on it not finished (hand-written ones too), and entries the controller is writing",
            |g| Some(g.in_flight),
        ),
        (
            "nodeimage_registry_pull_limit",
            "Most nodes pulling from each limited registry at once (--registry-max-pulls, --registry-max-pulls-for)",
            |g| g.limit,
        ),
        (
            "nodeimage_registry_rate_limited",
            "1 while some tag waits because the registry answered 429 (no new pulls start from it), else 0",
            |g| Some(usize::from(g.rate_limited)),
        ),
        (
            "nodeimage_registry_jobs_waiting",
            "Jobs waiting for a free slot on each limited registry",
            |g| g.limit.map(|_| g.jobs_waiting),
        ),
    ];
    for (name, help, value) in gauges {
        let family: Family<RegistryLabels, Gauge> = Family::default();
        for g in rows {
            if let Some(v) = value(g) {
                let labels = RegistryLabels {
                    registry: g.registry.clone(),
                };
                family
                    .get_or_create(&labels)
                    .set(i64::try_from(v).unwrap_or(i64::MAX));
            }
        }
        family.encode(encoder.encode_descriptor(name, help, None, family.metric_type())?)?;
    }
    Ok(())
}
