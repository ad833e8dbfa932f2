use std::sync::Arc;
use std::time::Duration;

use afk::ThreadId;
use afk::runner::{Agent, Runner, RunnerConfig, Worker, WorkerConfig, WorkerStats};
use afk::store::Store;
use tokio::sync::mpsc;

use crate::{Runs, print_worker};

/// Start a run for each request (a thread and the user's text) until `stop` resolves, while a
/// worker finishes the runs nobody works on. Nothing here calls `resume`.
pub async fn serve(
    store: Arc<dyn Store>,
    worker_id: &str,
    agent: Agent,
    mut requests: mpsc::Receiver<(ThreadId, String)>,
    stop: impl Future<Output = ()>,
) -> WorkerStats {
    // Runs this process holds name `worker_id` in their index entry, with a lease it renews.
    // Keep the id across restarts: the worker takes its own runs back at once; any other
    // worker takes them once the lease has expired by its clock, plus the skew allowance.
    let config = RunnerConfig::default()
        .with_owner(worker_id)
        .with_lease(Duration::from_secs(30))
        .with_lease_skew(Duration::from_secs(5));
    let runner = Runner::new(store, config);
    let worker = Worker::new(runner.clone())
        .register(agent.clone())
        .with_config(WorkerConfig::default())
        .start();
    let (mut runs, mut seen) = (Runs::default(), WorkerStats::default());
    let mut open = true;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = tick.tick() => print_worker(&worker, &mut seen),
            request = requests.recv(), if open => match request {
                Some((thread, text)) => {
                    let run = runner.run(&agent, &thread, text);
                    println!("started run {} in thread {thread}", run.run_id());
                    runs.watch(run); // prints its outcome; nobody waits for it
                }
                None => open = false, // no more requests: go on finishing runs until stopped
            },
        }
    }
    // Graceful: runs in flight stop at their next safe point and let go of their leases, so
    // another worker (or this one, restarted) continues them at once.
    runs.interrupt(Duration::from_secs(10)).await;
    worker.shutdown().await
}
