//! The nodeimage-daemon binary: flags and logging, then the library's `run`.

use clap::Parser;
use nodeimage_daemon::{flags::Flags, run};
use nodeimage_ops::telemetry;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let flags = Flags::parse();
    telemetry::init(flags.log_format, "info,kube_runtime=warn");
    telemetry::exit_code("daemon", run(flags).await)
}
