//! Terminal output shared by subcommands: progress bars and the drain-on-signal handler.

use tokio::sync::watch;

/// A progress bar of `len` steps on stderr, drawn only when stderr is a terminal (logs
/// and CI output stay clean).
pub fn progress_bar(len: u64, template: &str) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(len);
    b.set_style(indicatif::ProgressStyle::with_template(template).expect("valid progress template"));
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        b.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    b
}

/// On the first SIGINT/SIGTERM, set `tx` (the job drains: open batches finish and
/// the checkpoint stays consistent); on the second, exit at once with status 130.
pub fn spawn_signal_handler(tx: watch::Sender<bool>) {
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        for n in 0.. {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            if n == 0 {
                eprintln!("draining: finishing the open batches (signal again to exit at once; the checkpoint stays consistent)");
                // send_replace stores the value even before anything subscribed (a
                // plain send is dropped when no receiver exists yet, and the drain was lost).
                tx.send_replace(true);
            } else {
                eprintln!("exiting without draining");
                std::process::exit(130);
            }
        }
    });
}
