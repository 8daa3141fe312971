//! What the index keeps per config and per workload.

use std::sync::Arc;

use crate::config::PreciseKeys;
use crate::model::{ConfigKey, ConfigKind, Counted, WorkloadKey};
use crate::reload_policy::{NamePattern, ReloadPolicy};
use crate::reloader_format::hash::Digest;
use crate::reloader_format::precise::KeyDigests;

/// A config reduced to what decisions need. 64 bytes, plus 40 and 24 a key with
/// `--precise-keys`; no payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigState {
    pub digest: Digest,
    /// Per-key digests, kept only with `--precise-keys` on.
    pub keys: KeyDigests,
    pub ignore: bool,
    pub matched: bool,
    /// The object's resourceVersion as a number (0: unknown). Used only to order two views of
    /// the same object: a watch event older than a list already applied is not a change.
    pub resource_version: u64,
    /// Its wave annotations (`kube-reloader.io/waves`, `kube-reloader.io/resume`), on the heap
    /// and only when it has one: most configs have neither.
    pub waves: Option<Box<ConfigWaves>>,
}

/// A config's wave annotations (`src/waves/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWaves {
    /// Its own wave policy, as written and known to parse (`None`: the namespace's or the
    /// flag's applies).
    pub policy: Option<String>,
    /// The value of `kube-reloader.io/resume`: a new value releases the config's halt.
    pub resume: Option<String>,
}

impl ConfigWaves {
    /// The config's own policy, parsed.
    pub fn policy(&self) -> Option<crate::waves::PolicyText> {
        self.policy
            .as_deref()
            .and_then(|raw| crate::waves::PolicyText::parse(raw).ok())
    }

    /// The config has a wave annotation of either kind.
    pub fn annotated(annotations: &std::collections::BTreeMap<String, String>) -> bool {
        use crate::waves::{RESUME_ANNOTATION, WAVES_ANNOTATION};
        annotations.contains_key(WAVES_ANNOTATION) || annotations.contains_key(RESUME_ANNOTATION)
    }

    /// Read from a config's annotations; `None` when it has neither. A malformed policy is
    /// reported and left out (the namespace's or the flag's then applies).
    pub fn from_annotations(
        annotations: &std::collections::BTreeMap<String, String>,
        config: &ConfigKey,
    ) -> Option<Box<ConfigWaves>> {
        use crate::waves::{PolicyText, RESUME_ANNOTATION, WAVES_ANNOTATION};
        let policy = annotations.get(WAVES_ANNOTATION).and_then(|raw| {
            PolicyText::parse(raw)
                .map_err(|error| {
                    tracing::warn!(%config, annotation = WAVES_ANNOTATION, %error,
                        "bad wave policy on the config: the namespace's or the flag's applies")
                })
                .ok()
                .map(|_| raw.clone())
        });
        let resume = annotations.get(RESUME_ANNOTATION).cloned();
        (policy.is_some() || resume.is_some()).then(|| Box::new(ConfigWaves { policy, resume }))
    }
}

impl ConfigState {
    /// The value a workload counting `counted` records for this state: Reloader's hash, or the
    /// key-precise value over the counted keys when per-key digests are known.
    pub fn value_for(&self, counted: &Counted) -> String {
        match counted {
            Counted::Keys(keys) => self
                .keys
                .precise_value(keys)
                .unwrap_or_else(|| self.digest.reloader_hash()),
            Counted::Whole => self.digest.reloader_hash(),
        }
    }

    /// A recorded value is current in either form (Reloader's, or key-precise over the keys
    /// the template `reads`), so switching the mode rolls nothing by itself; with the mode off
    /// no per-key digests are kept, and only Reloader's form is recognised.
    pub fn is_current(&self, recorded: &str, reads: &Counted) -> bool {
        recorded == self.digest.reloader_hash() || recorded == self.value_for(reads)
    }
}

/// One config a workload's pod template uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedUse {
    pub kind: ConfigKind,
    pub name: Arc<str>,
    /// The Reloader hash the template already carries for it (env var or annotation).
    pub recorded: Option<Box<str>>,
    /// The template mounts it or reads it from env (false: only named in a reload list).
    pub referenced: bool,
    /// The keys the template reads of it ([`Counted::Whole`] when not referenced).
    pub reads: Counted,
}

/// One workload, immutable once built (replaced whole on update).
#[derive(Debug, Clone)]
pub struct WorkloadEntry {
    pub key: WorkloadKey,
    /// Shared between workloads with the same simple policy ([`ReloadPolicy::shared`]).
    pub policy: Arc<ReloadPolicy>,
    /// A boxed slice, not a `Vec`: the entry never grows, and 8 bytes less per workload puts
    /// it in the allocator's next smaller size class.
    pub uses: Box<[IndexedUse]>,
    /// `paused-at` (unix seconds) while kube-reloader holds a pause on a Deployment.
    pub paused_at: Option<i64>,
    /// `spec.paused` of a Deployment.
    pub paused: bool,
    /// Labelled `kube-reloader.io/canary=true`: first in the waves of a change (`src/waves/`).
    pub canary: bool,
}

impl WorkloadEntry {
    pub fn uses_config(&self, kind: ConfigKind, name: &str) -> Option<&IndexedUse> {
        self.uses
            .iter()
            .find(|u| u.kind == kind && &*u.name == name)
    }

    /// What the workload's value for `config` covers under `mode`.
    pub fn counted(&self, kind: ConfigKind, name: &str, mode: PreciseKeys) -> Counted {
        match self.policy.counts_keys(mode) {
            true => self
                .uses_config(kind, name)
                .map_or(Counted::Whole, |u| u.reads.clone()),
            false => Counted::Whole,
        }
    }

    /// The pod template mounts the config or reads it from env.
    pub fn references(&self, kind: ConfigKind, name: &str) -> bool {
        self.uses_config(kind, name).is_some_and(|u| u.referenced)
    }

    /// Configs the index links to this workload: those it uses and literal list entries.
    pub fn edge_configs(&self) -> Vec<ConfigKey> {
        let ns = &self.key.namespace;
        let mut out: Vec<ConfigKey> = self
            .uses
            .iter()
            .map(|u| ConfigKey {
                kind: u.kind,
                namespace: ns.clone(),
                name: u.name.clone(),
            })
            .collect();
        for kind in ConfigKind::ALL {
            for pattern in &self.policy.for_type(kind).explicit {
                if let NamePattern::Literal(name) = pattern {
                    let key = ConfigKey {
                        kind,
                        namespace: ns.clone(),
                        name: name.clone(),
                    };
                    if !out.contains(&key) {
                        out.push(key);
                    }
                }
            }
        }
        out
    }

    pub fn has_patterns(&self) -> bool {
        ConfigKind::ALL.iter().any(|k| {
            self.policy
                .for_type(*k)
                .explicit
                .iter()
                .any(|p| matches!(p, NamePattern::Regex(_)))
        })
    }
}
