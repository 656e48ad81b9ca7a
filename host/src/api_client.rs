//! The host's Kubernetes API client: kube's default stack, with TCP_NODELAY on its connections.
//! Without it each new connection (one per watch) stalls ~40 ms after the TLS handshake.
//!
//! kube's client leaves Nagle's algorithm on: the request written right after the handshake's
//! last record waits for that record's ACK, which the API server delays (Linux: 40 ms). Every
//! watch holds a connection of its own, so a start opens several; measured with strace on the
//! local cluster, the first request of each new connection answered 43 ms after it was written.
//! The stack below is kube's own (`ClientBuilder::try_from`), minus its request tracing; a
//! kubeconfig whose exec plugin hands out client certificates (whose expiry only kube's builder
//! tracks) or that names a proxy gets kube's builder unchanged.

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use kube::{Client, Config};
use tower::{BoxError, ServiceBuilder};

/// The client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no Kubernetes configuration (in-cluster or kubeconfig): {0}")]
    Config(#[from] kube::config::InferConfigError),
    #[error("building the Kubernetes client: {0}")]
    Build(#[from] kube::Error),
}

/// A client from the environment (in-cluster config, else `$KUBECONFIG` / `~/.kube/config`),
/// as `kube::Client::try_default` finds it.
pub async fn connect() -> Result<Client, ClientError> {
    Ok(from_config(Config::infer().await?)?)
}

/// A client for `config` (see the module comment for what differs from kube's).
pub fn from_config(config: Config) -> Result<Client, kube::Error> {
    if config.proxy_url.is_some() || config.auth_info.exec.is_some() {
        return Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http_client);
    Ok(Client::new(service, config.default_namespace))
}
