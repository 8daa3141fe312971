//! How a config object becomes the payload that is hashed: the data of a ConfigMap or a
//! Secret, nothing of its metadata.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Resource;
use serde::de::DeserializeOwned;

use crate::model::ConfigKind;

use crate::reloader_format::hash::{ConfigPayload, pairs_bytes};

/// A watched config object, split into identity, annotations and payload.
pub trait ConfigSource:
    Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
    const KIND: ConfigKind;
    fn into_payload(self) -> ConfigPayload;
    /// The bytes of the payload [`Self::into_payload`] would make (keys and values).
    fn payload_bytes(&self) -> usize;
}

impl ConfigSource for ConfigMap {
    const KIND: ConfigKind = ConfigKind::ConfigMap;
    fn into_payload(self) -> ConfigPayload {
        ConfigPayload::ConfigMap {
            data: self.data.unwrap_or_default(),
            binary_data: self
                .binary_data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
        }
    }

    fn payload_bytes(&self) -> usize {
        pairs_bytes(self.data.iter().flatten(), String::len)
            + pairs_bytes(self.binary_data.iter().flatten(), |v| v.0.len())
    }
}

impl ConfigSource for Secret {
    const KIND: ConfigKind = ConfigKind::Secret;
    fn into_payload(self) -> ConfigPayload {
        let mut data: BTreeMap<String, Vec<u8>> = self
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        // stringData is write-only, but a client may still send it back: it wins, as on write.
        for (k, v) in self.string_data.unwrap_or_default() {
            data.insert(k, v.into_bytes());
        }
        ConfigPayload::Secret { data }
    }

    fn payload_bytes(&self) -> usize {
        pairs_bytes(self.data.iter().flatten(), |v| v.0.len())
            + pairs_bytes(self.string_data.iter().flatten(), String::len)
    }
}
