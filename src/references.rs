//! Which configs a pod template uses, and which container receives the reload env var
//! (Reloader's container-choice rules). Pure functions over the typed pod spec.

use k8s_openapi::api::core::v1::{Container, KeyToPath, PodSpec, Volume};

use crate::model::{ConfigKind, Counted};

/// Where a config is used in a pod spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigUse {
    pub kind: ConfigKind,
    pub name: String,
}

fn volume_uses(volume: &Volume, kind: ConfigKind, name: &str) -> bool {
    match kind {
        ConfigKind::ConfigMap => {
            volume.config_map.as_ref().is_some_and(|c| c.name == name)
                || volume.projected.as_ref().is_some_and(|p| {
                    p.sources
                        .iter()
                        .flatten()
                        .any(|s| s.config_map.as_ref().is_some_and(|c| c.name == name))
                })
        }
        ConfigKind::Secret => {
            volume
                .secret
                .as_ref()
                .is_some_and(|s| s.secret_name.as_deref() == Some(name))
                || volume.projected.as_ref().is_some_and(|p| {
                    p.sources
                        .iter()
                        .flatten()
                        .any(|s| s.secret.as_ref().is_some_and(|c| c.name == name))
                })
        }
        ConfigKind::SecretProviderClass => volume.csi.as_ref().is_some_and(|c| {
            c.volume_attributes
                .as_ref()
                .and_then(|a| a.get("secretProviderClass"))
                .is_some_and(|v| v == name)
        }),
    }
}

fn mounts_any(container: &Container, volume_names: &[&str]) -> bool {
    container
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| volume_names.contains(&m.name.as_str()))
}

fn env_references(container: &Container, kind: ConfigKind, name: &str) -> bool {
    let by_value_from = container.env.iter().flatten().any(|e| {
        e.value_from.as_ref().is_some_and(|src| match kind {
            ConfigKind::ConfigMap => src
                .config_map_key_ref
                .as_ref()
                .is_some_and(|r| r.name == name),
            ConfigKind::Secret => src.secret_key_ref.as_ref().is_some_and(|r| r.name == name),
            ConfigKind::SecretProviderClass => false,
        })
    });
    by_value_from
        || container.env_from.iter().flatten().any(|e| match kind {
            ConfigKind::ConfigMap => e.config_map_ref.as_ref().is_some_and(|r| r.name == name),
            ConfigKind::Secret => e.secret_ref.as_ref().is_some_and(|r| r.name == name),
            ConfigKind::SecretProviderClass => false,
        })
}

/// The container that receives the env var for a config, and whether the pod spec really uses
/// the config (`referenced`); `None` when the config is not used and `explicit` is false.
///
/// Order (Reloader's): the first regular container mounting it; else `containers[0]` if only an
/// init container mounts it; else the first regular container referencing it from env; else
/// `containers[0]` if only an init container does; else, for an explicit list, `containers[0]`.
pub fn choose_container(
    spec: &PodSpec,
    kind: ConfigKind,
    name: &str,
    explicit: bool,
) -> Option<ContainerChoice> {
    if spec.containers.is_empty() {
        return None;
    }
    let init = spec.init_containers.as_deref().unwrap_or_default();
    let volume_names: Vec<&str> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| volume_uses(v, kind, name))
        .map(|v| v.name.as_str())
        .collect();
    let referenced = |index| {
        Some(ContainerChoice {
            index,
            referenced: true,
        })
    };
    if !volume_names.is_empty() {
        if let Some(i) = spec
            .containers
            .iter()
            .position(|c| mounts_any(c, &volume_names))
        {
            return referenced(i);
        }
        if init.iter().any(|c| mounts_any(c, &volume_names)) {
            return referenced(0);
        }
    }
    if let Some(i) = spec
        .containers
        .iter()
        .position(|c| env_references(c, kind, name))
    {
        return referenced(i);
    }
    if init.iter().any(|c| env_references(c, kind, name)) {
        return referenced(0);
    }
    explicit.then_some(ContainerChoice {
        index: 0,
        referenced: false,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerChoice {
    pub index: usize,
    pub referenced: bool,
}

/// How a pod spec uses a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum UseHow {
    /// `env[].valueFrom.configMapKeyRef` / `secretKeyRef`.
    EnvValueFrom,
    /// `envFrom[].configMapRef` / `secretRef`.
    EnvFrom,
    /// A `configMap` / `secret` volume.
    Volume,
    /// A source of a `projected` volume.
    ProjectedVolume,
    /// A CSI volume with `volumeAttributes.secretProviderClass`.
    CsiVolume,
}

impl UseHow {
    pub fn as_str(self) -> &'static str {
        match self {
            UseHow::EnvValueFrom => "env valueFrom",
            UseHow::EnvFrom => "envFrom",
            UseHow::Volume => "volume",
            UseHow::ProjectedVolume => "projected volume",
            UseHow::CsiVolume => "CSI volume",
        }
    }
}

