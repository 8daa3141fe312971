//! A halt as it is kept in the cluster, so that it outlives the replica that found it: a
//! restart or the namespace's next owner holds the same workloads until the halt is released
//! or the config changes again. One entry per halted config in the `kube-reloader-halts`
//! ConfigMap of the controller's namespace (least privilege: no write on the users' configs).
//! Pure: the keys and the text; the runner does the I/O.

use serde::{Deserialize, Serialize};

use crate::model::{ConfigKey, ConfigKind};

use super::Halt;

/// The ConfigMap, in the controller's namespace, that holds every halt.
pub const HALTS_CONFIGMAP: &str = "kube-reloader-halts";
/// The same ConfigMap keeps the reloads a maintenance window or a delay holds, one key per
/// workload under this prefix (`reload_windows::HeldReload`).
pub const HELD_PREFIX: &str = "held.";

/// Longest data key a ConfigMap takes.
const MAX_KEY: usize = 253;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HaltRecord {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The Reloader hash of the config's content when it halted: the halt holds while the
    /// config has it, and a new value (the fix) ends it.
    pub hash: String,
    /// The config's `kube-reloader.io/resume` when it halted: a different value releases it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
    pub wave: usize,
    pub waves: usize,
    pub reason: String,
    /// When it halted (RFC 3339).
    pub at: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("not a halt record: {0}")]
    Json(#[from] serde_json::Error),
    #[error("unknown config kind {0:?}")]
    Kind(String),
}

impl HaltRecord {
    pub fn new(halt: &Halt, hash: String, resume: Option<String>, at: jiff::Timestamp) -> Self {
        Self {
            kind: halt.config.kind.as_str().to_string(),
            namespace: halt.config.namespace.to_string(),
            name: halt.config.name.to_string(),
            hash,
            resume,
            wave: halt.wave,
            waves: halt.waves,
            reason: halt.reason.clone(),
            at: at.to_string(),
        }
    }

    pub fn config(&self) -> Result<ConfigKey, RecordError> {
        let kind = ConfigKind::ALL
            .into_iter()
            .find(|k| k.as_str() == self.kind)
            .ok_or_else(|| RecordError::Kind(self.kind.clone()))?;
        Ok(ConfigKey::new(kind, &self.namespace, &self.name))
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a halt record serializes")
    }

    pub fn decode(text: &str) -> Result<Self, RecordError> {
        Ok(serde_json::from_str(text)?)
    }

    /// As `explain` and `/debug/explain` show it.
    pub fn describe(&self) -> String {
        format!(
            "wave {} of {} of the change of {}/{} at {} failed: {}",
            self.wave, self.waves, self.kind, self.name, self.at, self.reason
        )
    }
}

/// The halts of the ConfigMap's `data` (the reloads held by a window or a delay, under
/// [`HELD_PREFIX`], are not halts); an entry that does not read as one is returned apart, with
/// why, for the caller to report.
pub fn records_from(
    data: std::collections::BTreeMap<String, String>,
) -> (Vec<HaltRecord>, Vec<(String, RecordError)>) {
    let (mut records, mut bad) = (Vec::new(), Vec::new());
    for (key, text) in data
        .into_iter()
        .filter(|(k, _)| !k.starts_with(HELD_PREFIX))
    {
        match HaltRecord::decode(&text).and_then(|r| r.config().map(|_| r)) {
            Ok(record) => records.push(record),
            Err(e) => bad.push((key, e)),
        }
    }
    (records, bad)
}

/// The ConfigMap data key of `config`'s halt: `<kind>.<namespace>.<name>`, readable in
/// `kubectl get`, or with the name replaced by its blake3 when that would be too long.
pub fn data_key(config: &ConfigKey) -> String {
    kept_key("", config.kind.as_str(), &config.namespace, &config.name)
}

/// `<prefix><kind>.<namespace>.<name>`, with the name replaced by its blake3 when that would be
/// longer than a ConfigMap data key may be.
pub fn kept_key(prefix: &str, kind: &str, namespace: &str, name: &str) -> String {
    let key = format!("{prefix}{kind}.{namespace}.{name}");
    if key.len() <= MAX_KEY {
        return key;
    }
    let hash = blake3::hash(name.as_bytes()).to_hex();
    format!("{prefix}{kind}.{namespace}.{}", &hash[..32])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{WorkloadKey, WorkloadKind};

    fn halt() -> Halt {
        Halt {
            config: ConfigKey::new(ConfigKind::Secret, "team-a", "tls"),
            wave: 2,
            waves: 5,
            reason: "deployment/web ProgressDeadlineExceeded".into(),
            held: vec![WorkloadKey::new(WorkloadKind::Deployment, "team-a", "api")],
        }
    }

    #[test]
    fn a_record_reads_back_as_written_and_names_its_config() {
        let at: jiff::Timestamp = "2026-12-03T10:00:00Z".parse().unwrap();
        let record = HaltRecord::new(&halt(), "abc".into(), Some("1".into()), at);
        let back = HaltRecord::decode(&record.encode()).unwrap();
        assert_eq!(back, record);
        assert_eq!(back.config().unwrap(), halt().config);
        assert_eq!(
            back.describe(),
            "wave 2 of 5 of the change of secret/tls at 2026-12-03T10:00:00Z failed: \
             deployment/web ProgressDeadlineExceeded"
        );
    }

    #[test]
    fn garbage_and_unknown_kinds_are_errors_not_halts() {
        assert!(HaltRecord::decode("{not json").is_err());
        let at = jiff::Timestamp::UNIX_EPOCH;
        let good = HaltRecord::new(&halt(), "abc".into(), None, at);
        let mut record = good.clone();
        record.kind = "pod".into();
        assert!(matches!(record.config(), Err(RecordError::Kind(_))));
        let data = [
            ("a".to_string(), good.encode()),
            ("b".to_string(), record.encode()),
            ("c".to_string(), "{not json".to_string()),
        ];
        let (records, bad) = records_from(data.into_iter().collect());
        assert_eq!(records, vec![good]);
        let bad: Vec<&str> = bad.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(bad, ["b", "c"]);
    }

    #[test]
    fn data_keys_are_readable_and_never_too_long() {
        let short = ConfigKey::new(ConfigKind::ConfigMap, "ns", "app.settings");
        assert_eq!(data_key(&short), "configmap.ns.app.settings");
        let long_name = "n".repeat(253);
        let long = ConfigKey::new(ConfigKind::Secret, &"s".repeat(63), &long_name);
        let key = data_key(&long);
        assert!(key.len() <= MAX_KEY, "{}", key.len());
        assert!(key.starts_with("secret.sss"));
        let other = ConfigKey::new(ConfigKind::Secret, &"s".repeat(63), &"m".repeat(253));
        assert_ne!(data_key(&other), key);
    }
}
