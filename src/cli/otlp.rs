//! OTLP/HTTP export for the `demiurge` command (feature `otel-otlp`): when the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or the per-signal `..._TRACES_ENDPOINT`,
//! `..._METRICS_ENDPOINT`) is set, the run's spans and metrics go there, batched on the
//! SDK's own threads; the exporters read the other `OTEL_EXPORTER_OTLP_*` variables
//! (headers, timeout, compression) themselves. The endpoint is the operator's, set in
//! the environment of their own run: it is not subject to the URL policy, which guards
//! what Agent Cores declare.

use std::sync::OnceLock;

use opentelemetry_otlp::{MetricExporter, SpanExporter};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;

struct Providers {
    tracers: SdkTracerProvider,
    meters: SdkMeterProvider,
}

static PROVIDERS: OnceLock<Option<Providers>> = OnceLock::new();

/// What a refused exporter setting says: its variables, never their values (an
/// endpoint may carry credentials).
const REFUSED: &str = "warning: no OTLP export: the exporter refused the OTEL_EXPORTER_OTLP_* settings (check the endpoint's form)";

/// The Prometheus page of `serve --metrics`, when asked for (before the first runtime).
static PAGE: OnceLock<super::prometheus::Page> = OnceLock::new();

/// Collects the run's metrics for a Prometheus page too; the meters, for its scrapes.
pub(crate) fn with_page(page: super::prometheus::Page) -> Option<SdkMeterProvider> {
    let _ = PAGE.set(page);
    providers().map(|p| p.meters.clone())
}

fn configured(signal: &str) -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    set("OTEL_EXPORTER_OTLP_ENDPOINT") || set(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"))
}

fn providers() -> Option<&'static Providers> {
    PROVIDERS
        .get_or_init(|| {
            let page = PAGE.get();
            if !configured("TRACES") && !configured("METRICS") && page.is_none() {
                return None;
            }
            let mut tracers = SdkTracerProvider::builder();
            if configured("TRACES") {
                match SpanExporter::builder().with_http().build() {
                    Ok(spans) => tracers = tracers.with_batch_exporter(spans),
                    Err(_) => eprintln!("{REFUSED}"),
                }
            }
            let mut meters = SdkMeterProvider::builder();
            if let Some(page) = page {
                // Collected when scraped (a flush); the interval only keeps it fresh.
                let reader = opentelemetry_sdk::metrics::PeriodicReader::builder(page.clone())
                    .with_interval(std::time::Duration::from_secs(3600))
                    .build();
                meters = meters.with_reader(reader);
            }
            if configured("METRICS") {
                match MetricExporter::builder().with_http().build() {
                    Ok(metrics) => meters = meters.with_periodic_exporter(metrics),
                    Err(_) => eprintln!("{REFUSED}"),
                }
            }
            Some(Providers {
                tracers: tracers.build(),
                meters: meters.build(),
            })
        })
        .as_ref()
}

/// The run's telemetry: OTLP/HTTP when configured, else nowhere.
pub(crate) fn telemetry() -> demiurge_mcp::telemetry::Telemetry {
    providers().map_or_else(Default::default, |p| {
        demiurge_mcp::telemetry::Telemetry::new(&p.tracers, &p.meters)
    })
}

/// Sends what is batched and stops the exporters (at the end of the run, off the async
/// runtime: the SDK's flush waits on its own threads).
pub(crate) fn finish() {
    // A collector that does not answer holds the exit a second per signal at most.
    if let Some(Some(p)) = PROVIDERS.get() {
        let _ = p
            .tracers
            .shutdown_with_timeout(std::time::Duration::from_secs(1));
        let _ = p
            .meters
            .shutdown_with_timeout(std::time::Duration::from_secs(1));
    }
}
