//! One-shot LISTs (the hand-over's backfill, the listed fallback's relists) in the wire format
//! the watches read: protobuf for a built-in kind unless `--wire-format=json`, or the server
//! already refused protobuf for the resource. Under `auto` a 406/415 records JSON for the
//! resource (explain, metric) and the page is read again in JSON.

use kube::Resource;
use kube::api::ObjectList;
use serde::de::DeserializeOwned;
use tracing::warn;

use super::context::WatchContext;
use super::protobuf_watch::ProtobufApi;
use crate::config::WireFormat;
use crate::handover::gains::{ListedPage, PageRequest};
use crate::shard::server_sharding::with_selector;

impl WatchContext {
    /// One page of `page`'s LIST, in the format its watch reads.
    pub async fn list_page<K>(&self, page: PageRequest<'_, K>) -> Result<ListedPage<K>, kube::Error>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    {
        let format = self.settings.wire_format;
        let learned_json = self.wire_formats.is_json(page.resource);
        let decode = page
            .decode
            .clone()
            .filter(|_| format != WireFormat::Json && !learned_json);
        let Some(decode) = decode else {
            return list_json(&page).await;
        };
        let api = ProtobufApi::new(self.client.clone(), page.api.resource_url(), decode);
        match api.list_page(list_request(&page)?).await {
            Err(kube::Error::Api(status))
                if format == WireFormat::Auto && matches!(status.code, 406 | 415) =>
            {
                warn!(
                    resource = page.resource,
                    code = status.code,
                    "the API server does not serve this resource in protobuf: listing it in JSON"
                );
                self.wire_formats.record(page.resource, "json");
                self.observer.wire_format(page.resource, "json");
                list_json(&page).await
            }
            listed => listed,
        }
    }
}

/// The LIST request of `page`, with its own `shardSelector` when it has one.
fn list_request<K: Resource>(
    page: &PageRequest<'_, K>,
) -> Result<http::Request<Vec<u8>>, kube::Error> {
    let mut request = kube::core::Request::new(page.api.resource_url())
        .list(page.params)
        .map_err(kube::Error::BuildRequest)?;
    if let Some(uri) = page
        .shard_selector
        .and_then(|selector| with_selector(request.uri(), selector))
    {
        *request.uri_mut() = uri;
    }
    request.extensions_mut().insert("list");
    Ok(request)
}

async fn list_json<K>(page: &PageRequest<'_, K>) -> Result<ListedPage<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let request = list_request(page)?;
    let client = page.api.clone().into_client();
    let list: ObjectList<K> = client.request(request).await?;
    Ok(ListedPage {
        items: list.items,
        continue_token: list.metadata.continue_.filter(|c| !c.is_empty()),
    })
}
