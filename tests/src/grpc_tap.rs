//! A recording gRPC proxy on a Unix socket: a daemon pointed at it reaches
//! the runtime behind it, and the test reads which gRPC methods it called
//! (the `:path` of each HTTP/2 request, e.g. `/runtime.v1.ImageService/PullImage`).
//! It proves what a daemon does not call, such as containerd's own API.

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::net::{UnixListener, UnixStream};

/// A running proxy; stops when dropped.
pub struct GrpcTap {
    /// The socket to point a client at.
    pub socket: PathBuf,
    paths: Arc<Mutex<Vec<String>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl GrpcTap {
    /// Listens on `socket` and forwards every connection to `upstream`.
    pub fn start(upstream: &Path, socket: &Path) -> std::io::Result<GrpcTap> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .thread_name("e2e-grpc-tap")
            .build()?;
        let _ = std::fs::remove_file(socket);
        let listener = {
            let _guard = runtime.enter();
            UnixListener::bind(socket)?
        };
        let paths: Arc<Mutex<Vec<String>>> = Arc::default();
        let (seen, upstream) = (paths.clone(), upstream.to_path_buf());
        runtime.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (seen, upstream) = (seen.clone(), upstream.clone());
                tokio::spawn(async move {
                    let _ = serve(client, &upstream, seen).await;
                });
            }
        });
        Ok(GrpcTap {
            socket: socket.to_path_buf(),
            paths,
            runtime: Some(runtime),
        })
    }

    /// Every method called so far, in order.
    pub fn paths(&self) -> Vec<String> {
        self.paths.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for GrpcTap {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// One client connection: HTTP/2 in, one HTTP/2 connection to the upstream out.
async fn serve(
    client: UnixStream,
    upstream: &Path,
    seen: Arc<Mutex<Vec<String>>>,
) -> Result<(), String> {
    let out = UnixStream::connect(upstream)
        .await
        .map_err(|e| e.to_string())?;
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(out))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(req.uri().path().to_string());
        let mut sender = sender.clone();
        async move {
            let resp: Result<Response<Incoming>, hyper::Error> = sender.send_request(req).await;
            resp
        }
    });
    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(client), service)
        .await
        .map_err(|e| e.to_string())
}
