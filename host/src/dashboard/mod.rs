//! `wasmpilot dashboard`: a live view of the cluster's operators on localhost, read with the
//! user's kubeconfig (as `kubectl argo rollouts dashboard` does): phase graphs with counts, resources needing attention, timelines.

pub mod overview;
pub mod page;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client};
use serde_json::Value;

use crate::crd::WasmOperator;
use crate::definition::OperatorDefinition;
use overview::OperatorOverview;

/// `wasmpilot dashboard`.
#[derive(clap::Args, Debug)]
pub struct DashboardArgs {
    /// Where to serve the page (port 0: any free port; the URL is printed).
    #[arg(long, default_value = "127.0.0.1:8090")]
    pub address: SocketAddr,
    /// A resource this long in a phase that is neither final nor ready is listed as stuck.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub stuck_after: Duration,
    /// How often the open page refreshes itself.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub refresh: Duration,
    /// Host names the page may be opened by, besides `localhost` and IP addresses
    /// (comma-separated, e.g. `ops-laptop.example.com`): a request naming any other is refused,
    /// so a web page whose own name resolves to this machine cannot read it.
    #[arg(long, value_delimiter = ',')]
    pub accept_host: Vec<String>,
}

struct Dashboard {
    client: Client,
    stuck_after: Duration,
    refresh: Duration,
}

