//! `kubectl nodeimage`: follow an image pre-pull job node by node, and start
//! one from the command line. The imperative shell: arguments, the kube
//! client, watches and the terminal; what is shown is decided in
//! [`view`] and [`render`], the job `pull` creates in [`pull`].

mod follow;
mod precheck;
mod predownload;
mod pull;
mod removal_cmd;
mod remove;
mod render;
mod target;
mod view;

use nodeimage_api::noproxy as proxy;

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit code when the job finished with failed nodes (`--watch`, `--wait`).
const EXIT_FAILED_NODES: u8 = 3;
/// Exit code when OpenKruise has objects other than image ones (`openkruise-check`).
const EXIT_OPENKRUISE_IN_USE: u8 = 4;

#[derive(Parser, Debug)]
#[command(
    name = "kubectl nodeimage",
    bin_name = "kubectl nodeimage",
    version,
    about = "Follow image pre-pull jobs node by node, and pull an image onto nodes",
    after_help = "Exit status: 0 success; 1 error; 2 bad usage; 3 the job finished with failed nodes (--watch, --wait); 4 OpenKruise has other objects (openkruise-check)."
)]
struct Cli {
    /// Kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the in-cluster config).
    #[arg(long, global = true, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    context: Option<String>,
    /// Namespace of OpenKruise jobs (default: the context's namespace).
    #[arg(short = 'n', long, global = true, value_name = "NS")]
    namespace: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show a job's nodes: phase, progress, image ID and message per node.
    Status(StatusArgs),
    /// Create an ImagePullJob that pulls IMAGE onto nodes, and print its name.
    Pull(PullArgs),
    /// Create an ImageRemovalJob that takes IMAGE... off nodes, and print its name.
    Remove(RemoveArgs),
    /// Before uninstalling OpenKruise (docs/migration.md way A): list the
    /// objects of its other kinds, which the uninstall would delete; exit 4
    /// if there are any.
    OpenkruiseCheck,
}

/// Table for people, JSON for programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// One row per node (redrawn in place with --watch on a terminal).
    Table,
    /// A document with the job and one row per node (one line per change with --watch).
    Json,
}

#[derive(Args, Debug)]
struct StatusArgs {
    /// The job: imagepulljob/NAME (ipj), imagelistpulljob/NAME (ilpj),
    /// imageprepulljob/NAME (ippj), nodeupgradejob/NAME (nuj) or
    /// imageremovaljob/NAME (irj); or KIND NAME.
    /// A workload (deploy/NAME, sts/NAME, ds/NAME): its pre-download jobs.
    #[arg(value_name = "KIND/NAME")]
    target: String,
    /// The name, when KIND is given as a separate word.
    #[arg(value_name = "NAME")]
    name: Option<String>,
    /// Keep following the job until it finishes.
    #[arg(short = 'w', long)]
    watch: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Output,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("where").required(true).args(["nodes", "selector", "all"])))]
