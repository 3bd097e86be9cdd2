//! `ni-cri`: a minimal CRI client for the local test cluster.
//!
//! crictl is not packaged in Debian, so the cluster scripts and tests use this
//! small tool to talk to a containerd's CRI image service over its unix socket.
//!
//! ```text
//! ni-cri --socket PATH version
//! ni-cri --socket PATH pull IMAGE [--username U --password P]
//! ni-cri --socket PATH images
//! ni-cri --socket PATH status IMAGE      # exit 1 if the image is absent
//! ni-cri --socket PATH rmi IMAGE
//! ni-cri --socket PATH fsinfo
//! ```
//!
//! Errors are printed as one line on stderr; the exit code is 1 for an absent
//! image (`status`) and 2 for any other failure.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    AuthConfig, ImageFsInfoRequest, ImageSpec, ImageStatusRequest, ListImagesRequest,
    PullImageRequest, RemoveImageRequest, VersionRequest,
};
use tonic::transport::Channel;

#[derive(Parser)]
#[command(
    name = "ni-cri",
    about = "Minimal CRI image-service client for nodeimage tests"
)]
struct Cli {
    /// containerd CRI socket (unix path)
    #[arg(long, env = "NI_CRI_SOCKET")]
    socket: PathBuf,
    /// Timeout for the whole call, in seconds
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the runtime name/version and CRI API version
    Version,
    /// Pull an image; prints the image reference (id) the runtime returns
    Pull {
        image: String,
        #[arg(long, requires = "password")]
        username: Option<String>,
        #[arg(long, requires = "username")]
        password: Option<String>,
    },
    /// List images: one line per image, "<id> tags=<a,b> digests=<c,d>"
    Images,
    /// Show one image; exit code 1 if it is not present
    Status { image: String },
    /// Remove an image (all its tags: CRI removes by image id)
    Rmi { image: String },
    /// Print the image filesystem mountpoint and used bytes
    Fsinfo,
}

/// A failure with its exit code.
struct Failure {
    code: u8,
    msg: String,
}

impl Failure {
    fn new(msg: impl Into<String>) -> Self {
        Failure {
            code: 2,
            msg: msg.into(),
        }
    }
}

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Self {
        Failure::new(format!(
            "CRI call failed: code={:?}: {}",
            s.code(),
            s.message()
        ))
    }
}

async fn connect(path: PathBuf) -> Result<Channel, Failure> {
    nodeimage_tests::cri::connect(&path)
        .await
        .map_err(Failure::new)
}

fn spec(image: &str) -> Option<ImageSpec> {
    Some(ImageSpec {
        image: image.to_string(),
        ..Default::default()
    })
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let channel = connect(cli.socket.clone()).await?;
    match cli.cmd {
        Cmd::Version => {
            let mut rt = RuntimeServiceClient::new(channel);
            let v = rt
                .version(VersionRequest {
                    version: "v1".into(),
                })
                .await?
                .into_inner();
            println!(
                "{} {} (CRI {})",
                v.runtime_name, v.runtime_version, v.runtime_api_version
            );
        }
        Cmd::Pull {
            image,
            username,
            password,
        } => {
            let auth = match (username, password) {
                (Some(username), Some(password)) => Some(AuthConfig {
                    username,
                    password,
                    ..Default::default()
                }),
                _ => None,
            };
            let mut img = ImageServiceClient::new(channel);
            let r = img
                .pull_image(PullImageRequest {
                    image: spec(&image),
                    auth,
                    sandbox_config: None,
                })
                .await?
                .into_inner();
            println!("{}", r.image_ref);
        }
        Cmd::Images => {
            let mut img = ImageServiceClient::new(channel);
            let r = img
                .list_images(ListImagesRequest { filter: None })
                .await?
                .into_inner();
            for i in r.images {
                println!(
                    "{} tags={} digests={}",
                    i.id,
                    i.repo_tags.join(","),
                    i.repo_digests.join(",")
                );
            }
        }
        Cmd::Status { image } => {
            let mut img = ImageServiceClient::new(channel);
            let r = img
                .image_status(ImageStatusRequest {
                    image: spec(&image),
                    verbose: false,
                })
                .await?
                .into_inner();
            match r.image {
                Some(i) => println!(
                    "{} tags={} digests={} size={}",
                    i.id,
                    i.repo_tags.join(","),
                    i.repo_digests.join(","),
                    i.size
                ),
                None => {
                    return Err(Failure {
                        code: 1,
                        msg: format!("image {image} not present"),
                    });
                }
            }
        }
        Cmd::Rmi { image } => {
            let mut img = ImageServiceClient::new(channel);
            img.remove_image(RemoveImageRequest {
                image: spec(&image),
            })
            .await?;
            println!("removed {image}");
        }
        Cmd::Fsinfo => {
            let mut img = ImageServiceClient::new(channel);
            let r = img.image_fs_info(ImageFsInfoRequest {}).await?.into_inner();
            for fs in r.image_filesystems {
                let mount = fs.fs_id.map(|f| f.mountpoint).unwrap_or_default();
                let used = fs.used_bytes.map(|u| u.value).unwrap_or(0);
                println!("{mount} used_bytes={used}");
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ni-cri: cannot start runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let timeout = Duration::from_secs(cli.timeout);
    let result = rt.block_on(async move {
        match tokio::time::timeout(timeout, run(cli)).await {
            Ok(r) => r,
            Err(_) => Err(Failure::new(format!(
                "timed out after {}s",
                timeout.as_secs()
            ))),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("ni-cri: {}", f.msg);
            ExitCode::from(f.code)
        }
    }
}
