//! A pod template, from its slim prost messages (`template_wire.rs`) to the part of
//! k8s-openapi's type the index reads
//! (`references.rs`, `reloader_format::template::recorded_hash`): the template's labels and
//! annotations; each container's name, env (value and config key references), envFrom and
//! volume mounts; the volumes that can hold a config (ConfigMap, Secret, projected, CSI).
//! Everything else (images, probes, resources, affinity...) is dropped here: the index never
//! reads it, and `tests.rs` checks that a template with every kind of reference gives the same
//! index entry as its JSON.

use super::template_wire as pb;
use k8s_openapi::api::core::v1 as api;

/// Decodes a template's bytes (the `decode` of an index `ProtobufTemplate`).
pub(super) fn decode_pod_template(bytes: bytes::Bytes) -> Result<api::PodTemplateSpec, String> {
    let template = <pb::PodTemplateSpec as prost::Message>::decode(bytes);
    template.map(pod_template).map_err(|e| e.to_string())
}

fn pod_template(t: pb::PodTemplateSpec) -> api::PodTemplateSpec {
    api::PodTemplateSpec {
        metadata: t.metadata.map(
            |m| k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                annotations: (!m.annotations.is_empty()).then_some(m.annotations),
                labels: (!m.labels.is_empty()).then_some(m.labels),
                name: m.name,
                ..Default::default()
            },
        ),
        spec: t.spec.map(pod_spec),
    }
}

fn pod_spec(s: pb::PodSpec) -> api::PodSpec {
    api::PodSpec {
        containers: s.containers.into_iter().map(container).collect(),
        init_containers: non_empty(s.init_containers.into_iter().map(container).collect()),
        volumes: non_empty(s.volumes.into_iter().map(volume).collect()),
        ..Default::default()
    }
}

fn non_empty<T>(items: Vec<T>) -> Option<Vec<T>> {
    (!items.is_empty()).then_some(items)
}

fn name_of(reference: Option<pb::LocalObjectReference>) -> String {
    reference.and_then(|r| r.name).unwrap_or_default()
}

fn container(c: pb::Container) -> api::Container {
    api::Container {
        name: c.name.unwrap_or_default(),
        env: non_empty(c.env.into_iter().map(env_var).collect()),
        env_from: non_empty(c.env_from.into_iter().map(env_from).collect()),
        volume_mounts: non_empty(c.volume_mounts.into_iter().map(volume_mount).collect()),
        ..Default::default()
    }
}

fn env_var(e: pb::EnvVar) -> api::EnvVar {
    api::EnvVar {
        name: e.name.unwrap_or_default(),
        value: e.value,
        value_from: e.value_from.map(|source| api::EnvVarSource {
            config_map_key_ref: source.config_map_key_ref.map(|r| {
                let (name, key, optional) = key_selector(r);
                api::ConfigMapKeySelector {
                    name,
                    key,
                    optional,
                }
            }),
            secret_key_ref: source.secret_key_ref.map(|r| {
                let (name, key, optional) = key_selector(r);
                api::SecretKeySelector {
                    name,
                    key,
                    optional,
                }
            }),
            ..Default::default()
        }),
    }
}

/// (name, key, optional) of a key reference.
fn key_selector(r: pb::KeySelector) -> (String, String, Option<bool>) {
    (
        name_of(r.local_object_reference),
        r.key.unwrap_or_default(),
        r.optional,
    )
}

fn env_from(e: pb::EnvFromSource) -> api::EnvFromSource {
    api::EnvFromSource {
        prefix: e.prefix,
        config_map_ref: e.config_map_ref.map(|r| api::ConfigMapEnvSource {
            name: name_of(r.local_object_reference),
            optional: r.optional,
        }),
        secret_ref: e.secret_ref.map(|r| api::SecretEnvSource {
            name: name_of(r.local_object_reference),
            optional: r.optional,
        }),
    }
}

fn volume_mount(m: pb::VolumeMount) -> api::VolumeMount {
    api::VolumeMount {
        name: m.name.unwrap_or_default(),
        mount_path: m.mount_path.unwrap_or_default(),
        sub_path: m.sub_path,
        read_only: m.read_only,
        ..Default::default()
    }
}

fn key_to_path(items: Vec<pb::KeyToPath>) -> Option<Vec<api::KeyToPath>> {
    let items = items.into_iter().map(|i| api::KeyToPath {
        key: i.key.unwrap_or_default(),
        path: i.path.unwrap_or_default(),
        mode: i.mode,
        ..Default::default()
    });
    non_empty(items.collect())
}

fn volume(v: pb::Volume) -> api::Volume {
    let source = v.volume_source.unwrap_or_default();
    api::Volume {
        name: v.name.unwrap_or_default(),
        config_map: source.config_map.map(|c| api::ConfigMapVolumeSource {
            name: name_of(c.local_object_reference),
            items: key_to_path(c.items),
            optional: c.optional,
            default_mode: c.default_mode,
            ..Default::default()
        }),
        secret: source.secret.map(|s| api::SecretVolumeSource {
            secret_name: s.secret_name,
            items: key_to_path(s.items),
            optional: s.optional,
            default_mode: s.default_mode,
            ..Default::default()
        }),
        projected: source.projected.map(|p| api::ProjectedVolumeSource {
            sources: non_empty(p.sources.into_iter().map(projection).collect()),
            default_mode: p.default_mode,
            ..Default::default()
        }),
        csi: source.csi.map(|c| api::CSIVolumeSource {
            driver: c.driver.unwrap_or_default(),
            volume_attributes: (!c.volume_attributes.is_empty()).then_some(c.volume_attributes),
            read_only: c.read_only,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn projection(p: pb::VolumeProjection) -> api::VolumeProjection {
    api::VolumeProjection {
        config_map: p.config_map.map(|c| api::ConfigMapProjection {
            name: name_of(c.local_object_reference),
            items: key_to_path(c.items),
            optional: c.optional,
        }),
        secret: p.secret.map(|s| api::SecretProjection {
            name: name_of(s.local_object_reference),
            items: key_to_path(s.items),
            optional: s.optional,
        }),
        ..Default::default()
    }
}
