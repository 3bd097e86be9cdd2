//! Where the writer's status patches go: the API server, or a recorder in
//! tests.

use nodeimage_api::kruise::NodeImage;

/// Where status writes go.
pub trait StatusSink: Send + Sync + 'static {
    /// Applies a status JSON Patch; returns the updated object.
    fn patch(
        &self,
        name: &str,
        patch: serde_json::Value,
    ) -> impl std::future::Future<Output = Result<NodeImage, kube::Error>> + Send;

    /// Reads the object as it is now (after a write was refused).
    fn get(
        &self,
        name: &str,
    ) -> impl std::future::Future<Output = Result<NodeImage, kube::Error>> + Send;
}

/// The answer is decoded entry by entry (see `decode`), so a NodeImage with
/// an entry that does not decode still takes status writes.
impl StatusSink for kube::Api<nodeimage_api::lenient::Lenient<NodeImage>> {
    async fn patch(&self, name: &str, patch: serde_json::Value) -> Result<NodeImage, kube::Error> {
        let ops: json_patch::Patch =
            serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
        self.patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Json::<()>(ops),
        )
        .await
        .map(|l| crate::decode::nodeimage(l).nodeimage)
    }

    async fn get(&self, name: &str) -> Result<NodeImage, kube::Error> {
        kube::Api::get(self, name)
            .await
            .map(|l| crate::decode::nodeimage(l).nodeimage)
    }
}
