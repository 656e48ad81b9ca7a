//! Command line: `run` (the controller), `deploy` (ship an operator), `push` (publish a component
//! to an OCI registry), `run-phase` (one phase offline from files), `crd` (print the
//! WasmOperator CRD), the authoring loop (`init`, `build`, `simulate`, `graph`, `plan`) and the
//! upgrade evidence (`capture`, `replay`).

use anyhow::Context;
use clap::{Parser, Subcommand};
use kube::CustomResourceExt;
use std::path::PathBuf;
use wasmpilot::crd::WasmOperator;
use wasmpilot::sandbox::SandboxLimits;

#[derive(Parser)]
#[command(
    name = "wasmpilot",
    version,
    about = "Kubernetes operators whose logic runs as sandboxed Wasm components"
)]
pub struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `info,wasmpilot=debug`.
    // display_order: listed after each command's own options in its help.
    #[arg(
        long,
        env = "WASMPILOT_LOG",
        default_value = "info",
        global = true,
        display_order = 1000
    )]
    pub log: String,
    /// Log lines as plain text or one JSON object per line (for log pipelines).
    #[arg(
        long,
        env = "WASMPILOT_LOG_FORMAT",
        value_enum,
        default_value_t,
        global = true,
        display_order = 1001
    )]
    pub log_format: wasmpilot::host::LogFormat,
    /// Export traces over OTLP (HTTP, JSON) to this collector, e.g. `http://collector:4318`
    /// (`/v1/traces` is added): a span per reconcile with its worker call, applies and status
    /// write. Off when unset.
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_ENDPOINT",
        global = true,
        display_order = 1002
    )]
    pub otlp_endpoint: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller: load every WasmOperator and reconcile its resources.
    Run(Box<wasmpilot::host::RunArgs>),
    /// Build an operator directory's components and apply its modules, CRDs and WasmOperator.
    Deploy {
        /// The operator directory (holds operator.yaml, crds/ and the worker crates).
        dir: PathBuf,
        /// Use the components already built in the target directory.
        #[arg(long)]
        no_build: bool,
        /// Namespace for the module ConfigMaps.
        #[arg(long, default_value = wasmpilot::modules::DEFAULT_MODULE_NAMESPACE)]
        module_namespace: String,
        /// Do not apply the operator's account and grants (an admin applies `wasmpilot rbac`'s).
        #[arg(long)]
        no_grants: bool,
        /// Namespace of the operator's ServiceAccount (the host's --identity-namespace).
        #[arg(long, default_value = wasmpilot::rbac::DEFAULT_IDENTITY_NAMESPACE)]
        identity_namespace: String,
        /// The host's ServiceAccount as namespace/name (granted reading for the operator and
        /// acting as it).
        #[arg(long, default_value = "wasmpilot-system/wasmpilot")]
        host_service_account: String,
        /// The host's --allow-fetch-from: addresses beyond public ones the definition's module and
        /// Prometheus URLs may name (comma-separated IPs or CIDR blocks). A URL naming another
        /// loopback, link-local or private address is refused here, as the host would.
        #[arg(long, env = "WASMPILOT_ALLOW_FETCH_FROM", value_delimiter = ',')]
        allow_fetch_from: Vec<String>,
    },
    /// Run one phase of an operator offline, from files, and print the decision as YAML (or,
    /// with --finalizer, its finalizer as on the resource's deletion).
    RunPhase {
        /// The WasmOperator manifest.
        #[arg(long)]
        operator: PathBuf,
        /// Directory where `file` module paths resolve.
        #[arg(long)]
        module_dir: PathBuf,
        /// The top-level resource (YAML).
        #[arg(long)]
        resource: PathBuf,
        /// Objects standing in for the cluster (multi-document YAML).
        #[arg(long)]
        objects: Option<PathBuf>,
        /// Phase to run (default: the resource's .status.phase, else the initial phase).
        #[arg(long, conflicts_with = "finalizer")]
        phase: Option<String>,
        /// Run the operator's finalizer (spec.finalizer), as on the resource's deletion, with
        /// its declared inputs selected from --objects; prints done or when it would run again.
        #[arg(long)]
        finalizer: bool,
        /// Clock handed to the worker, RFC 3339 (default: now).
        #[arg(long)]
        now: Option<String>,
        /// Directories of CustomResourceDefinitions saying which output kinds are
        /// cluster-scoped (default: crds/ beside the operator manifest).
        #[arg(long)]
        crds: Vec<PathBuf>,
    },
    /// Scaffold an operator project: types crate, one worker crate per phase, operator.yaml.
    Init(wasmpilot::authoring::init::InitArgs),
    /// Turn another framework's controller into an operator directory.
    #[command(subcommand)]
    Import(ImportCommand),
    /// Write the typed API of an operator's phases into its types crate (types/src/phases.rs)
    /// from operator.yaml, and regenerate its CRD from the types crate.
    Generate(wasmpilot::authoring::generate::GenerateArgs),
    /// Build an operator directory's phase components (release, wasm32-wasip2); print sizes and digests.
    Build {
        /// The operator directory.
        dir: PathBuf,
    },
    /// Run an operator's built components offline, reconcile after reconcile, printing each step.
    Simulate(wasmpilot::authoring::simulate::SimulateArgs),
    /// Print an operator's phase graph as a Mermaid state diagram, or as an SVG image.
    Graph {
        /// The WasmOperator manifest, or the operator directory holding operator.yaml.
        operator: PathBuf,
        /// mermaid (default) or svg.
        #[arg(long, value_enum, default_value_t)]
        format: wasmpilot::authoring::graph::GraphFormat,
    },
    /// Serve a live view of the cluster's operators on localhost (your kubeconfig): phase graphs
    /// with resource counts, resources stalled, failing or stuck, timelines, shadow agreement.
    Dashboard(wasmpilot::dashboard::DashboardArgs),
    /// Show what an operator would do to a live resource now (server-side dry run; writes nothing).
    Plan(wasmpilot::authoring::plan::PlanArgs),
    /// Write the request a live resource would get now, decided by its current module, as a
    /// replay case (writes nothing to the cluster).
    Capture(wasmpilot::evidence::capture::CaptureArgs),
    /// Run recorded or captured cases against a candidate operator; report same / different /
    /// error per case with the changed fields; fail on any difference not declared expected.
    Replay(wasmpilot::evidence::replay::ReplayArgs),
    /// An admin's review of a WasmOperator in the cluster (what it reads, writes and which
    /// sensitive kinds it asks for), then the WasmOperatorGrant consenting to it as it is: its
    /// uid and those kinds. A host with --require-operator-grants runs it only then.
    Grant {
        /// The WasmOperator's name.
        name: String,
        /// Print the grant instead of applying it.
        #[arg(long)]
        dry_run: bool,
        /// A namespace a cluster-scoped resource's outputs may go to (repeat, or comma-separate;
        /// unset: as the grant in the cluster says, else none).
        #[arg(long = "output-namespace", value_delimiter = ',')]
        output_namespaces: Option<Vec<String>>,
        /// An address or CIDR block beyond public ones that this operator's module URLs,
        /// registries and Prometheus may reach (repeat, or comma-separate; unset: as the grant in
        /// the cluster says, else none).
        #[arg(long, value_delimiter = ',')]
        allow_fetch_from: Option<Vec<String>>,
        /// The team it belongs to: the operators of one tenant share one turn of the host's
        /// worker, fetch and compile slots (unset: as the grant in the cluster says, else its own).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Print the version, the build, the WIT package workers are built against and the
    /// wasmtime release the host runs them on.
    Version,
    /// Print a completion script for a shell (`source <(wasmpilot completions bash)`).
    Completions { shell: clap_complete::Shell },
    /// Write man pages (one per command) into a directory.
    Man {
        /// Where to write them, e.g. `/usr/local/share/man/man1`.
        dir: PathBuf,
    },
    /// Make `kubectl wasmpilot …` run this CLI: link `kubectl-wasmpilot` to it in a directory on
    /// PATH (as krew installs plugins).
    KubectlPlugin {
        /// A directory on PATH, e.g. `~/.local/bin`.
        dir: PathBuf,
    },
    /// Print the WasmOperator CustomResourceDefinition (YAML).
    Crd {
        /// The WasmOperatorGrant's instead (the admins' consent to each WasmOperator).
        #[arg(long)]
        grant: bool,
        /// Its reference page instead (Markdown: every field with its type, limits and
        /// description; the documentation site's docs/reference/ pages).
        #[arg(long)]
        markdown: bool,
    },
    /// Publish a built component to an OCI registry as a Wasm artifact; print its digests.
    Push(wasmpilot::modules::oci::PushArgs),
    /// Print an operator's own ServiceAccount, its least-privilege role and binding, and the
    /// host's right to read for it and act as it, for `kubectl apply -f -` (for each
    /// WasmOperator of the manifest).
    Rbac {
        /// The WasmOperator manifest, e.g. examples/autoroute/operator.yaml (one or more
        /// WasmOperators).
        operator: PathBuf,
        /// Grant the operator only in these namespaces (comma-separated; default: cluster-wide).
        #[arg(long, value_delimiter = ',')]
        namespace: Vec<String>,
        /// Namespace of the operator's ServiceAccount (the host's --identity-namespace).
        #[arg(long, default_value = wasmpilot::rbac::DEFAULT_IDENTITY_NAMESPACE)]
        identity_namespace: String,
        /// The host's ServiceAccount as namespace/name: it reads for the operator and may act as
        /// its account.
        #[arg(
            long,
            alias = "service-account",
            default_value = "wasmpilot-system/wasmpilot"
        )]
        host_service_account: String,
        /// Grant nothing to the host (only the operator's account and its roles).
        #[arg(long)]
        no_host_grants: bool,
        /// Ask no cluster for the kinds' plurals and scopes: guess them from the kinds' names
        /// (by default the cluster of the kubeconfig is asked, and each kind it could not tell
        /// is named on stderr).
        #[arg(long)]
        offline: bool,
    },
}

