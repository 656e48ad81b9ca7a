//! The `wasmpilot` binary: parse the command line, set up logging, run the subcommand, and print
//! a failure as its error and each cause once.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // Before the runtime's threads: they take their malloc arena at their first allocation.
    wasmpilot::heap::use_one_arena();
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> ExitCode {
    let cli = cli::Cli::parse();
    wasmpilot::host::init_tracing(&cli.log, cli.log_format);
    match cli.run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", wasmpilot::error_report::for_terminal(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}
