//! A scripted API server for the shells' unit tests, in the style of
//! kube-rs's controller-rs example: a service behind a real `kube::Client`
//! that answers each request with the next scripted reply and records the
//! request, so a test asserts the exact requests a shell made.

use crate::flags::Flags;
use crate::runtime::context::Context;
use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{Response, StatusCode};
use clap::Parser;
use kube::runtime::reflector::{self, Store};
use nodeimage_api::NodeImage;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// A request the shell made: method, path and JSON body (Null if none).
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    /// HTTP method.
    pub method: String,
    /// Path, without the query.
    pub path: String,
    /// The body, parsed.
    pub body: Value,
}

/// One scripted reply: a status code and a JSON body.
pub struct Reply(pub u16, pub Value);

impl Reply {
    /// 200, with `object` as the body.
    pub fn ok<T: serde::Serialize>(object: &T) -> Self {
        Reply(200, serde_json::to_value(object).unwrap_or(Value::Null))
    }

    /// The API's error `code` with its `reason` (Conflict, NotFound, ...).
    pub fn error(code: u16, reason: &str) -> Self {
        let status = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": reason, "reason": reason, "code": code,
        });
        Reply(code, status)
    }
}

/// What the scripted server saw and has left to say.
#[derive(Clone, Default)]
pub struct Script {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Script {
    /// A client whose requests are answered by `replies`, in order (a 500
    /// once they run out), and the script that records them.
    pub fn client(replies: Vec<Reply>) -> (kube::Client, Script) {
        let script = Script {
            replies: Arc::new(Mutex::new(replies.into())),
            seen: Arc::default(),
        };
        let answering = script.clone();
        let router = axum::Router::new().fallback(move |req: Request| {
            let script = answering.clone();
            async move { script.answer(req).await }
        });
        (kube::Client::new(router, "default"), script)
    }

    /// A controller context whose client is scripted by `replies`, and
    /// its NodeImage cache (empty).
    pub fn context(replies: Vec<Reply>) -> (Context, Store<NodeImage>, Script) {
        let (client, script) = Script::client(replies);
        let (store, _writer) = reflector::store::<NodeImage>();
        let flags = Flags::parse_from(["nodeimage-controller"]);
        let ctx = Context::new(client, &flags).expect("default flags are valid");
        (ctx, store, script)
    }

    /// The requests made so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Whether every scripted reply was used.
    pub fn finished(&self) -> bool {
        self.replies.lock().map(|r| r.is_empty()).unwrap_or(false)
    }

    async fn answer(&self, req: Request) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let bytes = to_bytes(body, usize::MAX).await.unwrap_or_default();
        let seen = Seen {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        };
        if let Ok(mut s) = self.seen.lock() {
            s.push(seen);
        }
        let next = self.replies.lock().ok().and_then(|mut r| r.pop_front());
        let Reply(code, json) = next.unwrap_or(Reply(500, Value::Null));
        let mut response = Response::new(Body::from(json.to_string()));
        *response.status_mut() =
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        response
    }
}
