//! The integration tests of `afk-cli`, as one test binary: each module was a
//! `tests/<module>.rs` of its own. One binary per crate, because each test binary links the
//! whole dependency graph: add a new test file here as a module, not as another `tests/*.rs`.

mod cli_attention;
mod cli_console;
mod cli_demo;
mod cli_fixtures;
mod cli_fork;
mod cli_fork_running;
mod cli_inspect;
mod cli_logging;
mod cli_maintain;
mod cli_ops;
mod cli_progress;
mod cli_redis_index;
mod cli_rekey;
mod cli_seal;
mod cli_seal_kms;
mod cli_serve;
mod cli_servers;
mod cli_settle;
mod cli_sweep;
mod common;
