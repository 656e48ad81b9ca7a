//! The host's Kubernetes API client: kube's default stack, with TCP_NODELAY on its connections and
//! HTTP/2 offered, so every request and watch shares one connection (as client-go's do).
//!
//! kube's client leaves Nagle's algorithm on: the request written right after the handshake's
//! last record waits for that record's ACK, which the API server delays (Linux: 40 ms); measured
//! with strace on the local cluster, the first request of each new connection was answered
//! 43 ms after it was written. And over HTTP/1.1 every watch holds a connection of its own, so a
//! start opened one TLS connection per watched kind and per concurrent request; over HTTP/2 the
//! host makes one handshake, and idle connections are pinged so a dead one is dropped (with every
//! watch on it, which reconnect) rather than waited on. The stack below is kube's own
//! (`ClientBuilder::try_from`), minus its request tracing; a kubeconfig whose exec plugin hands
//! out client certificates (whose expiry only kube's builder tracks) or that names a proxy gets
//! kube's builder unchanged (HTTP/1.1). Clients acting as an operator's identity
//! (impersonating its ServiceAccount) share the host's connections; the shared caches' watches
//! take a pool of their own ([`Connection::separate_pool`]).

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use kube::{Client, Config};
use std::time::Duration;
use tower::{BoxError, ServiceBuilder};

/// How often an idle HTTP/2 connection is pinged, and how long an answer may take before the
/// connection (and every watch on it) is dropped and reconnected.
const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(30);
const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(15);

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
    Ok(Connection::infer().await?.client()?)
}

/// A client for `config` (see the module comment for what differs from kube's).
pub fn from_config(config: Config) -> Result<Client, kube::Error> {
    Connection::new(config)?.client()
}

/// The host's connection to the API server: clients for its own identity and for each
/// operator's (impersonated), all sharing one connection pool.
#[derive(Clone)]
pub struct Connection {
    config: Config,
    /// `None` when the kubeconfig needs kube's own builder (an exec plugin, a proxy).
    http: Option<HttpClient>,
}

type HttpClient = hyper_util::client::legacy::Client<
    hyper_timeout::TimeoutConnector<hyper_rustls::HttpsConnector<HttpConnector>>,
    kube::client::Body,
>;

impl Connection {
    /// The connection the environment describes (see [`connect`]).
    pub async fn infer() -> Result<Connection, ClientError> {
        Ok(Connection::new(Config::infer().await?)?)
    }

    /// A connection for `config`; nothing is sent yet.
    pub fn new(config: Config) -> Result<Connection, kube::Error> {
        let http = if config.proxy_url.is_some() || config.auth_info.exec.is_some() {
            None
        } else {
            Some(http_client(&config)?)
        };
        Ok(Connection { config, http })
    }

    /// Sends `agent` as every request's `User-Agent` (the API server's audit log records it:
    /// which replica of the host made a write).
    pub fn with_user_agent(mut self, agent: &str) -> Self {
        match axum::http::HeaderValue::from_str(agent) {
            Ok(value) => {
                self.config
                    .headers
                    .retain(|(n, _)| n != axum::http::header::USER_AGENT);
                self.config
                    .headers
                    .push((axum::http::header::USER_AGENT, value));
            }
            Err(_) => tracing::warn!(agent, "not a valid User-Agent header value; sending none"),
        }
        self
    }

    /// The same server and identity over a pool of its own (its own HTTP/2 connection): an API
    /// server allows about 100 concurrent streams per connection (kubernetes#121120), and every
    /// watch holds one for as long as it runs, so long-lived watches there cannot hold back the
    /// requests of this one.
    pub fn separate_pool(&self) -> Result<Connection, kube::Error> {
        Connection::new(self.config.clone())
    }

    /// A client acting as the configured identity (the host's).
    pub fn client(&self) -> Result<Client, kube::Error> {
        self.client_for(self.config.clone())
    }

    /// A client whose every request is sent as `user` (`Impersonate-User`): the API server
    /// authorizes it, and its audit log records it, as that user's. With no groups given, a
    /// ServiceAccount user gets its account's groups from the API server.
    pub fn impersonating(&self, user: &str) -> Result<Client, kube::Error> {
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(user.to_string());
        config.auth_info.impersonate_groups = None;
        config.auth_info.impersonate_uid = None;
        config.auth_info.impersonate_user_extra = None;
        self.client_for(config)
    }

    fn client_for(&self, config: Config) -> Result<Client, kube::Error> {
        let Some(http) = &self.http else {
            return Client::try_from(config);
        };
        let retry = config.default_retry.then(|| {
            tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry())
        });
        let service = ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(retry)
            .option_layer(config.auth_layer()?)
            .layer(config.extra_headers_layer()?)
            .map_err(BoxError::from)
            .service(http.clone());
        Ok(Client::new(service, config.default_namespace))
    }
}

/// The HTTP client every [`Connection`] client shares (one pool: one HTTP/2 connection).
fn http_client(config: &Config) -> Result<HttpClient, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = https_connector(config, http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    // Requests share one HTTP/2 connection when the API server offers it (as client-go does):
    // one TLS handshake per host, not one per watch. Pings find a dead connection that TCP
    // would not report (then every watch on it fails together and reconnects).
    let http_client: HttpClient = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(HTTP2_PING_INTERVAL)
        .http2_keep_alive_timeout(HTTP2_PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(connector);
    Ok(http_client)
}

/// kube's TLS connector (the kubeconfig's CA and client identity), offering HTTP/2 beside
/// HTTP/1.1 in ALPN; with a `tls-server-name` in the kubeconfig, kube's own (HTTP/1.1 only).
fn https_connector(
    config: &Config,
    http: HttpConnector,
) -> Result<hyper_rustls::HttpsConnector<HttpConnector>, kube::Error> {
    if config.tls_server_name.is_some() {
        return config.rustls_https_connector_with_connector(http);
    }
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http))
}
