//! `fleet-service [--store URL] [--worker-id ID] [--tool-delay-ms N]`: reads requests
//! (`<thread> <text>`, one a line) on stdin and starts a run for each; a worker finishes the
//! runs nobody works on. Runs until Ctrl-C or SIGTERM, then shuts down gracefully.

use std::process::ExitCode;

use fleet_service::{Options, agent, parse_request, serve};
use tokio::sync::mpsc;

#[tokio::main]
async fn main() -> ExitCode {
    let opts = match Options::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fleet-service: {e}");
            return ExitCode::from(2);
        }
    };
    let store = match afk::open(&opts.store).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fleet-service: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !store.capabilities().attention {
        eprintln!(
            "fleet-service: warning: the {} store keeps no index of runs that need attention: \
             its worker cannot find the runs a crash leaves unfinished",
            store.capabilities().name
        );
    }
    println!("worker {} serving", opts.worker_id);
    let stats = serve(
        store,
        &opts.worker_id,
        agent(opts.tool_delay),
        stdin(),
        signal(),
    )
    .await;
    println!("stopped; the worker resumed {} run(s)", stats.resumed);
    ExitCode::SUCCESS
}

/// The requests read on stdin, by a thread of their own (a read blocks; the thread ends with
/// the process).
fn stdin() -> mpsc::Receiver<(afk::ThreadId, String)> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            match parse_request(&line) {
                Ok(request) => {
                    if tx.blocking_send(request).is_err() {
                        break;
                    }
                }
                Err(e) => eprintln!("fleet-service: ignored {line:?}: {e}"),
            }
        }
    });
    rx
}

/// Ctrl-C, or SIGTERM on Unix.
async fn signal() {
    #[cfg(unix)]
    let term = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
