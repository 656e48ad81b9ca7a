//! `wasmpilot-host`, the binary the cluster image runs: `run` (the controller) and `crd` (the
//! WasmOperator CRD it serves). The authoring and deployment tools are the `wasmpilot` binary.

use clap::{Parser, Subcommand};
use kube::CustomResourceExt;
use std::process::ExitCode;
use wasmpilot_runtime::crd::WasmOperator;

#[derive(Parser)]
#[command(
    name = "wasmpilot-host",
    version,
    about = "The wasmpilot operator host (the authoring and deployment tools are `wasmpilot`)"
)]
struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `info,wasmpilot_runtime=debug`.
    #[arg(long, env = "WASMPILOT_LOG", default_value = "info", global = true)]
    log: String,
    /// Log lines as plain text or one JSON object per line (for log pipelines).
    #[arg(
        long,
        env = "WASMPILOT_LOG_FORMAT",
        value_enum,
        default_value_t,
        global = true
    )]
    log_format: wasmpilot_runtime::host::LogFormat,
    /// Export traces over OTLP (HTTP, JSON) to this collector, e.g. `http://collector:4318`
    /// (`/v1/traces` is added): a span per reconcile with its worker call, applies and status
    /// write. Off when unset.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", global = true)]
    otlp_endpoint: Option<String>,
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the `run` variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the controller: load every WasmOperator and reconcile its resources.
    Run(wasmpilot_runtime::host::RunArgs),
    /// Print the WasmOperator CustomResourceDefinition as YAML.
    Crd,
}

fn main() -> ExitCode {
    wasmpilot_runtime::host::run_main(run)
}

async fn run() -> ExitCode {
    let cli = Cli::parse();
    let traces = match wasmpilot_runtime::host::init_tracing(
        &cli.log,
        cli.log_format,
        cli.otlp_endpoint.as_deref(),
    ) {
        Ok(traces) => traces,
        Err(e) => {
            eprintln!("{}", wasmpilot_runtime::error_report::for_terminal(&e));
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Run(args) => wasmpilot_runtime::host::run(args).await,
        Command::Crd => serde_yaml::to_string(&WasmOperator::crd())
            .map(|yaml| print!("{yaml}"))
            .map_err(Into::into),
    };
    if let Some(traces) = traces {
        // The exporter's last batch, sent from a thread that may block.
        let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "{}",
                wasmpilot_runtime::error_report::for_terminal(e.as_ref())
            );
            ExitCode::FAILURE
        }
    }
}
