//! The kubelet's PodResources API (v1): which pod and container each device was allocated
//! to, asked over the kubelet's Unix socket (`/var/lib/kubelet/pod-resources/kubelet.sock`).
//! [`list`] makes one `List` call and waits for it, on a runtime of its own; with the
//! `server` feature, `serve` answers as a kubelet does, for tests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// The generated messages, client and server of `proto/api.proto`.
#[allow(missing_docs, clippy::all, missing_debug_implementations)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/v1.rs"));
}

pub use v1::{ContainerDevices, ContainerResources, ListPodResourcesResponse, PodResources};

/// Where the kubelet serves the API.
pub const KUBELET_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// Why a `List` call gave no answer.
#[derive(Debug)]
pub struct ListError(pub String);

impl std::fmt::Display for ListError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ListError {}

/// A channel to the API on the Unix socket `socket` (the URI is only a placeholder: every
/// connection goes to the socket).
async fn channel(socket: PathBuf) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_static("http://kubelet.invalid")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { tokio::net::UnixStream::connect(socket).await.map(TokioIo::new) }
        }))
        .await
}

/// Every pod's devices, from one `List` call on `socket`, within `timeout` (connecting
/// included).
pub fn list(socket: &Path, timeout: Duration) -> Result<ListPodResourcesResponse, ListError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| ListError(format!("cannot start the gRPC runtime: {e}")))?;
    let socket = socket.to_path_buf();
    runtime.block_on(async move {
        let call = async {
            let channel = channel(socket.clone())
                .await
                .map_err(|e| ListError(format!("{}: {}", socket.display(), source_of(&e))))?;
            let mut client = v1::pod_resources_lister_client::PodResourcesListerClient::new(channel);
            client
                .list(v1::ListPodResourcesRequest {})
                .await
                .map(tonic::Response::into_inner)
                .map_err(|status| ListError(format!("{}: {}", socket.display(), status.message())))
        };
        tokio::time::timeout(timeout, call).await.unwrap_or_else(|_| {
            Err(ListError(format!(
                "{}: no answer within {timeout:?}",
                socket.display()
            )))
        })
    })
}

/// The innermost cause of a transport error ("No such file or directory", "Permission
/// denied"), which is what a user can act on.
fn source_of(error: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = error;
    while let Some(next) = inner.source() {
        inner = next;
    }
    inner.to_string()
}

/// Serves `lister` on the Unix socket `socket` as the kubelet does, until `shutdown`
/// completes.
#[cfg(feature = "server")]
pub async fn serve<L: v1::pod_resources_lister_server::PodResourcesLister>(
    socket: &Path,
    lister: L,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let listener = tokio::net::UnixListener::bind(socket)?;
    tonic::transport::Server::builder()
        .add_service(v1::pod_resources_lister_server::PodResourcesListerServer::new(
            lister,
        ))
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::UnixListenerStream::new(listener),
            shutdown,
        )
        .await?;
    Ok(())
}

/// What a server (a test's kubelet) implements and answers with.
#[cfg(feature = "server")]
pub mod server {
    pub use super::v1::pod_resources_lister_server::PodResourcesLister;
    pub use super::v1::{ContainerDevices, ContainerResources, ListPodResourcesRequest, PodResources};
    pub use tonic::{Request, Response, Status, async_trait};
}
