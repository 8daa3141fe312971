//! Which tenant a namespace belongs to. By default every namespace is its own tenant; with
//! `--tenant-label=<key>` namespaces carrying that label are grouped by its value (e.g.
//! `capsule.clastix.io/tenant`, `team`), and namespaces without it stay their own tenant. The
//! namespace watch keeps the map current; the write queue reads it when a change is queued.

use std::collections::BTreeMap;
use std::sync::Arc;

use dashmap::DashMap;

use super::scheduler::TenantId;

#[derive(Default)]
pub struct Tenants {
    label: Option<String>,
    /// Namespaces carrying the label -> their tenant (`<key>=<value>`: a namespace name cannot
    /// contain `=`, so a group never shares its id with a lone namespace).
    groups: DashMap<Arc<str>, TenantId, ahash::RandomState>,
    /// One shared id per label value.
    ids: DashMap<String, TenantId, ahash::RandomState>,
}

impl Tenants {
    /// Tenants grouped by the value of the namespace label `key` (`None`: one per namespace).
    pub fn new(label: Option<String>) -> Self {
        Self {
            label,
            ..Self::default()
        }
    }

    /// The namespace label that groups namespaces, if any.
    pub fn label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    pub fn tenant_of(&self, namespace: &Arc<str>) -> TenantId {
        match self.groups.get(namespace) {
            Some(tenant) => tenant.clone(),
            None => namespace.clone(),
        }
    }

    /// A namespace was seen with these labels (added, changed, or listed).
    pub fn namespace_seen(&self, namespace: &str, labels: Option<&BTreeMap<String, String>>) {
        let Some(key) = &self.label else { return };
        match labels.and_then(|l| l.get(key)) {
            Some(value) => {
                let id = self
                    .ids
                    .entry(value.clone())
                    .or_insert_with(|| Arc::from(format!("{key}={value}")))
                    .clone();
                self.groups.insert(Arc::from(namespace), id);
            }
            None => self.namespace_gone(namespace),
        }
    }

    pub fn namespace_gone(&self, namespace: &str) {
        self.groups.remove(namespace);
    }

    /// After a relist: namespaces not in `seen` lost the label or were deleted meanwhile.
    pub fn retain(&self, seen: &std::collections::HashSet<String>) {
        self.groups.retain(|ns, _| seen.contains(&**ns));
    }

    /// Labelled namespaces known (for logs).
    pub fn grouped_namespaces(&self) -> usize {
        self.groups.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn namespaces_are_their_own_tenant_unless_the_label_groups_them() {
        let tenants = Tenants::new(Some("team".into()));
        tenants.namespace_seen("a-dev", Some(&labels(&[("team", "a")])));
        tenants.namespace_seen("a-prod", Some(&labels(&[("team", "a")])));
        tenants.namespace_seen("b", Some(&labels(&[("other", "x")])));
        let of = |ns: &str| tenants.tenant_of(&Arc::from(ns)).to_string();
        assert_eq!(of("a-dev"), "team=a");
        assert_eq!(of("a-prod"), "team=a");
        assert_eq!(of("b"), "b");
        assert_eq!(of("unknown"), "unknown");
        // The label removed: on its own again.
        tenants.namespace_seen("a-prod", Some(&labels(&[])));
        assert_eq!(of("a-prod"), "a-prod");
        tenants.retain(&["b".to_string()].into_iter().collect());
        assert_eq!(of("a-dev"), "a-dev");
    }

    #[test]
    fn without_a_label_every_namespace_is_a_tenant() {
        let tenants = Tenants::new(None);
        tenants.namespace_seen("x", Some(&labels(&[("team", "a")])));
        assert_eq!(&*tenants.tenant_of(&Arc::from("x")), "x");
        assert_eq!(tenants.grouped_namespaces(), 0);
    }
}
