//! Node checks run before pulling (KubeEdge's checkItems): disk usage of the
//! filesystem that holds images, CPU usage and memory usage, each failing
//! above its threshold.

use crate::runtime::ContainerRuntime;
use std::time::Duration;

/// Usage limits, in percent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Disk usage limit of the image filesystem.
    pub disk: f64,
    /// CPU usage limit.
    pub cpu: f64,
    /// Memory usage limit.
    pub mem: f64,
}

/// A failed check: which, and why (e.g. `check disk failed: 91% used > 80%`;
/// every reason starts with the contract's `CHECK_FAILED`, which is how the
/// job controllers tell a refused check from a failed pull).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckFailure {
    /// The check item.
    pub item: String,
    /// The reason, for status.
    pub reason: String,
}

/// Runs the named checks in order; the first failure stops them.
pub async fn run(
    items: &[String],
    runtime: &impl ContainerRuntime,
    t: &Thresholds,
) -> Result<(), CheckFailure> {
    for item in items {
        let fail = |reason: String| CheckFailure {
            item: item.clone(),
            reason,
        };
        let (used, limit) = match item.as_str() {
            "disk" => (disk_usage(runtime).await.map_err(fail)?, t.disk),
            "cpu" => (cpu_usage().await.map_err(fail)?, t.cpu),
            "mem" => (mem_usage().map_err(fail)?, t.mem),
            other => {
                return Err(fail(format!(
                    "check {other} is not supported (use disk, cpu or mem)"
                )));
            }
        };
        verdict(item, used, limit).map_err(fail)?;
        tracing::debug!(check = %item, used, limit, "check passed");
    }
    Ok(())
}

/// Pass or fail one check.
pub fn verdict(item: &str, used: f64, limit: f64) -> Result<(), String> {
    if used > limit {
        Err(format!(
            "check {item} failed: {used:.0}% used > {limit:.0}%"
        ))
    } else {
        Ok(())
    }
}

async fn disk_usage(runtime: &impl ContainerRuntime) -> Result<f64, String> {
    let fs = runtime
        .image_fs()
        .await
        .map_err(|e| format!("check disk failed: cannot read the image filesystem: {e}"))?;
    let mount = fs
        .into_iter()
        .map(|(m, _)| m)
        .find(|m| !m.is_empty())
        .ok_or_else(|| "check disk failed: the runtime reported no image filesystem".to_string())?;
    let st = rustix::fs::statvfs(mount.as_str())
        .map_err(|e| format!("check disk failed: statvfs {mount}: {e}"))?;
    Ok(percent_used(st.f_blocks, st.f_bfree, st.f_bavail))
}

/// Size in bytes of the filesystem holding the runtime's images, when the
/// runtime names it and this process can see it.
pub async fn image_fs_capacity(runtime: &impl ContainerRuntime) -> Option<u64> {
    let fs = runtime.image_fs().await.ok()?;
    let mount = fs.into_iter().map(|(m, _)| m).find(|m| !m.is_empty())?;
    let st = rustix::fs::statvfs(mount.as_str()).ok()?;
    Some(st.f_blocks.saturating_mul(st.f_frsize))
}

/// Used share as `df` computes it: used / (used + available to users).
pub fn percent_used(blocks: u64, free: u64, avail: u64) -> f64 {
    let used = blocks.saturating_sub(free);
    let denom = used + avail;
    if denom == 0 {
        0.0
    } else {
        used as f64 * 100.0 / denom as f64
    }
}

fn cpu_times() -> Result<(u64, u64), String> {
    let stat = std::fs::read_to_string("/proc/stat")
        .map_err(|e| format!("check cpu failed: reading /proc/stat: {e}"))?;
    parse_cpu_line(stat.lines().next().unwrap_or_default())
        .ok_or_else(|| "check cpu failed: /proc/stat has no cpu line".to_string())
}

/// (idle, total) jiffies from the aggregate `cpu` line of /proc/stat.
pub fn parse_cpu_line(line: &str) -> Option<(u64, u64)> {
    let mut parts = line.split_whitespace();
    if parts.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = parts.filter_map(|p| p.parse().ok()).collect();
    if v.len() < 4 {
        return None;
    }
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    Some((idle, v.iter().sum()))
}

async fn cpu_usage() -> Result<f64, String> {
    let (i1, t1) = cpu_times()?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (i2, t2) = cpu_times()?;
    let total = t2.saturating_sub(t1);
    if total == 0 {
        return Ok(0.0);
    }
    Ok(100.0 * (total - i2.saturating_sub(i1).min(total)) as f64 / total as f64)
}

fn mem_usage() -> Result<f64, String> {
    let info = std::fs::read_to_string("/proc/meminfo")
        .map_err(|e| format!("check mem failed: reading /proc/meminfo: {e}"))?;
    parse_meminfo(&info)
        .ok_or_else(|| "check mem failed: /proc/meminfo lacks MemTotal or MemAvailable".into())
}

/// Used memory percentage from /proc/meminfo (total minus available).
pub fn parse_meminfo(info: &str) -> Option<f64> {
    let field = |name: &str| -> Option<u64> {
        info.lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let total = field("MemTotal:")?;
    let avail = field("MemAvailable:")?;
    if total == 0 {
        return None;
    }
    Some(100.0 * total.saturating_sub(avail) as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        assert!(verdict("disk", 80.0, 80.0).is_ok());
        assert_eq!(
            verdict("disk", 91.2, 80.0),
            Err("check disk failed: 91% used > 80%".to_string())
        );
    }

    #[tokio::test]
    async fn failures_read_as_checks() {
        use nodeimage_api::kruise::nodeimage::contract::{FailureCause, failure_cause};
        let runtime = crate::runtime::fake::FakeRuntime::default();
        let unsupported = run(
            &["gpu".to_string()],
            &runtime,
            &Thresholds {
                disk: 80.0,
                cpu: 80.0,
                mem: 80.0,
            },
        )
        .await
        .expect_err("gpu is no check");
        let over = verdict("mem", 99.0, 80.0).expect_err("over");
        for reason in [unsupported.reason, over] {
            assert_eq!(failure_cause(&reason), FailureCause::Check, "{reason}");
        }
    }

    #[test]
    fn parsing() {
        assert_eq!(percent_used(100, 40, 30), 60.0 * 100.0 / 90.0);
        assert_eq!(percent_used(0, 0, 0), 0.0);
        assert_eq!(
            parse_cpu_line("cpu  10 0 10 70 10 0 0 0 0 0"),
            Some((80, 100))
        );
        assert_eq!(parse_cpu_line("intr 1 2"), None);
        let mem = "MemTotal:       1000 kB\nMemFree: 100 kB\nMemAvailable:    250 kB\n";
        assert_eq!(parse_meminfo(mem), Some(75.0));
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None);
    }
}