/// One place a pod spec names a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UseSite<'a> {
    pub kind: ConfigKind,
    pub name: &'a str,
    pub how: UseHow,
    /// The volume's name (volumes), or the container's (env).
    pub place: &'a str,
    /// The container is an init container (env uses).
    pub init: bool,
}

/// Calls `visit` for every place the pod spec names a config: volumes first, then the env of
/// containers and init containers (the order [`config_uses`] keeps).
pub fn visit_use_sites<'a>(spec: &'a PodSpec, mut visit: impl FnMut(UseSite<'a>)) {
    for v in spec.volumes.iter().flatten() {
        let mut site = |kind, name: &'a str, how| {
            visit(UseSite {
                kind,
                name,
                how,
                place: &v.name,
                init: false,
            })
        };
        if let Some(c) = &v.config_map {
            site(ConfigKind::ConfigMap, &c.name, UseHow::Volume);
        }
        if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) {
            site(ConfigKind::Secret, name, UseHow::Volume);
        }
        for s in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(c) = &s.config_map {
                site(ConfigKind::ConfigMap, &c.name, UseHow::ProjectedVolume);
            }
            if let Some(c) = &s.secret {
                site(ConfigKind::Secret, &c.name, UseHow::ProjectedVolume);
            }
        }
        if let Some(spc) = v
            .csi
            .as_ref()
            .and_then(|c| c.volume_attributes.as_ref())
            .and_then(|a| a.get("secretProviderClass"))
        {
            site(ConfigKind::SecretProviderClass, spc, UseHow::CsiVolume);
        }
    }
    let all = spec
        .containers
        .iter()
        .map(|c| (c, false))
        .chain(spec.init_containers.iter().flatten().map(|c| (c, true)));
    for (c, init) in all {
        let mut site = |kind, name: &'a str, how| {
            visit(UseSite {
                kind,
                name,
                how,
                place: &c.name,
                init,
            })
        };
        for e in c.env.iter().flatten() {
            if let Some(src) = &e.value_from {
                if let Some(r) = &src.config_map_key_ref {
                    site(ConfigKind::ConfigMap, &r.name, UseHow::EnvValueFrom);
                }
                if let Some(r) = &src.secret_key_ref {
                    site(ConfigKind::Secret, &r.name, UseHow::EnvValueFrom);
                }
            }
        }
        for e in c.env_from.iter().flatten() {
            if let Some(r) = &e.config_map_ref {
                site(ConfigKind::ConfigMap, &r.name, UseHow::EnvFrom);
            }
            if let Some(r) = &e.secret_ref {
                site(ConfigKind::Secret, &r.name, UseHow::EnvFrom);
            }
        }
    }
}

/// The containers (and init containers, flagged) mounting the volume named `volume`.
pub fn mounting_containers<'a>(spec: &'a PodSpec, volume: &str) -> Vec<(&'a str, bool)> {
    let all = spec
        .containers
        .iter()
        .map(|c| (c, false))
        .chain(spec.init_containers.iter().flatten().map(|c| (c, true)));
    all.filter(|(c, _)| mounts_any(c, &[volume]))
        .map(|(c, init)| (c.name.as_str(), init))
        .collect()
}

/// Keys of one projected or plain volume source: `None` when it has no `items` (all keys).
fn item_keys(items: Option<&Vec<KeyToPath>>) -> Option<Vec<Box<str>>> {
    let items = items.filter(|i| !i.is_empty())?;
    Some(items.iter().map(|i| Box::from(i.key.as_str())).collect())
}

/// The keys of a volume's use of the config: `None` (the whole config) unless each source of it
/// lists `items`. An unmounted volume reads nothing.
fn volume_keys(
    spec: &PodSpec,
    volume: &Volume,
    kind: ConfigKind,
    name: &str,
) -> Option<Option<Vec<Box<str>>>> {
    let mounted = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| mounts_any(c, &[volume.name.as_str()]));
    if !mounted || !volume_uses(volume, kind, name) {
        return None;
    }
    let mut keys = Vec::new();
    for items in source_items(volume, kind, name) {
        match item_keys(items) {
            Some(listed) => keys.extend(listed),
            None => return Some(None),
        }
    }
    Some(Some(keys))
}

