//! A modelled network for `ni-sim`'s simulated nodes (issue 52's benchmark):
//! every image is `image_mb` large, a registry's egress is shared by its
//! pullers, and nodes holding an image serve peers. A node whose zone
//! already has a node holding the image when its pull starts fetches from
//! those peers (their upload shared by the zone's peer pullers of that
//! image), else from the registry. Model time runs `speed` times faster
//! than real time; `ni-sim` ticks it and reports the registry's bytes.

use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// The model's figures, from `key=value,...` text.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Image size, MB.
    pub image_mb: f64,
    /// Registry egress, MB/s, shared by its pullers.
    pub registry_mbps: f64,
    /// A node's download rate, MB/s.
    pub node_mbps: f64,
    /// A holder's upload to peers, MB/s.
    pub upload_mbps: f64,
    /// Model seconds per real second.
    pub speed: f64,
}

impl Config {
    /// Reads `image_mb=10000,registry_mbps=1250,node_mbps=500,upload_mbps=500,speed=50`
    /// (each key optional, those values by default).
    pub fn parse(s: &str) -> Result<Config, String> {
        let mut c = Config {
            image_mb: 10_000.0,
            registry_mbps: 1_250.0,
            node_mbps: 500.0,
            upload_mbps: 500.0,
            speed: 50.0,
        };
        for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or(format!("{pair:?} is not KEY=VALUE"))?;
            let v: f64 = v
                .parse()
                .ok()
                .filter(|v: &f64| *v > 0.0 && v.is_finite())
                .ok_or(format!("{pair:?}: not a positive number"))?;
            match k {
                "image_mb" => c.image_mb = v,
                "registry_mbps" => c.registry_mbps = v,
                "node_mbps" => c.node_mbps = v,
                "upload_mbps" => c.upload_mbps = v,
                "speed" => c.speed = v,
                _ => return Err(format!("unknown key {k:?}")),
            }
        }
        Ok(c)
    }
}

/// One node's pull of one image in progress.
struct Pull {
    /// The image's zone key: (image, zone).
    zone: (String, String),
    left_mb: f64,
    from_peers: bool,
    done: Option<oneshot::Sender<()>>,
}

#[derive(Default)]
struct State {
    /// Pulls by (node, image).
    pulls: HashMap<(String, String), Pull>,
    /// Nodes holding each image, per (image, zone).
    holders: HashMap<(String, String), usize>,
    /// (node, image) pairs held.
    held: HashMap<(String, String), ()>,
    registry_mb: f64,
    peer_mb: f64,
}

/// The network: pulls start, ticks move them on.
pub struct Model {
    cfg: Config,
    state: Mutex<State>,
}

impl Model {
    /// An idle network.
    pub fn new(cfg: Config) -> Self {
        Model {
            cfg,
            state: Mutex::default(),
        }
    }

    /// Real seconds between ticks.
    pub const TICK_SECONDS: f64 = 0.05;

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts `node`'s pull of `image` (in `zone`); the receiver fires when
    /// it ends (at once if the node holds the image already).
    pub fn start(&self, node: &str, image: &str, zone: &str) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let key = (node.to_string(), image.to_string());
        let zone = (image.to_string(), zone.to_string());
        let mut s = self.lock();
        if s.held.contains_key(&key) {
            let _ = tx.send(());
            return rx;
        }
        let from_peers = s.holders.get(&zone).copied().unwrap_or(0) > 0;
        s.pulls.insert(
            key,
            Pull {
                zone,
                left_mb: self.cfg.image_mb,
                from_peers,
                done: Some(tx),
            },
        );
        rx
    }

    /// Moves every pull on by `real_seconds` of real time.
    pub fn tick(&self, real_seconds: f64) {
        let dt = real_seconds * self.cfg.speed;
        let mut s = self.lock();
        let from_registry = s.pulls.values().filter(|p| !p.from_peers).count().max(1) as f64;
        let registry_rate = self
            .cfg
            .node_mbps
            .min(self.cfg.registry_mbps / from_registry);
        let mut peers_in: HashMap<(String, String), usize> = HashMap::new();
        for p in s.pulls.values().filter(|p| p.from_peers) {
            *peers_in.entry(p.zone.clone()).or_default() += 1;
        }
        let holders = s.holders.clone();
        let (mut registry, mut peers) = (0.0, 0.0);
        let mut done = vec![];
        for (key, p) in s.pulls.iter_mut() {
            let rate = if p.from_peers {
                let h = holders.get(&p.zone).copied().unwrap_or(0) as f64;
                let n = peers_in.get(&p.zone).copied().unwrap_or(1) as f64;
                self.cfg.node_mbps.min(self.cfg.upload_mbps * h / n)
            } else {
                registry_rate
            };
            let got = (rate * dt).min(p.left_mb);
            p.left_mb -= got;
            if p.from_peers {
                peers += got;
            } else {
                registry += got;
            }
            if p.left_mb <= 1e-9 {
                done.push(key.clone());
            }
        }
        s.registry_mb += registry;
        s.peer_mb += peers;
        for key in done {
            if let Some(mut p) = s.pulls.remove(&key) {
                *s.holders.entry(p.zone.clone()).or_default() += 1;
                s.held.insert(key, ());
                if let Some(tx) = p.done.take() {
                    let _ = tx.send(());
                }
            }
        }
    }

    /// MB served by the registry and by peers so far.
    pub fn served_mb(&self) -> (f64, f64) {
        let s = self.lock();
        (s.registry_mb, s.peer_mb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zone_with_a_holder_pulls_from_peers() {
        let cfg =
            Config::parse("image_mb=100,registry_mbps=100,node_mbps=100,upload_mbps=50,speed=1");
        let m = Model::new(cfg.unwrap_or_else(|e| panic!("{e}")));
        let mut first = m.start("a1", "i", "a");
        m.tick(1.0);
        assert!(first.try_recv().is_ok(), "100 MB at 100 MB/s takes 1 s");
        let mut second = m.start("a2", "i", "a");
        let mut other = m.start("b1", "i", "b");
        // Another image starts from nothing: from the registry.
        let mut elsewhere = m.start("a3", "j", "a");
        m.tick(1.0);
        // a2 from one holder at 50 MB/s; b1 and a3 share the registry's
        // 100 MB/s: each half done.
        assert!(second.try_recv().is_err());
        assert!(other.try_recv().is_err());
        assert!(elsewhere.try_recv().is_err());
        m.tick(1.0);
        assert!(second.try_recv().is_ok());
        assert!(other.try_recv().is_ok());
        assert!(elsewhere.try_recv().is_ok());
        assert_eq!(m.served_mb(), (300.0, 100.0));
    }

    #[test]
    fn config_refuses_what_it_cannot_read() {
        assert!(Config::parse("").is_ok());
        assert!(Config::parse("speed=0").is_err());
        assert!(Config::parse("colour=3").is_err());
        assert!(Config::parse("image_mb").is_err());
    }
}