/// Why a page could not be built.
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    #[error("listing WasmOperators: {0}")]
    ListOperators(#[source] kube::Error),
    #[error("no WasmOperator {0}")]
    NoOperator(String),
    #[error("reading WasmOperator {name}: {source}")]
    ReadOperator {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    KindNotServed(#[from] crate::kinds::KindNotServed),
    #[error("reading {what}: {source}")]
    ReadResource {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0} not found")]
    NoResource(String),
}

impl IntoResponse for DashboardError {
    fn into_response(self) -> Response {
        let status = match self {
            DashboardError::NoOperator(_) | DashboardError::NoResource(_) => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_GATEWAY,
        };
        let text = crate::worker_text::bound_owned(format!("{self:#}"), 2048);
        (status, text).into_response()
    }
}

/// Runs the dashboard until interrupted.
pub async fn run(args: &DashboardArgs, client: Client) -> anyhow::Result<()> {
    let state = Arc::new(Dashboard {
        client,
        stuck_after: args.stuck_after,
        refresh: args.refresh,
    });
    let app = Router::new()
        .route("/", get(overview_page))
        .route("/api/overview", get(overview_json))
        .route(
            "/operators/{operator}/resources/{namespace}/{name}",
            get(resource_page),
        )
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(args.accept_host.clone()),
            only_local_names,
        ))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(args.address)
        .await
        .with_context(|| format!("listening on {}", args.address))?;
    let address = listener.local_addr()?;
    println!("wasmpilot dashboard: http://{address}/ (Ctrl-C stops it)");
    use std::io::Write as _;
    std::io::stdout().flush()?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// Answers only requests naming this machine as `localhost` or by an IP address. A page from
/// another site, whose name its DNS made resolve to 127.0.0.1 (DNS rebinding), names its own
/// host, and would otherwise read the cluster through the user's credentials (as `kubectl
/// proxy --accept-hosts` guards against).
async fn only_local_names(
    State(accepted): State<Arc<Vec<String>>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    if host_accepted(host, &accepted) {
        return next.run(request).await;
    }
    (
        StatusCode::FORBIDDEN,
        "the dashboard answers only to localhost, an IP address or a name given with --accept-host: a request naming another host may come from a page that made its name resolve to this machine",
    )
        .into_response()
}

/// Whether a `Host` header names `localhost`, an IP address or one of the `accepted` names
/// (with or without a port).
fn host_accepted(host: &str, accepted: &[String]) -> bool {
    if let Some(bracketed) = host.strip_prefix('[') {
        return bracketed.split_once(']').is_some_and(|(ip, port)| {
            (port.is_empty() || port.starts_with(':')) && ip.parse::<std::net::Ipv6Addr>().is_ok()
        });
    }
    let name = host.rsplit_once(':').map_or(host, |(name, _)| name);
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<std::net::Ipv4Addr>().is_ok()
        || accepted
            .iter()
            .any(|a| !a.is_empty() && name.eq_ignore_ascii_case(a))
}

/// Every WasmOperator with its resources, read now.
async fn gather(d: &Dashboard) -> Result<Vec<OperatorOverview>, DashboardError> {
    let operators = Api::<WasmOperator>::all(d.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(DashboardError::ListOperators)?;
    let now = jiff::Timestamp::now();
    let views = operators.items.iter().map(|op| async move {
        let name = op.metadata.name.clone().unwrap_or_default();
        let definition = OperatorDefinition::validate(&name, &op.spec);
        let resources = match &definition {
            Ok(_) => list_resources(&d.client, op).await,
            Err(_) => Ok(Vec::new()),
        };
        overview::summarize(
            op,
            definition
                .as_ref()
                .map_err(|e| e as &(dyn std::error::Error + 'static)),
            resources
                .as_deref()
                .map_err(|e| e as &(dyn std::error::Error + 'static)),
            now,
            d.stuck_after,
        )
    });
    let mut views = futures::future::join_all(views).await;
    views.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(views)
}

async fn list_resources(client: &Client, op: &WasmOperator) -> Result<Vec<Value>, DashboardError> {
    let kind = crate::kinds::resolve(client, &op.spec.resource, "spec.resource").await?;
    let api: Api<DynamicObject> = kind.api(client, None);
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|source| DashboardError::ReadResource {
                what: op.spec.resource.to_string(),
                source,
            })?;
        out.extend(
            page.items
                .into_iter()
                .filter_map(|o| serde_json::to_value(o).ok()),
        );
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok(out)
}

fn wants_fragment(query: &HashMap<String, String>) -> bool {
    query.get("fragment").is_some_and(|v| v == "1")
}

fn html(d: &Dashboard, title: &str, body: String, fragment: bool) -> Response {
    let text = if fragment {
        body
    } else {
        page::document(title, &body, d.refresh.as_millis() as u64)
    };
    ([(header::CACHE_CONTROL, "no-store")], Html(text)).into_response()
}

async fn overview_page(
    State(d): State<Arc<Dashboard>>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, DashboardError> {
    let views = gather(&d).await?;
    Ok(html(
        &d,
        "wasmpilot: operators",
        page::overview_fragment(&views),
        wants_fragment(&query),
    ))
}

async fn overview_json(State(d): State<Arc<Dashboard>>) -> Result<Response, DashboardError> {
    let views = gather(&d).await?;
    let body = serde_json::to_string(&views).unwrap_or_else(|_| "[]".into());
    Ok((
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response())
}

async fn resource_page(
    State(d): State<Arc<Dashboard>>,
    Path((operator, namespace, name)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, DashboardError> {
    let op = Api::<WasmOperator>::all(d.client.clone())
        .get_opt(&operator)
        .await
        .map_err(|source| DashboardError::ReadOperator {
            name: operator.clone(),
            source,
        })?
        .ok_or_else(|| DashboardError::NoOperator(operator.clone()))?;
    let kind = crate::kinds::resolve(&d.client, &op.spec.resource, "spec.resource").await?;
    let namespace = (namespace != "-").then_some(namespace);
    let what = format!(
        "{} {}",
        op.spec.resource.kind,
        match &namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.clone(),
        }
    );
    let obj = kind
        .api(&d.client, namespace.as_deref())
        .get_opt(&name)
        .await
        .map_err(|source| DashboardError::ReadResource {
            what: what.clone(),
            source,
        })?
        .ok_or_else(|| DashboardError::NoResource(what.clone()))?;
    let obj = serde_json::to_value(obj).unwrap_or_default();
    let detail = overview::detail(&operator, &obj);
    Ok(html(
        &d,
        &format!("wasmpilot: {what}"),
        page::resource_fragment(&detail),
        wants_fragment(&query),
    ))
}

#[cfg(test)]
mod tests {
    use super::host_accepted;

    #[test]
    fn only_this_machines_names_are_answered() {
        for host in [
            "127.0.0.1:8090",
            "127.0.0.1",
            "localhost:8090",
            "LOCALHOST",
            "[::1]:8090",
            "[::1]",
            "10.0.0.7:8090",
        ] {
            assert!(host_accepted(host, &[]), "{host}");
        }
        for host in [
            "",
            "rebound.example:8090",
            "rebound.example",
            "localhost.rebound.example",
            "127.0.0.1.nip.io:8090",
            "[::1]x",
            "[rebound.example]:8090",
        ] {
            assert!(!host_accepted(host, &[]), "{host}");
        }
        // Names the user accepts, and only those.
        let accepted = ["ops-laptop.example.com".to_string()];
        assert!(host_accepted("OPS-laptop.example.com:8090", &accepted));
        assert!(!host_accepted("rebound.example:8090", &accepted));
        assert!(!host_accepted("laptop.example.com:8090", &accepted));
    }
}