/// The `items` of each source of `volume` that projects the config: the volume's own source and
/// its projected ones. A CSI volume has no items: it reads the whole config.
fn source_items<'a>(
    volume: &'a Volume,
    kind: ConfigKind,
    name: &str,
) -> Vec<Option<&'a Vec<KeyToPath>>> {
    let projected = volume
        .projected
        .iter()
        .flat_map(|p| p.sources.iter().flatten());
    match kind {
        ConfigKind::ConfigMap => {
            let own = volume.config_map.iter().filter(|c| c.name == name);
            let projected = projected.filter_map(|s| s.config_map.as_ref());
            own.map(|c| c.items.as_ref())
                .chain(
                    projected
                        .filter(|c| c.name == name)
                        .map(|c| c.items.as_ref()),
                )
                .collect()
        }
        ConfigKind::Secret => {
            let own = volume.secret.iter();
            let own = own.filter(|s| s.secret_name.as_deref() == Some(name));
            let projected = projected.filter_map(|s| s.secret.as_ref());
            own.map(|s| s.items.as_ref())
                .chain(
                    projected
                        .filter(|s| s.name == name)
                        .map(|s| s.items.as_ref()),
                )
                .collect()
        }
        ConfigKind::SecretProviderClass => vec![None],
    }
}

/// The keys of `env[].valueFrom` key refs to the config, and whether an `envFrom` reads it all.
fn env_keys(spec: &PodSpec, kind: ConfigKind, name: &str) -> (Vec<Box<str>>, bool) {
    let (mut keys, mut whole) = (Vec::new(), false);
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        for src in c.env.iter().flatten().filter_map(|e| e.value_from.as_ref()) {
            let key = match kind {
                ConfigKind::ConfigMap => src
                    .config_map_key_ref
                    .as_ref()
                    .filter(|r| r.name == name)
                    .map(|r| &r.key),
                ConfigKind::Secret => src
                    .secret_key_ref
                    .as_ref()
                    .filter(|r| r.name == name)
                    .map(|r| &r.key),
                ConfigKind::SecretProviderClass => None,
            };
            keys.extend(key.map(|k| Box::from(k.as_str())));
        }
        whole |= c.env_from.iter().flatten().any(|e| match kind {
            ConfigKind::ConfigMap => e.config_map_ref.as_ref().is_some_and(|r| r.name == name),
            ConfigKind::Secret => e.secret_ref.as_ref().is_some_and(|r| r.name == name),
            ConfigKind::SecretProviderClass => false,
        });
    }
    (keys, whole)
}

/// Which keys of the config the pod spec reads: [`Counted::Whole`] as soon as one use reads it
/// all (`envFrom`, a volume or projected source without `items`, a CSI volume).
pub fn counted_keys(spec: &PodSpec, kind: ConfigKind, name: &str) -> Counted {
    if kind == ConfigKind::SecretProviderClass {
        return Counted::Whole;
    }
    let (mut keys, whole) = env_keys(spec, kind, name);
    if whole {
        return Counted::Whole;
    }
    for volume in spec.volumes.iter().flatten() {
        match volume_keys(spec, volume, kind, name) {
            None => {}
            Some(None) => return Counted::Whole,
            Some(Some(listed)) => keys.extend(listed),
        }
    }
    match keys.is_empty() {
        true => Counted::Whole,
        false => Counted::keys(keys),
    }
}