impl Cli {
    pub async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Run(args) => wasmpilot::host::run(*args).await,
            Command::Deploy {
                dir,
                no_build,
                module_namespace,
                no_grants,
                identity_namespace,
                host_service_account,
                allow_fetch_from,
            } => {
                let grants = if no_grants {
                    None
                } else {
                    Some(wasmpilot::rbac::GrantTarget {
                        identity_namespace,
                        host_account: Some(host_account(&host_service_account)?),
                        namespaces: Vec::new(),
                    })
                };
                let opts = wasmpilot::deploy::DeployOptions {
                    dir,
                    no_build,
                    module_namespace,
                    grants,
                    egress: wasmpilot::egress::EgressPolicy::allowing(&allow_fetch_from)?,
                };
                // Everything that can be checked without the cluster is, first.
                let prepared = wasmpilot::deploy::prepare(&opts)?;
                let client = wasmpilot::api_client::connect()
                    .await
                    .context("connecting to the cluster (KUBECONFIG or in-cluster)")?;
                wasmpilot::deploy::deploy(client, &opts, prepared)
                    .await
                    .map(|_| ())
            }
            Command::RunPhase {
                operator,
                module_dir,
                resource,
                objects,
                phase,
                finalizer,
                now,
                crds,
            } => {
                let run = wasmpilot::offline::OfflineRun {
                    operator,
                    module_dir,
                    resource,
                    objects,
                    phase,
                    now,
                    crds,
                };
                let limits = SandboxLimits::default();
                let printed = if finalizer {
                    serde_yaml::to_string(&wasmpilot::offline::run_finalizer(&run, limits).await?)?
                } else {
                    serde_yaml::to_string(&wasmpilot::offline::run_phase(&run, limits).await?)?
                };
                print!("{printed}");
                Ok(())
            }
            Command::Rbac {
                operator,
                namespace,
                identity_namespace,
                host_service_account,
                no_host_grants,
                offline,
            } => {
                let host_account = if no_host_grants {
                    None
                } else {
                    Some(host_account(&host_service_account)?)
                };
                let target = wasmpilot::rbac::GrantTarget {
                    identity_namespace,
                    host_account,
                    namespaces: namespace,
                };
                print!("{}", rbac_yaml(&operator, &target, !offline).await?);
                Ok(())
            }
            Command::Init(args) => wasmpilot::authoring::init::init(&args).map(|_| ()),
            Command::Import(ImportCommand::Metacontroller(args)) => {
                let imported = wasmpilot::authoring::import_metacontroller::import(&args)?;
                eprintln!(
                    "wrote {} ({} files): WasmOperator {} for {}, the hook run unchanged",
                    args.out.display(),
                    imported.files.len(),
                    imported
                        .operator
                        .metadata
                        .name
                        .as_deref()
                        .unwrap_or_default(),
                    imported.operator.spec.resource
                );
                for note in &imported.notes {
                    eprintln!("note: {note}");
                }
                eprintln!(
                    "\nnext:\n  wasmpilot build {0}\n  wasmpilot simulate {0} --resource <parent.yaml>\n  wasmpilot deploy --no-build {0}",
                    args.out.display()
                );
                Ok(())
            }
            Command::Generate(args) => wasmpilot::authoring::generate::run(&args),
            Command::Build { dir } => {
                print!("{}", wasmpilot::authoring::build::build_command(&dir)?);
                Ok(())
            }
            Command::Simulate(args) => {
                let mut out = std::io::stdout().lock();
                wasmpilot::authoring::simulate::simulate(&args, SandboxLimits::default(), &mut out)
                    .await
                    .map(|_| ())
            }
            Command::Graph { operator, format } => {
                print!(
                    "{}",
                    wasmpilot::authoring::graph::graph_command(&operator, format)?
                );
                Ok(())
            }
            Command::Dashboard(args) => {
                let client = wasmpilot::api_client::connect()
                    .await
                    .context("connecting to the cluster (set KUBECONFIG)")?;
                wasmpilot::dashboard::run(&args, client).await
            }
            Command::Plan(args) => {
                let client = wasmpilot::api_client::connect()
                    .await
                    .context("connecting to the cluster (set KUBECONFIG)")?;
                let mut out = std::io::stdout().lock();
                wasmpilot::authoring::plan::plan(client, &args, SandboxLimits::default(), &mut out)
                    .await
                    .map(|_| ())
            }
            Command::Capture(args) => {
                let client = wasmpilot::api_client::connect()
                    .await
                    .context("connecting to the cluster (KUBECONFIG)")?;
                let case =
                    wasmpilot::evidence::capture::capture(client, &args, SandboxLimits::default())
                        .await?;
                let text = serde_json::to_string_pretty(&case)? + "\n";
                match &args.output {
                    Some(path) => std::fs::write(path, text)
                        .with_context(|| format!("writing {}", path.display()))?,
                    None => print!("{text}"),
                }
                Ok(())
            }
            Command::Replay(args) => {
                let mut out = std::io::stdout();
                let summary =
                    wasmpilot::evidence::replay::replay(&args, SandboxLimits::default(), &mut out)
                        .await?;
                if !summary.passed() {
                    anyhow::bail!(
                        "{} of {} cases decided differently than recorded, {} made no decision",
                        summary.unexpected,
                        summary.cases,
                        summary.errors
                    );
                }
                Ok(())
            }
            Command::Crd {
                grant,
                markdown: true,
            } => {
                let (title, crd) = if grant {
                    (
                        "WasmOperatorGrant reference",
                        serde_json::to_value(wasmpilot::crd::WasmOperatorGrant::crd())?,
                    )
                } else {
                    (
                        "WasmOperator reference",
                        serde_json::to_value(WasmOperator::crd())?,
                    )
                };
                print!("{}", wasmpilot::crd_reference::reference_page(title, &crd));
                Ok(())
            }
            Command::Crd {
                grant: false,
                markdown: false,
            } => {
                print!("{}", serde_yaml::to_string(&WasmOperator::crd())?);
                Ok(())
            }
            Command::Version => {
                println!("{}", wasmpilot::shell::version_text());
                Ok(())
            }
            Command::Completions { shell } => {
                let mut command = <Cli as clap::CommandFactory>::command();
                let name = command.get_name().to_string();
                clap_complete::generate(shell, &mut command, name, &mut std::io::stdout());
                Ok(())
            }
            Command::Man { dir } => {
                let written = wasmpilot::shell::write_man_pages(
                    <Cli as clap::CommandFactory>::command(),
                    &dir,
                )?;
                println!("wrote {} man pages into {}", written.len(), dir.display());
                Ok(())
            }
            Command::KubectlPlugin { dir } => {
                let link = wasmpilot::shell::install_kubectl_plugin(&dir)?;
                println!(
                    "{} → this wasmpilot: `kubectl wasmpilot …` runs it while {} is on PATH",
                    link.display(),
                    dir.display()
                );
                Ok(())
            }
            Command::Crd {
                grant: true,
                markdown: false,
            } => {
                print!(
                    "{}",
                    serde_yaml::to_string(&wasmpilot::crd::WasmOperatorGrant::crd())?
                );
                Ok(())
            }
            Command::Push(args) => wasmpilot::modules::oci::push_command(args).await,
            Command::Grant {
                name,
                dry_run,
                output_namespaces,
                allow_fetch_from,
                tenant,
            } => {
                let extras = wasmpilot::operator_grant::GrantExtras {
                    output_namespaces,
                    allow_fetch_from,
                    tenant,
                };
                wasmpilot::operator_grant::grant_command(&name, dry_run, &extras).await
            }
        }
    }
}

