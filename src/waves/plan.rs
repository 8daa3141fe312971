//! Which workloads go in which wave: pure, so `kube-reloader plan` and the controller cut the
//! same waves from the same workloads.

use crate::model::WorkloadKey;

use super::policy::WavePolicy;

/// The label that puts a workload in the first wave of every change it is affected by.
pub const CANARY_LABEL: &str = "kube-reloader.io/canary";

/// One affected workload, as the plan sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub key: WorkloadKey,
    /// Labelled [`CANARY_LABEL`]`=true`.
    pub canary: bool,
}

/// The waves of one change, in order; every candidate is in exactly one. A change at or under
/// the policy's threshold is one wave.
pub fn plan_waves(mut candidates: Vec<Candidate>, policy: &WavePolicy) -> Vec<Vec<WorkloadKey>> {
    if candidates.is_empty() {
        return Vec::new();
    }
    // Labelled canaries first, then a stable order, so a retried plan cuts the same waves.
    candidates.sort_by(|a, b| {
        (
            !a.canary,
            &a.key.namespace,
            &a.key.name,
            a.key.kind.as_str(),
        )
            .cmp(&(
                !b.canary,
                &b.key.namespace,
                &b.key.name,
                b.key.kind.as_str(),
            ))
    });
    let total = candidates.len();
    let keys: Vec<WorkloadKey> = candidates.iter().map(|c| c.key.clone()).collect();
    if total <= policy.threshold {
        return vec![keys];
    }
    let labelled = candidates.iter().filter(|c| c.canary).count();
    let first = match labelled {
        0 => policy.canary.size(total),
        n => n,
    };
    let mut waves = Vec::new();
    let mut rest = keys.as_slice();
    let mut size = first;
    while !rest.is_empty() {
        let (wave, after) = rest.split_at(size.min(rest.len()));
        waves.push(wave.to_vec());
        rest = after;
        size = next_size(size, policy.growth);
    }
    waves
}

/// The next wave's size: `growth` times this one, and always at least one more workload.
fn next_size(size: usize, growth: f64) -> usize {
    let grown = ((size as f64) * growth).ceil() as usize;
    grown.max(size + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WorkloadKind;
    use crate::waves::policy::Canary;

    fn candidates(n: usize) -> Vec<Candidate> {
        (0..n)
            .map(|i| Candidate {
                key: WorkloadKey::new(WorkloadKind::Deployment, "ns", &format!("w-{i:03}")),
                canary: false,
            })
            .collect()
    }

    fn sizes(waves: &[Vec<WorkloadKey>]) -> Vec<usize> {
        waves.iter().map(Vec::len).collect()
    }

    #[test]
    fn a_change_above_the_threshold_grows_from_the_canary_and_covers_everyone_once() {
        let policy = WavePolicy {
            threshold: 10,
            canary: Canary::Percent(5.0),
            growth: 2.0,
            ..Default::default()
        };
        let waves = plan_waves(candidates(200), &policy);
        assert_eq!(sizes(&waves), [10, 20, 40, 80, 50]);
        let mut all: Vec<_> = waves.concat();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all.dedup();
        assert_eq!(all.len(), 200);
    }

    #[test]
    fn at_or_under_the_threshold_everything_is_one_wave() {
        let policy = WavePolicy::default();
        assert_eq!(sizes(&plan_waves(candidates(10), &policy)), [10]);
        assert_eq!(sizes(&plan_waves(candidates(11), &policy)), [1, 2, 4, 4]);
        assert!(plan_waves(Vec::new(), &policy).is_empty());
    }

    #[test]
    fn labelled_canaries_make_the_first_wave_whatever_their_names() {
        let mut c = candidates(30);
        c[29].canary = true;
        c[17].canary = true;
        let waves = plan_waves(c, &WavePolicy::default());
        let first: Vec<&str> = waves[0].iter().map(|k| &*k.name).collect();
        assert_eq!(first, ["w-017", "w-029"]);
        assert_eq!(sizes(&waves), [2, 4, 8, 16]);
    }

    #[test]
    fn growth_of_one_still_moves_forward() {
        let policy = WavePolicy {
            threshold: 0,
            canary: Canary::Count(1),
            growth: 1.0,
            ..Default::default()
        };
        assert_eq!(sizes(&plan_waves(candidates(6), &policy)), [1, 2, 3]);
    }
}
