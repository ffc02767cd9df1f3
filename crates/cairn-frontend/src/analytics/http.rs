//! The analytics endpoint: HTTP/1.1 (hyper) on its own thread and runtime, so a slow or
//! hostile browser never takes a worker from the NBD server.
//!
//! Routes (GET and HEAD only; anything else is 405, an unknown path 404):
//! - `/metrics`: a fresh sample in the OpenMetrics text format, for Prometheus;
//! - `/`, `/app.js`, `/style.css`: the page, compiled into the binary (works offline);
//! - `/api/history?res=second|minute&since=MS`: the history's points after `since`, in columns;
//! - `/api/status`: the latest sample's pools (vdev tree, health, errors, scrub and resilver,
//!   recent txgs), datasets and devices, for the panels that show state rather than rates.
//!
//! A sampler thread takes a sample every second into the history (and keeps it as the latest
//! one); it runs only when the endpoint is on, so a server without `--http` pays nothing.
//! Exposure: the caller checks the address (loopback unless TLS; `serve::check_listen`); with
//! TLS the endpoint is HTTPS only, with the NBD certificate and client verification.

use super::history::{History, Resolution, observe};
use super::sample::Sample;
use crate::pools::ServedPools;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use parking_lot::Mutex;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

const INDEX_HTML: &str = include_str!("page/index.html");
const APP_JS: &str = include_str!("page/app.js");
const STYLE_CSS: &str = include_str!("page/style.css");

/// How often the history takes a sample.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum AnalyticsError {
    #[error("cannot listen for HTTP on {address}")]
    Listen {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the analytics {what}")]
    Start {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// What the handlers share.
struct State {
    served: Arc<ServedPools>,
    history: Mutex<History>,
    latest: Mutex<Option<Arc<Sample>>>,
}

/// A running endpoint; `stop` (or dropping it) ends both threads.
pub struct AnalyticsServer {
    address: SocketAddr,
    stop_sampler: Option<mpsc::Sender<()>>,
    stop_http: Arc<tokio::sync::Notify>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl AnalyticsServer {
    /// Where it listens (the port chosen when `:0` was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop_sampler.take();
        self.stop_http.notify_one();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for AnalyticsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Starts the endpoint on `address` (already checked by the caller), HTTPS when `tls` is given.
pub fn start(
    served: Arc<ServedPools>,
    address: &str,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> Result<AnalyticsServer, AnalyticsError> {
    let listen_error = |source| AnalyticsError::Listen {
        address: address.to_string(),
        source,
    };
    let listener = std::net::TcpListener::bind(address).map_err(listen_error)?;
    listener.set_nonblocking(true).map_err(listen_error)?;
    let local = listener.local_addr().map_err(listen_error)?;
    let state = Arc::new(State {
        served,
        history: Mutex::new(History::default()),
        latest: Mutex::new(None),
    });
    let (stop_sampler, stopped) = mpsc::channel::<()>();
    let sampler = std::thread::Builder::new()
        .name("cairn-analytics-sample".into())
        .spawn({
            let state = state.clone();
            move || sample_loop(&state, &stopped)
        })
        .map_err(|source| AnalyticsError::Start {
            what: "sampler thread",
            source,
        })?;
    let stop_http = Arc::new(tokio::sync::Notify::new());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| AnalyticsError::Start {
            what: "runtime",
            source,
        })?;
    let http = std::thread::Builder::new()
        .name("cairn-analytics-http".into())
        .spawn({
            let stop = stop_http.clone();
            move || runtime.block_on(accept_loop(listener, state, tls, stop))
        })
        .map_err(|source| AnalyticsError::Start {
            what: "HTTP thread",
            source,
        })?;
    Ok(AnalyticsServer {
        address: local,
        stop_sampler: Some(stop_sampler),
        stop_http,
        threads: vec![sampler, http],
    })
}

fn sample_loop(state: &State, stop: &mpsc::Receiver<()>) {
    loop {
        let sample = Arc::new(Sample::take(&state.served));
        state.history.lock().record(observe(&sample));
        *state.latest.lock() = Some(sample);
        match stop.recv_timeout(SAMPLE_INTERVAL) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // Stopped (the sender is dropped to stop us).
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

async fn accept_loop(
    listener: std::net::TcpListener,
    state: Arc<State>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    stop: Arc<tokio::sync::Notify>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.notified() => return,
        };
        let Ok((stream, _peer)) = accepted else {
            // Out of file descriptors and the like: wait a moment rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let state = state.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(route(&state, &request)) }
            });
            let http = hyper::server::conn::http1::Builder::new();
            match tls {
                Some(acceptor) => {
                    if let Ok(stream) = acceptor.accept(stream).await {
                        let io = hyper_util::rt::TokioIo::new(stream);
                        let _ = http.serve_connection(io, service).await;
                    }
                }
                None => {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = http.serve_connection(io, service).await;
                }
            }
        });
    }
}

fn response(status: StatusCode, content_type: &str, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    response
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    response(
        status,
        "text/plain; charset=utf-8",
        Bytes::from(body.to_string()),
    )
}

fn json(value: &serde_json::Value) -> Response<Full<Bytes>> {
    response(
        StatusCode::OK,
        "application/json",
        Bytes::from(value.to_string()),
    )
}

/// `key=value` pairs of a query string (no percent-decoding: the values used are numbers and
/// words).
fn query_value<'a>(query: Option<&'a str>, key: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

fn route(state: &State, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    let query = request.uri().query();
    match request.uri().path() {
        "/metrics" => match super::prometheus::render(&Sample::take(&state.served)) {
            Ok(body) => response(
                StatusCode::OK,
                super::prometheus::CONTENT_TYPE,
                Bytes::from(body),
            ),
            Err(_) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot encode the metrics\n",
            ),
        },
        "/" | "/index.html" => response(
            StatusCode::OK,
            "text/html; charset=utf-8",
            Bytes::from_static(INDEX_HTML.as_bytes()),
        ),
        "/app.js" => response(
            StatusCode::OK,
            "text/javascript; charset=utf-8",
            Bytes::from_static(APP_JS.as_bytes()),
        ),
        "/style.css" => response(
            StatusCode::OK,
            "text/css; charset=utf-8",
            Bytes::from_static(STYLE_CSS.as_bytes()),
        ),
        "/api/history" => {
            let resolution = match query_value(query, "res") {
                Some("minute") => Resolution::Minute,
                _ => Resolution::Second,
            };
            let since_ms = query_value(query, "since")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            json(&state.history.lock().to_json(resolution, since_ms))
        }
        "/api/status" => {
            let latest = state.latest.lock().clone();
            let sample = latest.unwrap_or_else(|| Arc::new(Sample::take(&state.served)));
            json(&super::status::to_json(&sample))
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_found_by_key() {
        assert_eq!(
            query_value(Some("res=minute&since=12"), "since"),
            Some("12")
        );
        assert_eq!(query_value(Some("res=minute"), "since"), None);
        assert_eq!(query_value(None, "res"), None);
    }
}
