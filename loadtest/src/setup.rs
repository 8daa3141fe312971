//! Before a run: its numbers (the scale's, overridden by the command line), its id, seed and
//! result name, what every phase is given (`RunEnv`), the population the scenario needs,
//! creating it, and deleting it afterwards.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use kube::Client;

use crate::args::Args;
use crate::objects::{
    self, ConfigRef, Kind, OwnRequests, Population, RUN_LABEL, RefStyle, WorkloadKind, WorkloadSpec,
};
use crate::progress::log;
use crate::scenario::{Plan, Scenario};
use crate::sharded;
use crate::tenancy::{self, Tenancy};

/// What a run of one scenario is given, fixed before anything is created.
pub struct RunEnv<'a> {
    pub args: &'a Args,
    pub scenario: Scenario,
    pub plan: Plan,
    pub kubeconfig: &'a Path,
    pub results_dir: &'a Path,
    /// What `{bin}` stands for.
    pub bin: Option<&'a str>,
    pub client: &'a Client,
    /// The stem of the result files.
    pub name: String,
    /// The commit of the load test's checkout (`git describe`-like; None outside git).
    pub commit: Option<&'a str>,
    pub run_id: String,
    /// Start of the run's clock.
    pub epoch: Instant,
}

/// `<scenario>-<scale>[-<variant>][-<build>]`: the stem of a run's result files. The variant
/// is what the scenario was run with (`<N>r` replicas, `tenants`); the build is
/// `--controller-label` when given (another controller: its name and version, e.g.
/// `reloader-v1.4.1`), else the commit of this checkout.
pub fn result_name(args: &Args, scenario: Scenario, commit: Option<&str>) -> String {
    let variant = match scenario {
        Scenario::Sharded => format!("-{}r", args.replicas),
        Scenario::Chaos => crate::chaos::settings::Settings::new(args).variant(),
        Scenario::NoisyNeighbour | Scenario::Poisoned if args.tenant_groups => "-tenants".into(),
        Scenario::Flapping if args.churn_limit == Some(0) => "-no-breaker".into(),
        _ => String::new(),
    };
    format!(
        "{}-{}{variant}{}",
        scenario.name(),
        args.scale.name(),
        build_suffix(args, commit)
    )
}

/// `-<label>` (characters a file name should not have replaced), else `-<commit>`, else empty.
pub fn build_suffix(args: &Args, commit: Option<&str>) -> String {
    let build = args.controller_label.as_deref().or(commit);
    build
        .map(|b| {
            let safe = b.replace(
                |c: char| !c.is_ascii_alphanumeric() && !".-".contains(c),
                "_",
            );
            format!("-{safe}")
        })
        .unwrap_or_default()
}

/// The plan of `scenario` at the scale of `args`, with the command line's overrides.
pub fn plan(args: &Args, scenario: Scenario) -> Plan {
    let mut plan = Plan::new(scenario, args.scale);
    if let Some(n) = args.namespaces {
        plan.namespaces = n.max(1);
    }
    if let Some(n) = args.workloads {
        plan.workloads = n.max(1);
    }
    if let Some(n) = args.changes {
        plan.changes = n;
        plan.kill_after = n / 3;
    }
    if let Some(r) = args.rate {
        plan.rate = r;
    }
    if scenario == Scenario::Sharded {
        plan.replicas = usize::from(args.replicas);
    }
    plan.running_share = args.running_share;
    if let Some(image) = &args.running_image {
        plan.running_image = image.clone();
    }
    if let Some(s) = args.flap_period {
        plan.flap_period_s = s;
    }
    if let Some(s) = args.flap_for {
        plan.flap_for_s = s;
    }
    if let Some(m) = args.churn_limit {
        plan.churn_limit = m;
    }
    if scenario == Scenario::Chaos {
        let chaos = crate::chaos::settings::Settings::new(args);
        plan.replicas = chaos.max_replicas();
        plan.changes = (plan.rate * chaos.duration_s) as usize;
    }
    if matches!(scenario, Scenario::NoisyNeighbour | Scenario::Poisoned) {
        plan.tenant_groups = args.tenant_groups;
        plan.namespaces = plan
            .namespaces
            .max(plan.quiet_tenants * plan.namespaces_per_quiet_tenant());
    }
    plan
}

