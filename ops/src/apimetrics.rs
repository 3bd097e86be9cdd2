//! Metrics of the Kubernetes API client: requests by verb, resource and
//! response code, and their latency, so operators see what each binary asks
//! of the API server (the usual limit at scale) and how often it is refused.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Instant;

/// Labels of one API request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// GET, LIST, WATCH, POST, PUT, PATCH or DELETE.
    pub verb: String,
    /// Resource (with subresource), e.g. `nodeimages/status`.
    pub resource: String,
    /// HTTP status code, or `error` when no response came.
    pub code: String,
}

/// Labels of a request's latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    /// As in [`RequestLabels`].
    pub verb: String,
    /// As in [`RequestLabels`].
    pub resource: String,
}

/// The API client's metrics (one set per process: every client shares it).
#[derive(Clone)]
pub struct ApiMetrics {
    requests: Family<RequestLabels, Counter>,
    latency: Family<VerbLabels, Histogram, fn() -> Histogram>,
    in_flight: Family<VerbLabels, Gauge>,
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ])
}

/// The process's API-client metrics.
pub fn global() -> &'static ApiMetrics {
    static METRICS: OnceLock<ApiMetrics> = OnceLock::new();
    METRICS.get_or_init(|| ApiMetrics {
        requests: Family::default(),
        latency: Family::new_with_constructor(latency_histogram),
        in_flight: Family::default(),
    })
}

impl ApiMetrics {
    /// Registers `nodeimage_api_requests_total`, `nodeimage_api_request_duration_seconds`
    /// and `nodeimage_api_requests_in_flight`.
    pub fn register(&self, r: &mut Registry) {
        let r = r.sub_registry_with_prefix("nodeimage_api");
        r.register(
            "requests",
            "Requests to the Kubernetes API, by verb, resource and response code",
            self.requests.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Time to the response headers of Kubernetes API requests, by verb and resource",
            self.latency.clone(),
        );
        r.register(
            "requests_in_flight",
            "Requests to the Kubernetes API sent and not yet answered (response headers), by verb and resource: a count that stays up shows requests hung on a connection",
            self.in_flight.clone(),
        );
    }

    /// Counts one request in flight until the returned guard is dropped
    /// (answered, failed or abandoned alike).
    fn start(&self, verb: &str, resource: &str) -> InFlight {
        let gauge = self
            .in_flight
            .get_or_create(&VerbLabels {
                verb: verb.into(),
                resource: resource.into(),
            })
            .clone();
        gauge.inc();
        InFlight(gauge)
    }

    fn record(&self, verb: &str, resource: &str, code: &str, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                verb: verb.into(),
                resource: resource.into(),
                code: code.into(),
            })
            .inc();
        self.latency
            .get_or_create(&VerbLabels {
                verb: verb.into(),
                resource: resource.into(),
            })
            .observe(seconds);
    }
}

/// One request counted in `nodeimage_api_requests_in_flight` while it lives.
struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The verb and resource of a request, as Kubernetes names them: a GET of a
/// collection is LIST, with `watch=true` it is WATCH.
pub fn classify(method: &str, path: &str, query: Option<&str>) -> (String, String) {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest: &[&str] = match segs.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[],
    };
    let (resource_segs, is_namespace_object) = match rest {
        ["namespaces"] => (&rest[..1], false),
        ["namespaces", _name] => (&rest[..1], true),
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => (tail, false),
        other => (other, false),
    };
    let resource = match resource_segs {
        [] => "other".to_string(),
        [r] => (*r).to_string(),
        [r, _name] => (*r).to_string(),
        [r, _name, sub, ..] => format!("{r}/{sub}"),
    };
    let collection = resource_segs.len() == 1 && !is_namespace_object;
    let watch = query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match method {
        "GET" if watch => "WATCH",
        "GET" if collection => "LIST",
        m => m,
    };
    (verb.to_string(), resource)
}

