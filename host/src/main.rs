//! The `wasmpilot` binary: parse the command line, set up logging, run the subcommand, and print
//! a failure as its error and each cause once.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    wasmpilot::host::run_main(run)
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
