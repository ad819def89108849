//! `flexrun web`: the cost-estimate page, job pages and `/metrics`.

use crate::usage;
use anyhow::Result;
use clap::Args;

/// `flexrun web ...`
#[derive(Debug, Args)]
pub struct WebArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: String,
}

/// Serve until Ctrl-C.
pub async fn run(a: &WebArgs) -> Result<()> {
    let addr = &a.addr;
    let (bound, h) = flexrun_web::serve(addr, flexrun_web::JobRegistry::default())
        .await
        .map_err(|e| usage(format!("--addr {addr}: cannot listen: {e}")))?;
    println!("flexrun web: http://{bound}/estimate (jobs: http://{bound}/jobs, metrics: http://{bound}/metrics)");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = h => {}
    }
    Ok(())
}
