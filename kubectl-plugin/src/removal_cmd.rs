//! `remove` and `status irj/NAME` against the cluster: create the job,
//! read it and the NodeImages, print what `remove` renders.

use crate::{Cli, EXIT_FAILED_NODES, Error, Output, RemoveArgs, client, follow, pull, remove};
use std::process::ExitCode;

/// `remove`: creates the job; with `--wait`, follows it to its end.
pub async fn remove_images(cli: &Cli, args: &RemoveArgs) -> Result<ExitCode, Error> {
    let nodes = match (&args.nodes, &args.selector) {
        (Some(names), _) => pull::Nodes::Names(names.clone()),
        (None, Some(s)) => pull::Nodes::Selector(s.clone()),
        (None, None) => pull::Nodes::All,
    };
    let job = remove::job(&remove::Request {
        images: args.images.clone(),
        nodes,
        name: args.name.clone(),
        parallelism: args.parallelism,
        force: args.force,
        block: args.block,
    })?;
    let (client, _) = client(cli).await?;
    let api: kube::Api<nodeimage_api::ImageRemovalJob> = kube::Api::all(client.clone());
    let created = api.create(&kube::api::PostParams::default(), &job).await?;
    let name = created.metadata.name.unwrap_or_default();
    follow::print_line(&format!("imageremovaljob/{name} created"))?;
    if !args.wait {
        return Ok(ExitCode::SUCCESS);
    }
    removal_status(&client, &name, true, args.output).await
}

/// `status irj/NAME`: one row per node holding the job's entry; with
/// `watch`, printed again on each change until the job ends.
pub async fn removal_status(
    client: &kube::Client,
    name: &str,
    watch: bool,
    output: Output,
) -> Result<ExitCode, Error> {
    let jobs: kube::Api<nodeimage_api::ImageRemovalJob> = kube::Api::all(client.clone());
    let nodeimages: kube::Api<nodeimage_api::NodeImage> = kube::Api::all(client.clone());
    let mut last = String::new();
    loop {
        let Some(job) = jobs.get_opt(name).await? else {
            return Err(Error::RemovalJobNotFound(name.to_string()));
        };
        let list = nodeimages.list(&Default::default()).await?;
        let rows = remove::rows(&job, &list.items);
        let text = match output {
            Output::Table => remove::table(&job, &rows),
            Output::Json => format!(
                "{}\n",
                serde_json::to_string(&serde_json::json!({"job": job, "nodes": rows}))?
            ),
        };
        if text != last {
            follow::write_all(&text)?;
            last = text;
        }
        let status = job.status.unwrap_or_default();
        if !watch || status.completion_time.is_some() {
            return Ok(if watch && status.failed > 0 {
                ExitCode::from(EXIT_FAILED_NODES)
            } else {
                ExitCode::SUCCESS
            });
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }
}