/// A short id for the run's objects (from the clock and the pid) and the seed of its choices
/// (`seed`, else the clock).
pub fn run_id_and_seed(seed: Option<u64>) -> Result<(String, u64)> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64;
    let run_id = format!(
        "{:06x}",
        (nanos ^ u64::from(std::process::id()).rotate_left(20)) & 0xff_ffff
    );
    Ok((run_id, seed.unwrap_or(nanos)))
}

/// The population of a run and what the scenario drives in it.
pub struct Populated {
    pub pop: Population,
    pub targets: Targets,
    /// Initial hash -> config: a reload to one of them is unexpected.
    pub initial_hashes: BTreeMap<String, ConfigRef>,
}

/// What the scenario's drivers change, besides the standard population.
pub struct Targets {
    /// The first `standard` workloads are the standard population (changes pick among them).
    pub standard: usize,
    /// The configs of the scenario's extra namespace (fanout: the shared one; large: the big
    /// Secrets; flapping: the flapping Secrets).
    pub special: Vec<ConfigRef>,
    pub tenancy: Option<Tenancy>,
}

/// The standard population, shaped or extended as `scenario` needs (no I/O).
pub fn populate(scenario: Scenario, plan: &Plan, run_id: &str) -> Populated {
    let mut pop = Population::new(run_id);
    pop.standard(plan.namespaces, plan.workloads);
    let standard = pop.workloads.len();
    let mut special: Vec<ConfigRef> = Vec::new();
    let mut tenancy = None;
    match scenario {
        Scenario::NoisyNeighbour | Scenario::Poisoned => {
            tenancy = Some(tenancy::populate(&mut pop, scenario, plan));
        }
        // The standard population, its workloads referencing their configs in Reloader's other
        // ways (round robin), or spread over the workload kinds.
        Scenario::References => {
            for (j, w) in pop.workloads.iter_mut().enumerate() {
                w.refs = RefStyle::OTHERS[j % RefStyle::OTHERS.len()];
            }
        }
        Scenario::CustomKind => {
            for w in &mut pop.workloads {
                w.kind = WorkloadKind::KnativeService;
            }
        }
        Scenario::Mixed => {
            for (j, w) in pop.workloads.iter_mut().enumerate() {
                w.kind = WorkloadKind::ALL[j % WorkloadKind::ALL.len()];
            }
        }
        // Every Deployment gets the period, so one paused without a change of its own shows.
        Scenario::Pause => {
            for w in &mut pop.workloads {
                w.pause_period = Some(format!("{}s", plan.pause_period_s));
            }
        }
        Scenario::Fanout | Scenario::Waves => special.push(add_fanout(&mut pop, plan)),
        Scenario::Large => special = add_large_secrets(&mut pop, plan),
        Scenario::Flapping => special = crate::flapping::populate(&mut pop, plan),
        _ => {}
    }
    if plan.running_share > 0.0 {
        crate::running::mark(&mut pop, plan.running_share, &plan.running_image);
    }
    let initial_hashes = pop.initial_hashes();
    Populated {
        pop,
        targets: Targets {
            standard,
            special,
            tenancy,
        },
        initial_hashes,
    }
}

/// An extra namespace with one ConfigMap used by `fanout_width` Deployments; returns it.
fn add_fanout(pop: &mut Population, plan: &Plan) -> ConfigRef {
    let ns = pop.add_namespace("fanout");
    let shared = ConfigRef {
        namespace: ns.clone(),
        kind: Kind::ConfigMap,
        name: "shared-config".into(),
    };
    pop.add_config(shared.clone(), b"initial-shared".to_vec());
    for k in 0..plan.fanout_width {
        pop.add_workload(WorkloadSpec {
            namespace: ns.clone(),
            name: format!("fan-{k}"),
            configs: vec![shared.clone()],
            ..Default::default()
        });
    }
    shared
}

