//! The `wasmpilot` binary: parse the command line, set up logging, run the subcommand, and print
//! a failure as its error and each cause once.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    wasmpilot::host::run_main(run)
}

async fn run() -> ExitCode {
    // Run as `kubectl wasmpilot …`, its help and errors name the command as typed.
    let cli = if wasmpilot::shell::invoked_as_kubectl_plugin() {
        use clap::{CommandFactory, FromArgMatches};
        let matches = cli::Cli::command()
            .bin_name("kubectl wasmpilot")
            .get_matches();
        match cli::Cli::from_arg_matches(&matches) {
            Ok(cli) => cli,
            Err(e) => e.exit(),
        }
    } else {
        cli::Cli::parse()
    };
    let traces =
        match wasmpilot::host::init_tracing(&cli.log, cli.log_format, cli.otlp_endpoint.as_deref())
        {
            Ok(traces) => traces,
            Err(e) => {
                eprintln!("{}", wasmpilot::error_report::for_terminal(&e));
                return ExitCode::FAILURE;
            }
        };
    let result = cli.run().await;
    if let Some(traces) = traces {
        // The exporter's last batch, sent from a thread that may block.
        let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", wasmpilot::error_report::for_terminal(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}
