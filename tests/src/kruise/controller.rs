//! The shared controller, stopped and restarted by a test.

use super::fake::chrono_now;
use crate::Cluster;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The shared controller that `tests/nodeimage.sh start` runs (PID file
/// `$STATE/pids/controller.pid`, command line in `controller.cmd`). Dropping
/// this guard starts it again, exactly as nodeimage.sh does, if it is not
/// running, so a failing test never leaves the cluster without it.
pub struct SharedController {
    c: Cluster,
    pid_file: PathBuf,
    cmd: String,
}

impl SharedController {
    /// Reads the recorded PID and command line; panics if it is not running.
    pub fn attach(c: &Cluster) -> SharedController {
        let pids = PathBuf::from(c.var("NODEIMAGE_STATE")).join("pids");
        let cmd = std::fs::read_to_string(pids.join("controller.cmd")).expect(
            "read $STATE/pids/controller.cmd: start nodeimage with tests/nodeimage.sh start",
        );
        let s = SharedController {
            c: c.clone(),
            pid_file: pids.join("controller.pid"),
            cmd: cmd.trim_end().to_string(),
        };
        assert!(
            s.running_pid().is_some(),
            "the shared controller is not running; start it with tests/nodeimage.sh start"
        );
        s
    }

    fn cmdline_of(pid: u32) -> Option<String> {
        let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let parts: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        Some(parts.join(" "))
    }

    /// The PID of the running controller, if the PID file names a live
    /// process with the recorded command line.
    pub fn running_pid(&self) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(&self.pid_file)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        (Self::cmdline_of(pid).as_deref() == Some(self.cmd.as_str())).then_some(pid)
    }

    /// SIGKILL, and wait until the process is gone.
    pub fn kill(&self) {
        let pid = self.running_pid().expect("the shared controller runs");
        let st = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -KILL {pid} failed");
        crate::wait_for(
            &format!("controller pid {pid} to exit"),
            Duration::from_secs(30),
            || (Self::cmdline_of(pid).as_deref() != Some(self.cmd.as_str())).then_some(()),
        );
    }

    fn health_url(&self) -> String {
        format!("http://{}/readyz", self.c.controller_health())
    }

    /// Starts the controller with its recorded command line, logging to
    /// `$STATE/logs/controller.log` and recording its PID, as nodeimage.sh's
    /// `start_daemon` does, unless one is running already; waits until ready.
    pub fn ensure_running(&self) {
        if self.running_pid().is_none() {
            let state = PathBuf::from(self.c.var("NODEIMAGE_STATE"));
            let log_path = state.join("logs/controller.log");
            let mut log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .expect("open controller.log");
            use std::io::Write;
            let _ = writeln!(
                log,
                "\n===== {} starting (restarted by an e2e test): {}",
                chrono_now(),
                self.cmd
            );
            let err = log.try_clone().expect("clone log handle");
            let mut parts = self.cmd.split(' ');
            let program = parts.next().expect("recorded command is not empty");
            let child = Command::new(program)
                .args(parts)
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err)
                // Its own process group: it outlives this test process.
                .process_group(0)
                .spawn()
                .unwrap_or_else(|e| panic!("restart the controller ({}): {e}", self.cmd));
            std::fs::write(&self.pid_file, child.id().to_string()).expect("write controller.pid");
            // Not waited for: the controller keeps running after the test.
            std::mem::forget(child);
        }
        let url = self.health_url();
        crate::wait_for(
            "the restarted controller to be ready",
            Duration::from_secs(120),
            || (crate::http::status_of(&url) == Some(200)).then_some(()),
        );
    }
}

impl Drop for SharedController {
    fn drop(&mut self) {
        if self.running_pid().is_none() {
            eprintln!("restarting the shared controller the test stopped");
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.ensure_running()));
            if r.is_err() {
                eprintln!("the shared controller did not come back; run tests/nodeimage.sh start");
            }
        }
    }
}
