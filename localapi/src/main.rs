//! `boxtable-localapi`: runs the local API server as a process for scripts and demos.

use std::path::PathBuf;
use std::process::ExitCode;

use boxtable_localapi::LocalApi;
use clap::Parser;

/// Development-only local Kubernetes API server (plain HTTP on 127.0.0.1).
#[derive(Debug, Parser)]
#[command(name = "boxtable-localapi", version)]
struct Args {
    /// Port to listen on (0 = any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// CRD YAML file to load at start (repeatable).
    #[arg(long = "crd")]
    crds: Vec<PathBuf>,
    /// Write a kubeconfig for this server to PATH.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Extra namespace to create at start (repeatable).
    #[arg(long = "namespace")]
    namespaces: Vec<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut builder = LocalApi::builder().port(args.port);
    for c in &args.crds {
        builder = builder.crd_file(c);
    }
    for ns in &args.namespaces {
        builder = builder.namespace(ns);
    }
    let api = match builder.start().await {
        Ok(api) => api,
        Err(e) => {
            eprintln!("boxtable-localapi: {}", chain(&e));
            return ExitCode::FAILURE;
        }
    };
    if let Some(path) = &args.kubeconfig
        && let Err(e) = api.write_kubeconfig(path)
    {
        eprintln!(
            "boxtable-localapi: writing kubeconfig {}: {e}",
            path.display()
        );
        return ExitCode::FAILURE;
    }
    println!("{}", api.url());
    wait_for_signal().await;
    api.shutdown().await;
    ExitCode::SUCCESS
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
