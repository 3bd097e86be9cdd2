//! `ni-slow-proxy`: the tests' throttling registry proxy as a process, for
//! the shell-driven install test (a pull through it stays in flight long
//! enough to roll the daemon under it).
//!
//! ```text
//! ni-slow-proxy UPSTREAM BYTES_PER_SECOND
//! ```
//!
//! Prints `127.0.0.1:PORT` on stdout once listening, then serves until killed.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(upstream), Some(rate)) = (args.first(), args.get(1)) else {
        eprintln!("usage: ni-slow-proxy UPSTREAM BYTES_PER_SECOND");
        return ExitCode::from(2);
    };
    let Ok(rate) = rate.parse::<u64>() else {
        eprintln!("ni-slow-proxy: BYTES_PER_SECOND must be a whole number, got {rate:?}");
        return ExitCode::from(2);
    };
    let proxy = match nodeimage_tests::proxy::Proxy::start(upstream, rate) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ni-slow-proxy: starting the proxy: {e}");
            return ExitCode::from(2);
        }
    };
    println!("{}", proxy.addr);
    // The proxy runs on its own runtime; this thread only keeps it alive.
    loop {
        std::thread::park();
    }
}