/// An extra namespace with `large_secrets` Secrets of `large_secret_bytes`, each used by one
/// Deployment; returns them.
fn add_large_secrets(pop: &mut Population, plan: &Plan) -> Vec<ConfigRef> {
    let ns = pop.add_namespace("large");
    let mut secrets = Vec::new();
    for k in 0..plan.large_secrets {
        let c = ConfigRef {
            namespace: ns.clone(),
            kind: Kind::Secret,
            name: format!("big-{k}"),
        };
        let mut p = format!("initial-{k}-").into_bytes();
        p.resize(plan.large_secret_bytes, b'x');
        pop.add_config(c.clone(), p);
        pop.add_workload(WorkloadSpec {
            namespace: ns.clone(),
            name: format!("big-{k}"),
            configs: vec![c.clone()],
            ..Default::default()
        });
        secrets.push(c);
    }
    secrets
}

/// Creates the population (and the plan's background objects); returns the objects created
/// and the seconds it took. On failure the run's namespaces are deleted (unless `keep`).
pub async fn create(
    args: &Args,
    client: &Client,
    pop: &Population,
    plan: &Plan,
    run_id: &str,
    own: &Arc<OwnRequests>,
) -> Result<(usize, f64)> {
    let t0 = Instant::now();
    let mut n_objects = pop.namespaces.len() + pop.configs.len() + pop.workloads.len();
    log(&format!(
        "creating {n_objects} objects, {} in flight",
        args.concurrency
    ));
    let mut created = objects::create_population(client, pop, args.concurrency, own).await;
    if created.is_ok() && !plan.background.is_empty() {
        let (b, nss) = (&plan.background, &pop.namespaces);
        created = objects::create_background(client, run_id, nss, b, args.concurrency, own)
            .await
            .map(|n| n_objects += n);
    }
    let setup_s = t0.elapsed().as_secs_f64();
    if let Err(e) = created {
        cleanup(client, run_id, args.keep, args.concurrency).await;
        return Err(e);
    }
    log(&format!(
        "created {n_objects} objects in {setup_s:.1}s ({:.0}/s)",
        n_objects as f64 / setup_s
    ));
    Ok((n_objects, setup_s))
}

