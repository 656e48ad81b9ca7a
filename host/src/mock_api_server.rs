//! A scripted mock API server for tests (tower-test, as kube-rs tests its client): each test
//! states the requests, in order, that the host must make and no others, and the answers.

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

/// Checks one request's head (query string, headers) and JSON body (`Null` when there is none).
type RequestCheck = Box<dyn Fn(&http::request::Parts, &Value) + Send>;

/// One request the host must make, and the API server's answer.
pub struct Exchange {
    method: Method,
    /// The request's path; a trailing `*` matches any rest.
    path: String,
    check: RequestCheck,
    status: StatusCode,
    answer: Value,
}

impl Exchange {
    pub fn new(method: Method, path: &str, status: StatusCode, answer: Value) -> Self {
        Exchange {
            method,
            path: path.to_string(),
            check: Box::new(|_, _| {}),
            status,
            answer,
        }
    }

    pub fn checking(
        mut self,
        check: impl Fn(&http::request::Parts, &Value) + Send + 'static,
    ) -> Self {
        self.check = Box::new(check);
        self
    }
}

/// A `Status` failure as the API server sends it.
pub fn failure(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// A client whose API server answers `script` in order; the task ends once the client is
/// dropped, and fails if the client made more or fewer requests than scripted.
pub fn scripted(script: Vec<Exchange>) -> (Client, JoinHandle<()>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        let mut handle = std::pin::pin!(handle);
        let expected = script.len();
        for (i, exchange) in script.into_iter().enumerate() {
            let Some((request, send)) = handle.next_request().await else {
                panic!("the host made {i} requests; {expected} were scripted");
            };
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.expect("the request body");
            let body: Value = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).expect("a JSON request body")
            };
            // A path ending in `*` matches any path it begins (a name the host generated).
            let path = match exchange.path.strip_suffix('*') {
                Some(prefix) if parts.uri.path().starts_with(prefix) => exchange.path.as_str(),
                _ => parts.uri.path(),
            };
            assert_eq!(
                (&parts.method, path),
                (&exchange.method, exchange.path.as_str()),
                "request {i}, with body {body}"
            );
            (exchange.check)(&parts, &body);
            let answer = Response::builder()
                .status(exchange.status)
                .header("content-type", "application/json")
                .body(Body::from(
                    serde_json::to_vec(&exchange.answer).expect("JSON"),
                ))
                .expect("a response");
            send.send_response(answer);
        }
        if let Some((request, _)) = handle.next_request().await {
            panic!(
                "an unscripted request: {} {}",
                request.method(),
                request.uri()
            );
        }
    });
    (Client::new(service, "default"), server)
}