/// Every config the pod spec uses (mounted by a container or read from env), deduplicated.
pub fn config_uses(spec: &PodSpec) -> Vec<ConfigUse> {
    let mut candidates: Vec<ConfigUse> = Vec::new();
    visit_use_sites(spec, |site| {
        let (kind, name) = (site.kind, site.name);
        if !name.is_empty() && !candidates.iter().any(|u| u.kind == kind && u.name == name) {
            candidates.push(ConfigUse {
                kind,
                name: name.to_string(),
            });
        }
    });
    // A volume that no container mounts does not count (Reloader looks for the mount).
    candidates.retain(|u| choose_container(spec, u.kind, &u.name, false).is_some());
    candidates
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn mounted_volume_picks_the_mounting_container() {
        let s = spec(json!({
            "containers": [{"name": "a"}, {"name": "b", "volumeMounts": [{"name": "cfg", "mountPath": "/c"}]}],
            "volumes": [{"name": "cfg", "configMap": {"name": "app"}}]
        }));
        assert_eq!(
            choose_container(&s, ConfigKind::ConfigMap, "app", false),
            Some(ContainerChoice {
                index: 1,
                referenced: true
            })
        );
        assert_eq!(choose_container(&s, ConfigKind::Secret, "app", false), None);
    }

    #[test]
    fn init_container_use_goes_to_first_container() {
        let s = spec(json!({
            "containers": [{"name": "a"}, {"name": "b"}],
            "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "db"}}]}]
        }));
        assert_eq!(
            choose_container(&s, ConfigKind::Secret, "db", false),
            Some(ContainerChoice {
                index: 0,
                referenced: true
            })
        );
    }

    #[test]
    fn env_value_from_and_projected_and_csi() {
        let s = spec(json!({
            "containers": [
                {"name": "a", "volumeMounts": [{"name": "p", "mountPath": "/p"}, {"name": "csi", "mountPath": "/s"}]},
                {"name": "b", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "envcm", "key": "k"}}}]}
            ],
            "volumes": [
                {"name": "p", "projected": {"sources": [{"secret": {"name": "proj"}}]}},
                {"name": "csi", "csi": {"driver": "secrets-store.csi.k8s.io", "volumeAttributes": {"secretProviderClass": "vault"}}},
                {"name": "unmounted", "configMap": {"name": "orphan"}}
            ]
        }));
        assert_eq!(
            choose_container(&s, ConfigKind::ConfigMap, "envcm", false)
                .unwrap()
                .index,
            1
        );
        assert_eq!(
            choose_container(&s, ConfigKind::Secret, "proj", false)
                .unwrap()
                .index,
            0
        );
        assert!(choose_container(&s, ConfigKind::SecretProviderClass, "vault", false).is_some());
        let uses = config_uses(&s);
        let names: Vec<_> = uses.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["proj", "vault", "envcm"]);
    }

    #[test]
    fn explicit_list_falls_back_to_first_container_unreferenced() {
        let s = spec(json!({"containers": [{"name": "a"}]}));
        assert_eq!(
            choose_container(&s, ConfigKind::ConfigMap, "x", false),
            None
        );
        assert_eq!(
            choose_container(&s, ConfigKind::ConfigMap, "x", true),
            Some(ContainerChoice {
                index: 0,
                referenced: false
            })
        );
    }

    #[test]
    fn counted_keys_are_the_keys_read_unless_one_use_reads_it_all() {
        let keys = |k: &[&str]| Counted::keys(k.iter().map(|k| Box::from(*k)).collect());
        let key_ref = |key: &str| json!({"name": "E", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": key}}});
        let mount = json!([{"name": "v", "mountPath": "/v"}]);
        let items = json!([{"key": "c", "path": "c"}]);
        // (what the pod spec holds) -> what counts
        let cases = [
            (
                json!({"containers": [{"name": "a", "env": [key_ref("b"), key_ref("a"), key_ref("b")]}]}),
                keys(&["a", "b"]),
            ),
            (
                json!({"containers": [{"name": "a", "env": [key_ref("a")], "envFrom": [{"configMapRef": {"name": "cfg"}}]}]}),
                Counted::Whole,
            ),
            (
                json!({"containers": [{"name": "a", "volumeMounts": mount}], "volumes": [{"name": "v", "configMap": {"name": "cfg", "items": items}}]}),
                keys(&["c"]),
            ),
            (
                json!({"containers": [{"name": "a", "volumeMounts": mount}], "volumes": [{"name": "v", "configMap": {"name": "cfg"}}]}),
                Counted::Whole,
            ),
            (
                json!({"containers": [{"name": "a", "volumeMounts": mount}], "volumes": [{"name": "v", "projected": {"sources": [{"configMap": {"name": "cfg", "items": items}}, {"configMap": {"name": "other"}}]}}]}),
                keys(&["c"]),
            ),
            (
                json!({"containers": [{"name": "a", "volumeMounts": mount}], "volumes": [{"name": "v", "projected": {"sources": [{"configMap": {"name": "cfg", "items": items}}, {"configMap": {"name": "cfg"}}]}}]}),
                Counted::Whole,
            ),
            // A volume nobody mounts reads nothing; the env ref still counts.
            (
                json!({"containers": [{"name": "a", "env": [key_ref("a")]}], "volumes": [{"name": "v", "configMap": {"name": "cfg"}}]}),
                keys(&["a"]),
            ),
            (
                json!({"containers": [{"name": "a"}], "initContainers": [{"name": "i", "env": [key_ref("z")]}]}),
                keys(&["z"]),
            ),
        ];
        for (i, (pod, expected)) in cases.into_iter().enumerate() {
            assert_eq!(
                counted_keys(&spec(pod), ConfigKind::ConfigMap, "cfg"),
                expected,
                "case {i}"
            );
        }
        let secret = spec(
            json!({"containers": [{"name": "a", "volumeMounts": mount, "env": [
            {"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}
        ]}], "volumes": [{"name": "v", "secret": {"secretName": "db", "items": [{"key": "ca.crt", "path": "ca"}]}}]}),
        );
        assert_eq!(
            counted_keys(&secret, ConfigKind::Secret, "db"),
            keys(&["ca.crt", "password"])
        );
        assert_eq!(
            counted_keys(&secret, ConfigKind::SecretProviderClass, "db"),
            Counted::Whole
        );
    }
}
