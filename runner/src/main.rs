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

/// Status of a process ended by SIGPIPE (128 + 13), as a shell reports `cmd | head`.
const BROKEN_PIPE_STATUS: i32 = 141;

/// `flexrun estimate ... | head`: when the reader of stdout goes away, end quietly with
/// the status other command-line tools get from SIGPIPE, instead of the panic that
/// `println!` raises on a broken pipe. Every other panic is reported as before.
fn end_quietly_on_a_broken_stdout() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg =
            payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied());
        if msg.is_some_and(|m| m.starts_with("failed printing to stdout") && m.contains("Broken pipe")) {
            std::process::exit(BROKEN_PIPE_STATUS);
        }
        report(info)
    }));
}

fn main() -> ExitCode {
    end_quietly_on_a_broken_stdout();
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