/// `namespace/name` of the host's ServiceAccount.
fn host_account(text: &str) -> anyhow::Result<(String, String)> {
    let (ns, name) = text
        .split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
        .ok_or_else(|| {
            anyhow::anyhow!("--host-service-account must be namespace/name, got {text:?}")
        })?;
    Ok((ns.to_string(), name.to_string()))
}

/// The grants of every WasmOperator of the manifest at `operator`, each kind's plural and scope
/// as `client`'s cluster serves it (guessed without one).
async fn rbac_yaml(
    operator: &std::path::Path,
    target: &wasmpilot::rbac::GrantTarget,
    ask_cluster: bool,
) -> anyhow::Result<String> {
    let mut out = String::new();
    let operators = wasmpilot::offline::read_operators(operator)?;
    let mut named = Vec::with_capacity(operators.len());
    for op in operators {
        let name = operator_name(operator, &op)?;
        // Grants for a definition the host refuses are no use (and a name too long for a label
        // cannot even be applied): refused before the cluster is asked anything.
        wasmpilot::definition::OperatorDefinition::validate(&name, &op.spec).with_context(
            || {
                format!(
                    "{}: WasmOperator {name}: the host would refuse it, so no grants are printed",
                    operator.display()
                )
            },
        )?;
        named.push((name, op));
    }
    let client = if ask_cluster {
        match kube::Client::try_default().await {
            Ok(client) => Some(client),
            Err(e) => {
                let note = format!("no cluster to ask for the kinds' plurals ({}): they are guessed from the kinds' names and every kind is taken as namespaced", wasmpilot::error_report::Brief(&e));
                eprintln!("NOTE: {note}");
                out.push_str(&format!("# NOTE: {note}\n"));
                None
            }
        }
    } else {
        None
    };
    for (name, op) in named {
        let known = match &client {
            Some(client) => {
                let (known, notes) = wasmpilot::rbac::served_kinds(client, &op.spec).await;
                for note in notes {
                    eprintln!("NOTE: {note}");
                    out.push_str(&format!("# NOTE: {note}\n"));
                }
                known
            }
            None => Default::default(),
        };
        wasmpilot::rbac::check_target(&op.spec, &known, target)
            .with_context(|| format!("{}: WasmOperator {name}", operator.display()))?;
        out.push_str(&operator_rbac_yaml(operator, &op, &known, target)?);
    }
    Ok(out)
}