struct PullArgs {
    /// The image, such as nginx:1.25 or registry.example.com/app@sha256:….
    image: String,
    /// Pull on these nodes (comma-separated names).
    #[arg(long, value_delimiter = ',', value_name = "NODE,...")]
    nodes: Option<Vec<String>>,
    /// Pull on the nodes whose labels match (key=value, key!=value, key, !key; comma-separated).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    selector: Option<String>,
    /// Pull on every node.
    #[arg(long)]
    all: bool,
    /// Name of the job (default: generated from the image's name).
    #[arg(long)]
    name: Option<String>,
    /// Nodes pulling at once (default 1).
    #[arg(long, value_name = "N")]
    parallelism: Option<u32>,
    /// Secret of the namespace with registry credentials (repeatable or comma-separated).
    #[arg(long = "pull-secret", value_delimiter = ',', value_name = "SECRET")]
    pull_secrets: Vec<String>,
    /// Follow the job as `status --watch` does until it finishes.
    #[arg(long)]
    wait: bool,
    /// Output format while waiting.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Output,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("where").required(true).args(["nodes", "selector", "all"])))]
struct RemoveArgs {
    /// The images, by tag (registry.example.com/app:v1) or digest (…/app@sha256:…).
    #[arg(required = true, num_args = 1..)]
    images: Vec<String>,
    /// Remove from these nodes (comma-separated names).
    #[arg(long, value_delimiter = ',', value_name = "NODE,...")]
    nodes: Option<Vec<String>>,
    /// Remove from the nodes whose labels match (key=value, key!=value, key, !key; comma-separated).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    selector: Option<String>,
    /// Remove from every node.
    #[arg(long)]
    all: bool,
    /// Name of the job (default: generated from the first image's name).
    #[arg(long)]
    name: Option<String>,
    /// Nodes removing at once (default 1).
    #[arg(long, value_name = "N")]
    parallelism: Option<u32>,
    /// Remove even images a pull job on the node still wants.
    #[arg(long)]
    force: bool,
    /// Keep these digests off the nodes until the job is deleted.
    #[arg(long)]
    block: bool,
    /// Wait until every node has answered, then show the nodes.
    #[arg(long)]
    wait: bool,
    /// Output format of the nodes.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Output,
}

/// What went wrong, for the one line printed before exiting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// No kubeconfig and no in-cluster config.
    #[error("no cluster configuration: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    /// A request to the API server failed.
    #[error("{0}")]
    Api(#[from] kube::Error),
    /// A watch failed before it had listed anything.
    #[error("watching {what}: {source}")]
    Watch {
        /// What was watched.
        what: &'static str,
        /// Why it failed.
        #[source]
        source: kube::runtime::watcher::Error,
    },
    /// A bad KIND/NAME.
    #[error(transparent)]
    Target(#[from] target::TargetError),
    /// A bad `pull` request.
    #[error(transparent)]
    Request(#[from] pull::RequestError),
    /// The job does not exist.
    #[error("{kind} {name} not found{}", namespace.as_ref().map(|n| format!(" in namespace {n}")).unwrap_or_default())]
    NotFound {
        /// Its kind.
        kind: target::Kind,
        /// Its namespace, for namespaced kinds.
        namespace: Option<String>,
        /// Its name.
        name: String,
    },
    /// The removal job named does not exist.
    #[error("ImageRemovalJob {0} not found")]
    RemovalJobNotFound(String),
    /// The workload named does not exist.
    #[error("{kind} {name} not found in namespace {namespace}")]
    WorkloadNotFound {
        /// Its kind.
        kind: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The job went away while being followed.
    #[error("{kind} {name} was deleted")]
    Deleted {
        /// Its kind.
        kind: target::Kind,
        /// Its name.
        name: String,
    },
    /// The job is stored in a shape its type cannot decode.
    #[error("{kind} {name} cannot be read: {reason}")]
    Invalid {
        /// Its kind.
        kind: target::Kind,
        /// Its name.
        name: String,
        /// The decoder's reason.
        reason: String,
    },
    /// Writing the output failed.
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
    /// The output document could not be encoded.
    #[error("encoding JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// A client as kubectl would build it: `--kubeconfig`, else `$KUBECONFIG`
/// or `~/.kube/config`, else the in-cluster config; `--context` picks a
/// context. Returns the context's namespace too. Not the nodeimage-ops
/// builder: that one knows no `--context`, and adds server-side metrics.
async fn client(cli: &Cli) -> Result<(kube::Client, String), Error> {
    let options = kube::config::KubeConfigOptions {
        context: cli.context.clone(),
        ..Default::default()
    };
    let config = match (&cli.kubeconfig, &cli.context) {
        (Some(path), _) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options).await?,
        (None, None) => kube::Config::infer().await?,
    };
    let mut config = config;
    if around_env_proxy(&config) {
        config.proxy_url = None;
    }
    let namespace = config.default_namespace.clone();
    Ok((kube::Client::try_from(config)?, namespace))
}

/// Whether the proxy in `config` is the environment's `HTTPS_PROXY` and
/// `NO_PROXY` exempts the API server from it (a kubeconfig's own
/// `proxy-url` is always used, as kubectl does).
fn around_env_proxy(config: &kube::Config) -> bool {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    // The proxy's host:port, as written in the variable.
    let from_env = env("HTTPS_PROXY").or_else(|| env("https_proxy")).map(|p| {
        let rest = p.split_once("://").map_or(p.as_str(), |(_, r)| r);
        let authority = rest.split('/').next().unwrap_or_default();
        authority
            .rsplit_once('@')
            .map_or(authority, |(_, a)| a)
            .to_string()
    });
    let (Some(proxy), Some(no_proxy)) = (
        &config.proxy_url,
        env("NO_PROXY").or_else(|| env("no_proxy")),
    ) else {
        return false;
    };
    let server = &config.cluster_url;
    let port = server
        .port_u16()
        .unwrap_or(if server.scheme_str() == Some("http") {
            80
        } else {
            443
        });
    from_env.is_some_and(|a| proxy.authority().is_some_and(|p| p.as_str().ends_with(&a)))
        && server
            .host()
            .is_some_and(|h| proxy::bypass(&no_proxy, h, port))
}

async fn run(cli: Cli) -> Result<ExitCode, Error> {
    match &cli.command {
        Command::OpenkruiseCheck => {
            let (client, _) = client(&cli).await?;
            let found = precheck::find(&client).await?;
            let (safe, text) = precheck::verdict(&found);
            print!("{text}");
            Ok(if safe {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_OPENKRUISE_IN_USE)
            })
        }
        Command::Status(args) => {
            if let Some(name) = remove::parse_target(&args.target, args.name.as_deref()) {
                let (client, _) = client(&cli).await?;
                return removal_cmd::removal_status(&client, &name, args.watch, args.output).await;
            }
            if let Some((w, name)) = predownload::parse(&args.target, args.name.as_deref()) {
                return workload_status(&cli, args, w, &name).await;
            }
            let target = target::parse_target(&args.target, args.name.as_deref())?;
            let (client, default_ns) = client(&cli).await?;
            let namespace = cli.namespace.clone().unwrap_or(default_ns);
            let outcome = follow::follow(
                client,
                &target,
                &namespace,
                follow::Mode {
                    watch: args.watch,
                    output: args.output,
                },
            )
            .await?;
            Ok(exit_code(args.watch, &outcome))
        }
        Command::Remove(args) => removal_cmd::remove_images(&cli, args).await,
        Command::Pull(args) => {
            let nodes = match (&args.nodes, &args.selector) {
                (Some(names), _) => pull::Nodes::Names(names.clone()),
                (None, Some(s)) => pull::Nodes::Selector(s.clone()),
                (None, None) => pull::Nodes::All,
            };
            let (client, default_ns) = client(&cli).await?;
            let namespace = cli.namespace.clone().unwrap_or(default_ns);
            let job = pull::job(&pull::Request {
                image: args.image.clone(),
                nodes,
                namespace: namespace.clone(),
                name: args.name.clone(),
                parallelism: args.parallelism,
                pull_secrets: args.pull_secrets.clone(),
            })?;
            let api: kube::Api<nodeimage_api::ImagePullJob> =
                kube::Api::namespaced(client.clone(), &namespace);
            let created = api.create(&kube::api::PostParams::default(), &job).await?;
            let name = created.metadata.name.unwrap_or_default();
            follow::print_line(&format!("imagepulljob/{name} created"))?;
            if !args.wait {
                return Ok(ExitCode::SUCCESS);
            }
            let target = target::Target {
                kind: target::Kind::ImagePullJob,
                name,
            };
            let outcome = follow::follow(
                client,
                &target,
                &namespace,
                follow::Mode {
                    watch: true,
                    output: args.output,
                },
            )
            .await?;
            Ok(exit_code(true, &outcome))
        }
    }
}

/// `status` of a workload: each of its pre-download jobs in turn (a line
/// naming them first, in a table), or a line saying it has none.
async fn workload_status(
    cli: &Cli,
    args: &StatusArgs,
    w: predownload::Workload,
    name: &str,
) -> Result<ExitCode, Error> {
    let (client, default_ns) = client(cli).await?;
    let namespace = cli.namespace.clone().unwrap_or(default_ns);
    let jobs = predownload::jobs_of(&client, w, name, &namespace).await?;
    let table = args.output == Output::Table;
    if jobs.is_empty() {
        if table {
            follow::print_line(&format!(
                "{}/{name}: no pre-download job now (its Pods run its template's images, or pre-download is off for it)",
                w.as_str()
            ))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if table {
        follow::print_line(&format!(
            "{}/{name}: pre-download jobs {}\n",
            w.as_str(),
            jobs.join(", ")
        ))?;
    }
    let mut code = ExitCode::SUCCESS;
    for job in jobs {
        let target = target::Target {
            kind: target::Kind::ImagePullJob,
            name: job,
        };
        let mode = follow::Mode {
            watch: args.watch,
            output: args.output,
        };
        let outcome = follow::follow(client.clone(), &target, &namespace, mode).await?;
        if matches!(outcome, follow::Outcome::Interrupted) {
            return Ok(exit_code(args.watch, &outcome));
        }
        if exit_code(args.watch, &outcome) != ExitCode::SUCCESS {
            code = exit_code(args.watch, &outcome);
        }
    }
    Ok(code)
}

fn exit_code(watched: bool, outcome: &follow::Outcome) -> ExitCode {
    match outcome {
        follow::Outcome::Interrupted => ExitCode::from(130),
        follow::Outcome::Shown { failures: true, .. } if watched => {
            ExitCode::from(EXIT_FAILED_NODES)
        }
        follow::Outcome::Shown { .. } => ExitCode::SUCCESS,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        // `| head` closing the pipe is not an error.
        Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        // Bad arguments exit as clap's usage errors do.
        Err(e @ (Error::Target(_) | Error::Request(_))) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
