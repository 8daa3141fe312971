//! One-shot LISTs (the hand-over's backfill, the listed fallback's relists) in the wire format
//! the watches read: protobuf for a built-in kind unless `--wire-format=json`, or the server
//! already refused protobuf for the resource. Under `auto` a 406/415 records JSON for the
//! resource (explain, metric) and the page is read again in JSON.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::{StreamExt, TryStreamExt};
use kube::Resource;
use kube::api::ObjectList;
use serde::de::DeserializeOwned;
use tracing::warn;

use super::context::{WatchContext, WatchObserver};
use super::learned::WireFormats;
use super::protobuf_watch::{ProtobufApi, initial_events};
use crate::config::WireFormat;
use crate::handover::gains::{ListedPage, PageRequest, StreamedList};
use crate::protobuf::Decode;
use crate::resources::CONFIG_PAGE_SIZE;
use crate::shard::server_sharding::with_selector;

impl WatchContext {
    /// One page of `page`'s LIST, in the format its watch reads.
    pub async fn list_page<K>(&self, page: PageRequest<'_, K>) -> Result<ListedPage<K>, kube::Error>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    {
        let Some(decode) = self.protobuf_decoder(&page) else {
            return list_json(&page).await;
        };
        let api = ProtobufApi::new(self.client.clone(), page.api.resource_url(), decode);
        match api.list_page(list_request(&page)?).await {
            Err(e) if self.json_fallback().learns_from(page.resource, &e) => list_json(&page).await,
            listed => listed,
        }
    }
}

impl WatchContext {
    /// `page`'s LIST as one streaming request, in pages of its `limit` (`initial_events`), when
    /// it can be: a list of the current state, of a kind read in protobuf and watched (a
    /// streaming list is a watch: a workload kind found by LIST, for want of the permission, is
    /// listed in pages), from a server that streams lists. `None`: list it page by page. Under
    /// `auto`, a 406/415 records JSON for the resource, so the caller's next attempt lists it in
    /// JSON pages.
    pub fn streamed_list<K>(&self, page: &PageRequest<'_, K>) -> Option<StreamedList<K>>
    where
        K: Resource + Send + 'static,
    {
        let current =
            page.params.resource_version.is_none() && page.params.continue_token.is_none();
        let watched = !self
            .listed
            .kinds()
            .any(|kind| kind.as_str() == page.resource);
        if !current || !watched || !self.streams_lists.load(Ordering::Acquire) {
            return None;
        }
        let decode = self.protobuf_decoder(page)?;
        let api = ProtobufApi::new(self.client.clone(), page.api.resource_url(), decode);
        let page_size = page.params.limit.unwrap_or(CONFIG_PAGE_SIZE) as usize;
        let selector = page.shard_selector.map(str::to_string);
        let (fallback, resource) = (self.json_fallback(), page.resource);
        let pages = initial_events(api, page.params, selector, page_size).map_err(move |e| {
            fallback.learns_from(resource, &e);
            e
        });
        Some(pages.boxed())
    }

    fn json_fallback(&self) -> JsonFallback {
        JsonFallback {
            auto: self.settings.wire_format == WireFormat::Auto,
            formats: self.wire_formats.clone(),
            observer: self.observer.clone(),
        }
    }

    /// How `page` is decoded from protobuf; `None`: it is read in JSON (a kind without a
    /// decoder, `--wire-format=json`, or a server that refused protobuf for it).
    fn protobuf_decoder<K>(&self, page: &PageRequest<'_, K>) -> Option<Decode<K>> {
        let learned_json = self.wire_formats.is_json(page.resource);
        page.decode
            .clone()
            .filter(|_| self.settings.wire_format != WireFormat::Json && !learned_json)
    }
}

/// What a one-shot list learns from a server's refusal of protobuf.
struct JsonFallback {
    auto: bool,
    formats: WireFormats,
    observer: Arc<dyn WatchObserver>,
}

impl JsonFallback {
    /// Whether `error` is a 406/415 that `auto` answers with JSON: if so the resource is
    /// recorded as read in JSON (explain, metric), so it is listed in JSON from now on.
    fn learns_from(&self, resource: &'static str, error: &kube::Error) -> bool {
        let kube::Error::Api(status) = error else {
            return false;
        };
        if !self.auto || !matches!(status.code, 406 | 415) {
            return false;
        }
        warn!(
            resource,
            code = status.code,
            "the API server does not serve this resource in protobuf: listing it in JSON"
        );
        self.formats.record(resource, "json");
        self.observer.wire_format(resource, "json");
        true
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
