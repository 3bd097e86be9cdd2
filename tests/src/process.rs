//! Processes a test owns and stops itself: a nodeimage-daemon for a fake
//! NodeImage (to kill and restart it, or point it at a special socket), a
//! docker-registry with its own storage (to stop it), a pull-through cache,
//! and a containerd with its own root (to bring a runtime up late). Each is killed when dropped,
//! also when the test panics; shared cluster processes are never touched.

use crate::{Cluster, http};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn log_file(path: &Path, banner: &str) -> std::io::Result<(File, File)> {
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    writeln!(f, "\n===== {banner}")?;
    let g = f.try_clone()?;
    Ok((f, g))
}

/// The last `lines` lines of a file (empty when unreadable).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn stop(child: &mut Option<Child>, graceful: bool) {
    let Some(mut c) = child.take() else { return };
    if graceful {
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// A nodeimage-daemon started by a test.
pub struct Daemon {
    child: Option<Child>,
    /// The node name it serves (its NodeImage's name).
    pub node_name: String,
    /// Health port on 127.0.0.1.
    pub health_port: u16,
    /// Its log (stdout and stderr, every start appended).
    pub log: PathBuf,
    bin: PathBuf,
    args: Vec<String>,
    starts: usize,
    /// The mount namespace it runs in (a real node's), None: the host's.
    mount_ns: Option<PathBuf>,
}

impl Daemon {
    /// Starts `nodeimage-daemon --node-name NODE --containerd-socket SOCKET`
    /// with the cluster's kubeconfig, a free health port and `extra` flags;
    /// logs go to `log_dir/daemon-NODE.log`.
    pub fn start(
        c: &Cluster,
        node_name: &str,
        socket: &Path,
        log_dir: &Path,
        extra: &[&str],
    ) -> Daemon {
        Self::start_in(c, node_name, socket, log_dir, extra, None)
    }

    /// As [`Daemon::start`], run in the mount namespace pinned at
    /// `mount_ns` (a real node's, where containerd's paths are the node's,
    /// as in the chart's daemon pod) when given.
    pub fn start_in(
        c: &Cluster,
        node_name: &str,
        socket: &Path,
        log_dir: &Path,
        extra: &[&str],
        mount_ns: Option<&Path>,
    ) -> Daemon {
        let health_port = crate::free_port();
        let mut args: Vec<String> = vec![
            "--node-name".into(),
            node_name.into(),
            "--containerd-socket".into(),
            socket.display().to_string(),
            "--kubeconfig".into(),
            c.var("KUBECONFIG"),
            "--health-addr".into(),
            format!("127.0.0.1:{health_port}"),
        ];
        // The simulated nodes share the host's filesystem, whose usage is not
        // under test: the disk check passes unless a test sets a threshold.
        if !extra.contains(&"--disk-threshold-percent") {
            args.extend(["--disk-threshold-percent".into(), "100".into()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut d = Daemon {
            child: None,
            node_name: node_name.to_string(),
            health_port,
            log: log_dir.join(format!("daemon-{node_name}.log")),
            bin: c.nodeimage_bin().join("nodeimage-daemon"),
            args,
            starts: 0,
            mount_ns: mount_ns.map(Path::to_path_buf),
        };
        d.spawn();
        d
    }

    fn spawn(&mut self) {
        self.starts += 1;
        let (out, err) = log_file(&self.log, &format!("start {}", self.starts))
            .expect("open the test daemon's log");
        let mut cmd = match &self.mount_ns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--mount={}", ns.display()))
                    .arg("--")
                    .arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        let child = cmd
            .args(&self.args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.bin.display()));
        self.child = Some(child);
    }

    /// Status code of `/readyz`, None when nothing answers.
    pub fn readyz(&self) -> Option<u16> {
        http::status_of(&format!("http://127.0.0.1:{}/readyz", self.health_port))
    }

    /// Waits until `/readyz` answers `code`; panics with the log tail otherwise.
    pub fn wait_readyz(&mut self, code: u16, timeout: Duration) {
        let start = Instant::now();
        loop {
            if self.readyz() == Some(code) {
                return;
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "test daemon {} exited ({status}):\n{}",
                    self.node_name,
                    tail(&self.log, 40)
                );
            }
            if start.elapsed() > timeout {
                panic!(
                    "test daemon {}: /readyz is not {code} after {timeout:?} (last {:?}):\n{}",
                    self.node_name,
                    self.readyz(),
                    tail(&self.log, 40)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        stop(&mut self.child, false);
    }

    /// Starts it again with the same flags.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Log lines written since the latest start.
    pub fn log_of_latest_start(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let marker = format!("===== start {}", self.starts);
        match text.rfind(&marker) {
            Some(i) => text[i..].to_string(),
            None => text,
        }
    }

    /// The whole log.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        stop(&mut self.child, false);
        if std::thread::panicking() {
            eprintln!(
                "---- last lines of test daemon {} ({}):\n{}",
                self.node_name,
                self.log.display(),
                tail(&self.log, 40)
            );
        }
    }
}

/// A docker-registry with its own storage, on a free loopback port.
pub struct TestRegistry {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    config: PathBuf,
    /// Its log, with one access-log line per request.
    pub log: PathBuf,
}

impl TestRegistry {
    /// Starts a registry storing under `dir` and waits until it answers.
    pub fn start(dir: &Path) -> TestRegistry {
        Self::start_with(dir, None)
    }

    /// The same, refusing requests without the basic-auth credentials of
    /// `htpasswd` (a bcrypt htpasswd file, such as the auth registry's).
    pub fn start_with_auth(dir: &Path, htpasswd: &Path) -> TestRegistry {
        Self::start_with(dir, Some(htpasswd))
    }

    fn start_with(dir: &Path, htpasswd: Option<&Path>) -> TestRegistry {
        let port = crate::free_port();
        let config = dir.join("registry.yml");
        let storage = dir.join("registry-data");
        std::fs::create_dir_all(&storage).expect("create registry storage");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: {}\nhealth:\n  storagedriver:\n    enabled: false\n",
                storage.display(),
                crate::random_suffix()
            ),
        )
        .expect("write registry config");
        if let Some(file) = htpasswd {
            let auth = format!(
                "auth:\n  htpasswd:\n    realm: nodeimage-test-registry\n    path: {}\n",
                file.display()
            );
            let mut text = std::fs::read_to_string(&config).expect("read registry config");
            text.push_str(&auth);
            std::fs::write(&config, text).expect("write registry config");
        }
        let mut r = TestRegistry {
            child: None,
            port,
            config,
            log: dir.join("registry.log"),
        };
        r.start_again();
        r
    }

    /// `127.0.0.1:port`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts it (again) with the same port and storage; waits for /v2/.
    pub fn start_again(&mut self) {
        stop(&mut self.child, false);
        let (out, err) = log_file(&self.log, "start").expect("open registry log");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start docker-registry");
        self.child = Some(child);
        let url = format!("http://{}/v2/", self.host());
        crate::wait_for(
            &format!("test registry {} to answer", self.host()),
            Duration::from_secs(30),
            || matches!(http::status_of(&url), Some(200 | 401)).then_some(()),
        );
    }

    /// Stops it (SIGKILL); nothing listens on its port afterwards.
    pub fn stop(&mut self) {
        stop(&mut self.child, false);
    }

    /// Access-log lines (one per request) whose request line contains `needle`.
    pub fn requests(&self, needle: &str) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\" ") && l.contains(" HTTP/1.1\"") && l.contains(needle))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        stop(&mut self.child, false);
    }
}

