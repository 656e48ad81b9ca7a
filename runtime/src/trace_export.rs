//! Traces over OpenTelemetry when an endpoint is configured (`--otlp-endpoint`, OTLP over HTTP
//! with JSON): a span per reconcile and child spans for its worker call, applies and status write.
//!
//! Off by default, and then free: the child spans have a target of their own ([`TRACE_TARGET`])
//! that the log's filter never enables, so without an exporter they are never built. With one,
//! only spans are exported, never log events (a worker's log text stays in the log), in batches
//! from a bounded queue (2,048 spans; more are dropped, never waited for) on a thread of the
//! exporter's own. The trace id is in the reconcile's log lines (`trace_id`) and its recorded case.

use opentelemetry::trace::TracerProvider as _;
use tracing_subscriber::Layer;

/// The target of the spans that exist only for traces (worker call, apply, status write).
pub const TRACE_TARGET: &str = "wasmpilot::trace";

/// Whether spans are being exported (set once, when the exporter is installed).
static EXPORTING: std::sync::OnceLock<()> = std::sync::OnceLock::new();

/// Why the exporter could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TraceExportError {
    #[error("--otlp-endpoint {endpoint:?} is not an http:// or https:// URL")]
    Endpoint { endpoint: String },
    #[error("building the OTLP exporter for {endpoint}")]
    Exporter {
        endpoint: String,
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// The exporter's provider: dropped (or [`TraceExport::shutdown`]) at exit, its last spans are
/// sent first.
pub struct TraceExport {
    provider: opentelemetry_sdk::trace::SdkTracerProvider,
}

impl TraceExport {
    /// Sends what is queued and stops the exporter's thread (waits at most 5 s).
    pub fn shutdown(&self) {
        if let Err(e) = self
            .provider
            .shutdown_with_timeout(std::time::Duration::from_secs(5))
        {
            eprintln!("traces: the last spans may not have been sent: {e}");
        }
    }
}

/// Where spans go for `endpoint` (the collector's base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT`
/// is: `/v1/traces` is added unless the URL has a path of its own).
pub fn traces_url(endpoint: &str) -> Result<String, TraceExportError> {
    let bad = || TraceExportError::Endpoint {
        endpoint: endpoint.chars().take(200).collect(),
    };
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .ok_or_else(bad)?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.is_empty() || endpoint.chars().any(char::is_whitespace) {
        return Err(bad());
    }
    Ok(if path.trim_end_matches('/').is_empty() {
        format!("{}/v1/traces", endpoint.trim_end_matches('/'))
    } else {
        endpoint.to_string()
    })
}

/// The layer that exports the reconcile spans and those of [`TRACE_TARGET`] to `endpoint`, as
/// the service `wasmpilot`, and the handle that flushes it.
pub fn otlp_layer(
    endpoint: &str,
) -> Result<
    (
        Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>,
        TraceExport,
    ),
    TraceExportError,
> {
    use opentelemetry_otlp::WithExportConfig;
    let url = traces_url(endpoint)?;
    // The exporter's client (for an https:// collector) uses the process's rustls provider.
    crate::egress::install_crypto_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpJson)
        .with_endpoint(url.clone())
        .with_timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|source| TraceExportError::Exporter {
            endpoint: url,
            source,
        })?;
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("wasmpilot")
                .build(),
        )
        .build();
    let tracer = provider.tracer("wasmpilot");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            // Spans only (a log event's text, a worker's among them, is never exported): the
            // reconcile's and the ones made for traces.
            meta.is_span() && (meta.target() == TRACE_TARGET || meta.name() == "reconcile")
        }))
        .boxed();
    let _ = EXPORTING.set(());
    Ok((layer, TraceExport { provider }))
}

/// The current span's trace id (32 hex digits), when spans are exported.
pub fn current_trace_id() -> Option<String> {
    EXPORTING.get()?;
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_a_base_url_unless_it_names_a_path() {
        assert_eq!(
            traces_url("http://collector:4318").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://collector:4318/").unwrap(),
            "https://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/custom/traces").unwrap(),
            "http://collector:4318/custom/traces"
        );
        for bad in ["collector:4318", "ftp://x", "http://", "http://a b"] {
            assert!(traces_url(bad).is_err(), "{bad}");
        }
    }
}
