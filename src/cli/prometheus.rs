//! `serve --metrics ADDR` (feature `otel-otlp`): the run's metrics in Prometheus' text
//! format at `http://ADDR/metrics`, on loopback only. A scrape collects now (the SDK's
//! flush, on a blocking thread) and answers what was collected; nothing else is served.
//! The page holds what the metrics hold (server ids, exposed names, outcomes, counts):
//! it answers only a `Host` naming loopback, so a web page that rebinds a name to
//! 127.0.0.1 cannot read it.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{SdkMeterProvider, Temporality};

/// The last collection, rendered.
#[derive(Clone, Default)]
pub(crate) struct Page(Arc<Mutex<String>>);

impl PushMetricExporter for Page {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        if let Ok(mut page) = self.0.lock() {
            *page = render(metrics);
        }
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: std::time::Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

/// A name in Prometheus' alphabet: `mcp.call.duration` is `mcp_call_duration`.
fn name(raw: &str) -> String {
    raw.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// `{key="value",...}`, values escaped, names in order (`le` last).
fn labels<'a>(
    attributes: impl Iterator<Item = &'a KeyValue>,
    extra: Option<(&str, String)>,
) -> String {
    let mut pairs: Vec<String> = attributes
        .map(|kv| {
            format!(
                "{}=\"{}\"",
                name(kv.key.as_str()),
                escape(&kv.value.to_string())
            )
        })
        .collect();
    // In the order of their names, whatever order the SDK keeps them in.
    pairs.sort();
    if let Some((key, value)) = extra {
        pairs.push(format!("{key}=\"{value}\""));
    }
    if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One collection in the text format (version 0.0.4).
fn render(metrics: &ResourceMetrics) -> String {
    let mut page = String::new();
    for metric in metrics.scope_metrics().flat_map(|s| s.metrics()) {
        let mut base = name(metric.name());
        if metric.unit() == "ms" {
            base.push_str("_milliseconds");
        }
        match metric.data() {
            AggregatedMetrics::U64(data) => {
                write_data(&mut page, &base, metric.description(), data)
            }
            AggregatedMetrics::I64(data) => {
                write_data(&mut page, &base, metric.description(), data)
            }
            AggregatedMetrics::F64(data) => {
                write_data(&mut page, &base, metric.description(), data)
            }
        }
    }
    page
}

fn write_data<T: Copy + std::fmt::Display>(
    page: &mut String,
    base: &str,
    help: &str,
    data: &MetricData<T>,
) {
    match data {
        MetricData::Sum(sum) => {
            let total = if sum.is_monotonic() {
                format!("{base}_total")
            } else {
                base.to_string()
            };
            let kind = if sum.is_monotonic() {
                "counter"
            } else {
                "gauge"
            };
            let _ = writeln!(page, "# HELP {total} {help}\n# TYPE {total} {kind}");
            for point in sum.data_points() {
                let _ = writeln!(
                    page,
                    "{total}{} {}",
                    labels(point.attributes(), None),
                    point.value()
                );
            }
        }
        MetricData::Gauge(gauge) => {
            let _ = writeln!(page, "# HELP {base} {help}\n# TYPE {base} gauge");
            for point in gauge.data_points() {
                let _ = writeln!(
                    page,
                    "{base}{} {}",
                    labels(point.attributes(), None),
                    point.value()
                );
            }
        }
        MetricData::Histogram(histogram) => {
            let _ = writeln!(page, "# HELP {base} {help}\n# TYPE {base} histogram");
            for point in histogram.data_points() {
                let mut seen = 0;
                let bounds = point
                    .bounds()
                    .map(|b| b.to_string())
                    .chain(["+Inf".to_string()]);
                for (bound, count) in bounds.zip(point.bucket_counts()) {
                    seen += count;
                    let le = labels(point.attributes(), Some(("le", bound)));
                    let _ = writeln!(page, "{base}_bucket{le} {seen}");
                }
                let plain = labels(point.attributes(), None);
                let _ = writeln!(page, "{base}_sum{plain} {}", point.sum());
                let _ = writeln!(page, "{base}_count{plain} {}", point.count());
            }
        }
        MetricData::ExponentialHistogram(_) => {}
    }
}

/// Whether a request's `Host` names loopback (`localhost`, `127.0.0.1`, `[::1]`, with
/// any port).
fn loopback_host(host: Option<&str>) -> bool {
    let Some(host) = host else { return false };
    let bare = match host.rsplit_once(':') {
        Some((name, port)) if !name.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    matches!(bare, "localhost" | "127.0.0.1" | "[::1]")
}

/// Most scrape connections open at once; past it a new one waits to be accepted.
const MAX_SCRAPERS: usize = 4;

/// Longest a scrape waits for a collection before it answers the last page.
const COLLECT_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves `page` at `/metrics` on `listener` until the run ends. A scrape collects
/// `meters` first, one collection at a time (a scrape during one answers the last
/// page); four connections at most, one request each, 30 s each.
pub(crate) async fn serve(listener: tokio::net::TcpListener, page: Page, meters: SdkMeterProvider) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_SCRAPERS));
    let collecting = Arc::new(std::sync::atomic::AtomicBool::new(false));
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, say: try again later rather than spin.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            continue;
        };
        let scrape = Scrape {
            page: page.clone(),
            meters: meters.clone(),
            collecting: Arc::clone(&collecting),
        };
        tokio::spawn(async move {
            let answer = hyper::service::service_fn(move |request| {
                let scrape = scrape.clone();
                async move { scrape.answer(&request).await }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let served = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .serve_connection(io, answer);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(30), served).await;
            drop(slot);
        });
    }
}

/// What one scrape needs.
#[derive(Clone)]
struct Scrape {
    page: Page,
    meters: SdkMeterProvider,
    collecting: Arc<std::sync::atomic::AtomicBool>,
}

impl Scrape {
    async fn answer<B>(
        &self,
        request: &hyper::Request<B>,
    ) -> Result<hyper::Response<http_body_util::Full<hyper::body::Bytes>>, hyper::http::Error> {
        use std::sync::atomic::Ordering;
        let host = request
            .headers()
            .get(hyper::header::HOST)
            .and_then(|h| h.to_str().ok());
        let (status, body) = if !loopback_host(host) {
            (421, String::from("a Host naming loopback is required\n"))
        } else if request.method() != hyper::Method::GET || request.uri().path() != "/metrics" {
            (404, String::from("only GET /metrics is served\n"))
        } else {
            let first = self
                .collecting
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            if first {
                let (meters, collecting) = (self.meters.clone(), Arc::clone(&self.collecting));
                let collection = tokio::task::spawn_blocking(move || {
                    let _ = meters.force_flush();
                    collecting.store(false, Ordering::Release);
                });
                let _ = tokio::time::timeout(COLLECT_WITHIN, collection).await;
            }
            (
                200,
                self.page.0.lock().map(|p| p.clone()).unwrap_or_default(),
            )
        };
        hyper::Response::builder()
            .status(status)
            .header("content-type", "text/plain; version=0.0.4")
            .body(http_body_util::Full::new(hyper::body::Bytes::from(body)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_hosts_are_answered() {
        for host in [
            "localhost",
            "localhost:9464",
            "127.0.0.1:1",
            "[::1]:9464",
            "[::1]",
        ] {
            assert!(loopback_host(Some(host)), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:80",
            "127.0.0.1.evil.example",
            "localhost.",
            "",
            ":80",
        ] {
            assert!(!loopback_host(Some(host)), "{host}");
        }
        assert!(!loopback_host(None));
    }
}