/// Deletes the run's namespaces and the sharded scenario's Lease namespace (in the background),
/// or says how to find them when `keep`.
pub async fn cleanup(client: &Client, run_id: &str, keep: bool, concurrency: usize) {
    if keep {
        log(&format!(
            "keeping namespaces of run {run_id} (label {RUN_LABEL}={run_id})"
        ));
        return;
    }
    let selector = format!(
        "{RUN_LABEL} in ({run_id},{})",
        sharded::lease_label_value(run_id)
    );
    match objects::delete_namespaces(client, &selector, concurrency).await {
        Ok(n) => log(&format!(
            "deleting the run's {n} namespaces (in the background)"
        )),
        Err(e) => log(&format!("cleanup failed: {e:#}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scale;
    use clap::Parser;

    fn args(extra: &[&str]) -> Args {
        Args::parse_from(["kube-reloader-loadtest"].iter().chain(extra))
    }

    #[test]
    fn results_are_named_by_scenario_scale_variant_and_build() {
        let plain = args(&["--scale", "medium"]);
        assert_eq!(
            result_name(&plain, Scenario::Steady, Some("1a2b3c4")),
            "steady-medium-1a2b3c4"
        );
        assert_eq!(result_name(&plain, Scenario::Steady, None), "steady-medium");
        let four = args(&["--replicas", "4"]);
        assert_eq!(
            result_name(&four, Scenario::Sharded, Some("1a2b3c4-dirty")),
            "sharded-small-4r-1a2b3c4-dirty"
        );
        assert_eq!(
            result_name(&four, Scenario::Steady, Some("1a2b3c4")),
            "steady-small-1a2b3c4"
        );
        // Another controller: its label replaces the commit.
        let reloader = args(&["--tenant-groups", "--controller-label", "reloader v1.4.1/x"]);
        assert_eq!(
            result_name(&reloader, Scenario::Poisoned, Some("1a2b3c4")),
            "poisoned-small-tenants-reloader_v1.4.1_x"
        );
        let chaos = |extra: &[&str]| {
            let a = args(&[&["--scale", "medium"], extra].concat());
            result_name(&a, Scenario::Chaos, Some("1a2b3c4"))
        };
        assert_eq!(chaos(&["--seed", "25"]), "chaos-medium-3r-1a2b3c4");
        assert_eq!(
            chaos(&["--seed", "26", "--enable-ha"]),
            "chaos-medium-3r-ha-seed26-1a2b3c4"
        );
        let unbroken = args(&["--churn-limit", "0"]);
        assert_eq!(
            result_name(&unbroken, Scenario::Flapping, Some("1a2b3c4")),
            "flapping-small-no-breaker-1a2b3c4"
        );
        assert_eq!(
            result_name(&args(&["--churn-limit", "5"]), Scenario::Flapping, None),
            "flapping-small"
        );
    }

    #[test]
    fn the_command_line_overrides_the_scale() {
        let p = plan(
            &args(&["--changes", "30", "--rate", "5", "--namespaces", "0"]),
            Scenario::Restart,
        );
        assert_eq!((p.changes, p.kill_after, p.rate), (30, 10, 5.0));
        assert_eq!(p.namespaces, 1, "at least one namespace");
        let default = Plan::new(Scenario::Restart, Scale::Small);
        assert_eq!(p.workloads, default.workloads);
        // Replicas only for sharded; tenants get enough namespaces for every quiet tenant.
        let a = args(&["--replicas", "4", "--namespaces", "2", "--tenant-groups"]);
        assert_eq!(plan(&a, Scenario::Sharded).replicas, 4);
        assert_eq!(plan(&a, Scenario::Steady).replicas, 1);
        let t = plan(&a, Scenario::NoisyNeighbour);
        assert!(t.tenant_groups);
        assert_eq!(
            t.namespaces,
            t.quiet_tenants * t.namespaces_per_quiet_tenant()
        );
        let a = args(&[
            "--flap-period",
            "1s",
            "--flap-for",
            "2m",
            "--churn-limit",
            "0",
        ]);
        let f = plan(&a, Scenario::Flapping);
        assert_eq!(
            (f.flap_period_s, f.flap_rewrites(), f.churn_limit),
            (1.0, 120, 0)
        );
        assert_eq!(plan(&args(&[]), Scenario::Flapping).churn_limit, 3);
    }

    #[test]
    fn fanout_and_large_add_their_namespace_after_the_standard_population() {
        let p = Plan::new(Scenario::Fanout, Scale::Small);
        let f = populate(Scenario::Fanout, &p, "abc");
        assert_eq!(f.targets.standard, p.workloads);
        assert_eq!(f.pop.workloads.len(), p.workloads + p.fanout_width);
        assert_eq!(f.targets.special.len(), 1);
        assert_eq!(f.pop.users[&f.targets.special[0]].len(), p.fanout_width);

        let p = Plan::new(Scenario::Large, Scale::Small);
        let l = populate(Scenario::Large, &p, "abc");
        let big = &l.targets.special;
        assert_eq!(big.len(), p.large_secrets);
        assert!(big.iter().all(|c| c.kind == Kind::Secret));
        assert_eq!(l.pop.configs[&big[0]].len(), p.large_secret_bytes);
        assert_eq!(l.initial_hashes.len(), l.pop.configs.len());
    }

    #[test]
    fn run_ids_are_six_hex_digits_and_the_seed_is_kept() {
        let (id, seed) = run_id_and_seed(Some(7)).unwrap();
        assert_eq!(seed, 7);
        assert_eq!(id.len(), 6);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
