//! Running the upgrade tool on the node: one step at a time, its output
//! (stdout and stderr) appended to the job's log file under a header line,
//! bounded by a time limit, and summarised for the status on failure.

use super::steps;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

/// Output lines of a failed step kept for the status.
pub const TAIL_LINES: usize = 5;
/// Characters of a failed step's output kept for the status.
pub const TAIL_CHARS: usize = 400;
/// Bytes read back from the end of a step's output to find its tail.
const TAIL_READ_BYTES: u64 = 16 * 1024;

/// How one run of the tool ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ran {
    /// Exit status 0.
    pub success: bool,
    /// `exit status 1`, `killed after 300s`, or why it could not start.
    pub summary: String,
    /// The last lines of its output.
    pub tail: String,
}

impl Ran {
    /// The step's outcome for [`steps::next`]: Ok, or the summary and tail.
    pub fn outcome(&self) -> Result<(), String> {
        if self.success {
            Ok(())
        } else if self.tail.is_empty() {
            Err(self.summary.clone())
        } else {
            Err(format!("{}: {}", self.summary, self.tail))
        }
    }
}

/// Runs `prefix… tool args…` with stdin closed and stdout and stderr
/// appended to `log`; kills it after `limit`. The tool is not killed when
/// the daemon goes away (a half-run upgrade is worse than a finished one).
pub async fn run(
    prefix: &[String],
    tool: &Path,
    args: &[String],
    log: &Path,
    limit: Duration,
) -> Ran {
    let failed = |summary: String| Ran {
        success: false,
        summary,
        tail: String::new(),
    };
    let (std_file, start) = match open_log(prefix, tool, args, log).await {
        Ok(opened) => opened,
        Err(summary) => return failed(summary),
    };
    let (out, err) = match (std_file.try_clone(), std_file.try_clone()) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => {
            return failed(format!("cannot write the log {}: {e}", log.display()));
        }
    };
    let (program, rest) = match prefix.split_first() {
        Some((p, rest)) => (p.clone(), rest.to_vec()),
        None => (tool.display().to_string(), vec![]),
    };
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(&rest);
    if !prefix.is_empty() {
        cmd.arg(tool);
    }
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .kill_on_drop(false);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot start {program}: {e}")),
    };
    let (success, summary) = match tokio::time::timeout(limit, child.wait()).await {
        Ok(Ok(status)) => (status.success(), status.to_string()),
        Ok(Err(e)) => (false, format!("waiting for {program}: {e}")),
        Err(_) => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            (false, format!("killed after {}s", limit.as_secs()))
        }
    };
    let tail = read_tail(log, start).await;
    Ran {
        success,
        summary,
        tail,
    }
}

/// Opens `log` for appending and writes the command line as a header; the
/// file and the offset where the tool's output starts.
async fn open_log(
    prefix: &[String],
    tool: &Path,
    args: &[String],
    log: &Path,
) -> Result<(std::fs::File, u64), String> {
    let cannot =
        |what: &str, e: std::io::Error| format!("cannot {what} the log {}: {e}", log.display());
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .await
        .map_err(|e| cannot("open", e))?;
    let shown: Vec<String> = prefix
        .iter()
        .cloned()
        .chain(std::iter::once(tool.display().to_string()))
        .chain(args.iter().cloned())
        .collect();
    let header = format!(
        "\n===== {} $ {}\n",
        k8s_openapi::jiff::Timestamp::now(),
        shown.join(" ")
    );
    file.write_all(header.as_bytes())
        .await
        .map_err(|e| cannot("write", e))?;
    let start = file
        .seek(std::io::SeekFrom::End(0))
        .await
        .map_err(|e| cannot("write", e))?;
    Ok((file.into_std().await, start))
}

/// The tail of what was appended to `log` after offset `start`.
async fn read_tail(log: &Path, start: u64) -> String {
    let Ok(mut f) = tokio::fs::File::open(log).await else {
        return String::new();
    };
    let end = f.metadata().await.map(|m| m.len()).unwrap_or(start);
    let from = start.max(end.saturating_sub(TAIL_READ_BYTES));
    if f.seek(std::io::SeekFrom::Start(from)).await.is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    if f.read_to_end(&mut buf).await.is_err() {
        return String::new();
    }
    steps::tail(&String::from_utf8_lossy(&buf), TAIL_LINES, TAIL_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_logs_and_summarises() {
        let dir = std::env::temp_dir().join(format!("ni-tool-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let log = dir.join("upgrade.log");
        // The tool as a shell script, through `prefix`, within `limit`.
        let script = |prefix: &[String], script: &str, limit: Duration| {
            let args = vec!["-c".to_string(), script.to_string()];
            let log = log.clone();
            let prefix = prefix.to_vec();
            async move { run(&prefix, Path::new("/bin/sh"), &args, &log, limit).await }
        };
        let ten = Duration::from_secs(10);

        let r = script(&[], "echo backing up; echo done >&2", ten).await;
        assert!(r.success, "{r:?}");
        assert_eq!(r.outcome(), Ok(()));
        assert_eq!(r.tail, "backing up | done");

        let failing = "echo step 1; echo 'error: simulated failure' >&2; exit 3";
        let r = script(&[], failing, ten).await;
        assert!(!r.success);
        assert_eq!(
            r.outcome(),
            Err("exit status: 3: step 1 | error: simulated failure".into())
        );

        // A prefix runs the tool through another program.
        let env = vec!["/usr/bin/env".to_string(), "NI_TEST=1".to_string()];
        let r = script(&env, "echo via $NI_TEST", ten).await;
        assert_eq!(r.tail, "via 1");

        let r = script(&[], "echo slow; sleep 30", Duration::from_millis(300)).await;
        assert!(!r.success);
        assert!(r.summary.starts_with("killed after"), "{r:?}");

        let r = run(&[], &dir.join("missing"), &[], &log, Duration::from_secs(1)).await;
        assert!(r.summary.starts_with("cannot start"), "{r:?}");

        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(text.contains("$ /bin/sh -c echo backing up"), "{text}");
        assert!(text.contains("error: simulated failure"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
