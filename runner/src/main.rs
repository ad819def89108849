//! The `flexrun` binary: parses the command line, sets up tracing, runs
//! [`flexrun::cli::run`], and maps errors to exit codes: 2 for bad input
//! (flags, parameters, files; reported before anything connects), 1 for a runtime failure.

use clap::Parser;
use flexrun::cli::Cli;
use flexrun::UsageError;
use std::process::ExitCode;

#[cfg(feature = "alloc-mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
#[cfg(feature = "alloc-jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    #[cfg(not(any(feature = "alloc-mimalloc", feature = "alloc-jemalloc")))]
    let malloc = flexrun::malloc::tune();
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FLEXRUN_LOG").unwrap_or_else(|_| "info,rdkafka=warn".into()),
        )
        .with_writer(std::io::stderr)
        // Colour only on a terminal: a log piped to a file or a collector stays plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    #[cfg(not(any(feature = "alloc-mimalloc", feature = "alloc-jemalloc")))]
    if let Err(why) = malloc {
        tracing::debug!(?why, "glibc malloc left at its settings");
    }
    match flexrun::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<UsageError>().is_some() => {
            match e.downcast_ref::<UsageError>().and_then(|u| u.json.as_ref()) {
                Some(json) => println!("{json:#}"),
                None => eprintln!("error: {e}"),
            }
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
