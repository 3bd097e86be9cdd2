//! The pins in containerd's own API: the image record's labels in the
//! namespace kubelet uses (k8s.io), read and written only here.

use super::cri::namespaced;
use crate::pins::CALL_TIMEOUT;
use containerd_client::services::v1::images_client::ImagesClient;
use containerd_client::services::v1::{
    GetImageRequest, Image, ListImagesRequest, UpdateImageRequest,
};
use std::collections::BTreeSet;
use tonic::transport::Channel;

/// containerd's pin label: CRI reports the image `pinned`, kubelet keeps it.
pub const PIN_LABEL: &str = "io.cri-containerd.pinned";
/// The pin label's value.
pub const PIN_VALUE: &str = "pinned";
/// Marks the pins this node's daemon made (value: the node name).
pub const OWNER_LABEL: &str = "nodeimage.dev/pinned-by";

/// The images this node's daemon pinned.
pub(crate) async fn list_ours(
    images: &mut ImagesClient<Channel>,
    node: &str,
) -> Result<BTreeSet<String>, tonic::Status> {
    let filter = format!("labels.\"{OWNER_LABEL}\"=={}", quoted(node));
    let list = images.list(namespaced(ListImagesRequest {
        filters: vec![filter],
    }));
    let list = tokio::time::timeout(CALL_TIMEOUT, list)
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("listing pinned images"))??;
    Ok(list
        .into_inner()
        .images
        .into_iter()
        .filter(|i| i.labels.get(OWNER_LABEL).map(String::as_str) == Some(node))
        .map(|i| i.name)
        .collect())
}

/// A containerd filter value in double quotes.
fn quoted(v: &str) -> String {
    format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Pins `name` for `node`, or unpins it. Ok(false) when there is nothing to
/// do: the image is not on the node (yet), or someone else pinned it.
pub(crate) async fn set_pin(
    images: &mut ImagesClient<Channel>,
    name: &str,
    node: &str,
    pin: bool,
) -> Result<bool, tonic::Status> {
    let got = images.get(namespaced(GetImageRequest {
        name: name.to_string(),
    }));
    let image = match tokio::time::timeout(CALL_TIMEOUT, got).await {
        Err(_) => return Err(tonic::Status::deadline_exceeded("reading the image record")),
        Ok(Err(s)) if s.code() == tonic::Code::NotFound => return Ok(false),
        Ok(Err(s)) => return Err(s),
        Ok(Ok(r)) => match r.into_inner().image {
            Some(i) => i,
            None => return Ok(false),
        },
    };
    let Some(mut image) = relabel(image, node, pin) else {
        return Ok(false);
    };
    image.created_at = None;
    image.updated_at = None;
    let update = images.update(namespaced(UpdateImageRequest {
        image: Some(image),
        update_mask: Some(prost_types::FieldMask {
            paths: vec![
                format!("labels.{PIN_LABEL}"),
                format!("labels.{OWNER_LABEL}"),
            ],
        }),
        source_date_epoch: None,
    }));
    tokio::time::timeout(CALL_TIMEOUT, update)
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("updating the image record"))??;
    Ok(true)
}

/// The image record with the pin labels as they should be, or None when it
/// must not be touched: pinning an image someone else pinned (containerd's
/// sandbox image, an operator, another daemon sharing this containerd), or
/// unpinning one this node's daemon did not pin.
fn relabel(mut image: Image, node: &str, pin: bool) -> Option<Image> {
    let pinned = image.labels.get(PIN_LABEL).map(String::as_str) == Some(PIN_VALUE);
    let ours = image.labels.get(OWNER_LABEL).map(String::as_str) == Some(node);
    match pin {
        true if pinned => None,
        true => {
            image.labels.insert(PIN_LABEL.into(), PIN_VALUE.into());
            image.labels.insert(OWNER_LABEL.into(), node.into());
            Some(image)
        }
        false if !ours => None,
        false => {
            image.labels.remove(PIN_LABEL);
            image.labels.remove(OWNER_LABEL);
            Some(image)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(labels: &[(&str, &str)]) -> Image {
        Image {
            name: "r/x:v1".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn only_our_own_pins_are_ever_removed() {
        let sandbox = image(&[(PIN_LABEL, PIN_VALUE)]);
        assert!(
            relabel(sandbox.clone(), "n1", true).is_none(),
            "not taken over"
        );
        assert!(relabel(sandbox, "n1", false).is_none(), "not unpinned");
        let neighbours = image(&[(PIN_LABEL, PIN_VALUE), (OWNER_LABEL, "n2")]);
        assert!(
            relabel(neighbours.clone(), "n1", true).is_none(),
            "not taken over"
        );
        assert!(relabel(neighbours, "n1", false).is_none(), "not unpinned");

        let plain = image(&[("other", "1")]);
        let pinned = relabel(plain.clone(), "n1", true).expect("pinned");
        assert_eq!(
            pinned.labels.get(PIN_LABEL).map(String::as_str),
            Some(PIN_VALUE)
        );
        assert_eq!(
            pinned.labels.get(OWNER_LABEL).map(String::as_str),
            Some("n1")
        );
        assert_eq!(pinned.labels.get("other").map(String::as_str), Some("1"));
        assert!(
            relabel(plain, "n1", false).is_none(),
            "nothing of ours to unpin"
        );

        let unpinned = relabel(pinned, "n1", false).expect("unpinned");
        assert_eq!(unpinned.labels.len(), 1, "{:?}", unpinned.labels);
    }

    #[test]
    fn filter_values_are_quoted() {
        assert_eq!(quoted("node-1.example"), "\"node-1.example\"");
        assert_eq!(quoted("a\"b"), "\"a\\\"b\"");
    }
}