/// A pull-through cache (CNCF Distribution v3 in proxy mode, built by
/// tests/mirror/build.sh) in front of an upstream registry: a zone's mirror.
/// On a miss it fetches a blob from upstream once, serving the client while
/// it stores it; clients that ask while that fetch runs are passed through
/// to upstream (each its own copy). Killed when dropped.
pub struct PullThroughCache {
    child: Option<Child>,
    /// `127.0.0.1:port`, the mirror a node's hosts.toml names.
    pub host: String,
    /// Its log.
    pub log: PathBuf,
}

impl PullThroughCache {
    /// Starts `bin` (the v3 registry) storing under `dir`, mirroring
    /// `upstream` (`host:port`, plain HTTP); waits until it answers.
    pub fn start(bin: &Path, dir: &Path, upstream: &str) -> PullThroughCache {
        let host = format!("127.0.0.1:{}", crate::free_port());
        let config = dir.join("mirror.yml");
        let storage = dir.join("mirror-data");
        std::fs::create_dir_all(&storage).expect("create mirror storage");
        // ttl 0s: no expiry scheduler (nothing expires within a test).
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {host}\nproxy:\n  remoteurl: http://{upstream}\n  ttl: 0s\n",
                storage.display()
            ),
        )
        .expect("write mirror config");
        let log = dir.join("mirror.log");
        let (out, err) = log_file(&log, "start").expect("open mirror log");
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            // v3 exports traces to localhost:4318 unless told not to.
            .env("OTEL_TRACES_EXPORTER", "none")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "start {} (built by tests/mirror/build.sh): {e}",
                    bin.display()
                )
            });
        let m = PullThroughCache {
            child: Some(child),
            host,
            log,
        };
        let url = format!("http://{}/v2/", m.host);
        crate::wait_for(
            &format!("pull-through cache {} to answer", m.host),
            Duration::from_secs(30),
            || matches!(http::status_of(&url), Some(200 | 401)).then_some(()),
        );
        m
    }
}

