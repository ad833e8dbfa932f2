//! The `afk` command-line tool. Subcommands live in `src/cli/`, one module each.

#[path = "../cli/mod.rs"]
mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
