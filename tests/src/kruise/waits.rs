//! Polling until a condition holds, or checking that it keeps holding.

use std::time::{Duration, Instant};

/// Polls `check` until it returns Ok, panicking after `timeout` with the
/// last reason it gave.
pub fn eventually<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let start = Instant::now();
    loop {
        match check() {
            Ok(v) => return v,
            Err(why) if start.elapsed() > timeout => {
                panic!("timed out after {timeout:?} waiting for {what}: {why}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// Checks that `check` holds on every poll for `duration`.
pub fn consistently(what: &str, duration: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let start = Instant::now();
    while start.elapsed() < duration {
        if let Err(why) = check() {
            panic!("{what} stopped holding after {:?}: {why}", start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