/// A tower layer that counts and times every request of a kube client.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetricsLayer;

impl<S> tower::Layer<S> for MetricsLayer {
    type Service = MetricsService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        MetricsService { inner }
    }
}

/// See [`MetricsLayer`].
#[derive(Clone, Debug)]
pub struct MetricsService<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for MetricsService<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let (verb, resource) = classify(req.method().as_str(), req.uri().path(), req.uri().query());
        let start = Instant::now();
        let in_flight = global().start(&verb, &resource);
        let fut = self.inner.call(req);
        Box::pin(async move {
            let result = fut.await;
            drop(in_flight);
            let code = match &result {
                Ok(resp) => resp.status().as_u16().to_string(),
                Err(_) => "error".to_string(),
            };
            global().record(&verb, &resource, &code, start.elapsed().as_secs_f64());
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_requests_as_kubernetes_names_them() {
        // (method, path, query, verb, resource)
        let cases = [
            ("GET", "/api/v1/nodes", None, "LIST", "nodes"),
            (
                "GET",
                "/api/v1/nodes",
                Some("watch=true&resourceVersion=5"),
                "WATCH",
                "nodes",
            ),
            ("GET", "/api/v1/nodes/node-1", None, "GET", "nodes"),
            ("GET", "/api/v1/namespaces", None, "LIST", "namespaces"),
            (
                "GET",
                "/api/v1/namespaces/default",
                None,
                "GET",
                "namespaces",
            ),
            (
                "POST",
                "/api/v1/namespaces/a/secrets",
                None,
                "POST",
                "secrets",
            ),
            (
                "GET",
                "/api/v1/namespaces/a/secrets/s",
                None,
                "GET",
                "secrets",
            ),
            (
                "PATCH",
                "/apis/apps.kruise.io/v1alpha1/nodeimages/node-1/status",
                None,
                "PATCH",
                "nodeimages/status",
            ),
            (
                "GET",
                "/apis/apps.kruise.io/v1alpha1/namespaces/t/imagepulljobs",
                Some("watch=1"),
                "WATCH",
                "imagepulljobs",
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/n/leases/l",
                None,
                "PUT",
                "leases",
            ),
            ("GET", "/version", None, "GET", "other"),
        ];
        for (method, path, query, verb, resource) in cases {
            assert_eq!(
                classify(method, path, query),
                (verb.to_string(), resource.to_string()),
                "{method} {path} {query:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_request_is_in_flight_until_answered_or_dropped() {
        use tower::{Service, ServiceExt};
        let gauge = || {
            global()
                .in_flight
                .get_or_create(&VerbLabels {
                    verb: "PATCH".into(),
                    resource: "inflighttests".into(),
                })
                .get()
        };
        let (answer, answered) = tokio::sync::oneshot::channel::<()>();
        let answered = std::sync::Mutex::new(Some(answered));
        let mut svc = MetricsService {
            inner: tower::service_fn(move |_req: http::Request<()>| {
                let wait = answered.lock().ok().and_then(|mut a| a.take());
                async move {
                    if let Some(wait) = wait {
                        let _ = wait.await;
                    }
                    Ok::<_, std::convert::Infallible>(http::Response::new(()))
                }
            }),
        };
        let req = || {
            http::Request::patch("/apis/x.io/v1/inflighttests/a")
                .body(())
                .unwrap_or_default()
        };
        let Ok(ready) = svc.ready().await;
        let first = tokio::spawn(ready.call(req()));
        tokio::task::yield_now().await;
        assert_eq!(gauge(), 1, "sent, not answered");
        let _ = answer.send(());
        let _ = first.await;
        assert_eq!(gauge(), 0, "answered");
        // A request abandoned before its answer (a timeout, a stopped caller).
        let Ok(ready) = svc.ready().await;
        let pending = ready.call(req());
        assert_eq!(gauge(), 1);
        drop(pending);
        assert_eq!(gauge(), 0, "dropped");
    }
}