impl Drop for PullThroughCache {
    fn drop(&mut self) {
        stop(&mut self.child, false);
    }
}

/// A containerd with its own root, state and socket under one directory,
/// using the native snapshotter (no mounts left behind).
pub struct Containerd {
    child: Option<Child>,
    /// Its gRPC socket.
    pub socket: PathBuf,
    /// Its log.
    pub log: PathBuf,
}

impl Containerd {
    /// The config of a containerd living under `dir` (socket
    /// `dir/containerd.sock`): the one writer of the test stack's containerd
    /// configs, `containerd_config` in tests/cluster/lib.sh, with the native
    /// snapshotter.
    pub fn config(dir: &Path, sandbox_image: &str) -> String {
        let lib = crate::repo_root().join("tests/cluster/lib.sh");
        let out = Command::new("bash")
            .arg("-c")
            .arg(r#". "$1" && containerd_config "$2" native "$3""#)
            .arg("containerd-config")
            .arg(&lib)
            .arg(dir)
            .arg(sandbox_image)
            .output()
            .expect("run containerd_config of tests/cluster/lib.sh");
        assert!(
            out.status.success(),
            "containerd_config failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("containerd_config writes UTF-8")
    }

    /// The socket of the containerd [`Containerd::start`] starts under `dir`.
    pub fn socket_in(dir: &Path) -> PathBuf {
        dir.join("containerd.sock")
    }

    /// Starts containerd under `dir` (on [`Containerd::socket_in`]), waiting
    /// until CRI answers.
    pub fn start(dir: &Path, sandbox_image: &str) -> Containerd {
        let socket = &Self::socket_in(dir);
        for sub in ["root", "state", "opt", "cni/bin", "cni/net.d", "certs.d"] {
            std::fs::create_dir_all(dir.join(sub)).expect("create containerd dirs");
        }
        let config = dir.join("config.toml");
        std::fs::write(&config, Self::config(dir, sandbox_image)).expect("write containerd config");
        let log = dir.join("containerd.log");
        let (out, err) = log_file(&log, "start").expect("open containerd log");
        let child = Command::new("containerd")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start containerd");
        let mut c = Containerd {
            child: Some(child),
            socket: socket.to_path_buf(),
            log,
        };
        let start = Instant::now();
        loop {
            if crate::cri::list_images(socket).is_ok() {
                return c;
            }
            if let Some(Ok(Some(status))) = c.child.as_mut().map(|ch| ch.try_wait()) {
                panic!("containerd exited ({status}):\n{}", tail(&c.log, 40));
            }
            if start.elapsed() > Duration::from_secs(60) {
                panic!(
                    "containerd on {} does not answer CRI:\n{}",
                    socket.display(),
                    tail(&c.log, 40)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        stop(&mut self.child, true);
    }
}
