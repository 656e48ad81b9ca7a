//! The `wasmpilot` binary: parse the command line, set up logging, run the subcommand.

mod cli;

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    cli::init_tracing(&cli.log);
    cli.run().await
}