/// The name of a WasmOperator of the manifest at `path`, which it must have.
fn operator_name(path: &std::path::Path, op: &WasmOperator) -> anyhow::Result<String> {
    op.metadata
        .name
        .clone()
        .ok_or_else(|| anyhow::anyhow!("{}: metadata.name is required", path.display()))
}

/// The grants of one WasmOperator of the manifest at `path` (a valid definition).
fn operator_rbac_yaml(
    path: &std::path::Path,
    op: &WasmOperator,
    known: &std::collections::BTreeMap<wasmpilot::crd::KindRef, wasmpilot::rbac::KnownKind>,
    target: &wasmpilot::rbac::GrantTarget,
) -> anyhow::Result<String> {
    let name = operator_name(path, op)?;
    let mut out = String::new();
    // Sensitive kinds get the admin's attention: on stderr, and atop what is applied.
    let mut sensitive: Vec<String> = wasmpilot::definition::sensitive_uses(&op.spec)
        .into_iter()
        .map(|(k, field, _)| format!("{} {} ({field})", k.api_version, k.kind))
        .collect();
    sensitive.dedup();
    if !sensitive.is_empty() {
        let warning = format!(
            "WARNING: operator {name} is granted sensitive kinds{}: {}",
            if target.namespaces.is_empty() {
                " cluster-wide"
            } else {
                ""
            },
            sensitive.join(", ")
        );
        eprintln!("{warning}");
        out.push_str(&format!("# {warning}\n"));
    }
    for doc in wasmpilot::rbac::grant_manifests(&name, &op.spec, known, target) {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&doc)?);
    }
    Ok(out)
}

/// `wasmpilot import <framework>`.
#[derive(clap::Subcommand, Debug)]
pub enum ImportCommand {
    /// A Metacontroller CompositeController and its hook file (Python or JavaScript): writes
    /// operator.yaml and the workers running the hook unchanged, and notes what is done
    /// otherwise (the customize hook, generateSelector, rolling update strategies).
    Metacontroller(wasmpilot::authoring::import_metacontroller::ImportMetacontrollerArgs),
}
