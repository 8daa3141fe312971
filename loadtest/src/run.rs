//! One run of one scenario, phase by phase: plan and population (setup.rs), the load
//! generator's watches, a cluster at rest (quiet.rs), the controller (launch.rs), the scenario
//! (drive.rs), the final readings and the report (outcome.rs), the result files.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use kube::Client;
use serde_json::{Value, json};

use crate::apiserver_cpu::ApiserverCpuMeter;
use crate::args::Args;
use crate::ctx::Ctx;
use crate::launch::Controllers;
use crate::ledger::State;
use crate::objects::{ConfigRef, OwnRequests, Population};
use crate::outcome::{self, Before, Gathered, Times};
use crate::progress::log;
use crate::rng::Rng;
use crate::scenario::Scenario;
use crate::setup::{self, Populated, RunEnv, result_name};
use crate::{drive, flapping, markdown, mixed, pause, quiet, report, running, tenancy};

/// Runs `scenario` once and writes its result files; returns whether it passed and its row of
/// the summary table.
pub async fn run_one(
    args: &Args,
    scenario: Scenario,
    kubeconfig: &Path,
    results_dir: &Path,
    bin: Option<&str>,
    commit: Option<&str>,
    client: &Client,
) -> Result<(bool, String)> {
    let epoch = Instant::now();
    let plan = setup::plan(args, scenario);
    let (run_id, seed) = setup::run_id_and_seed(args.seed)?;
    let env = RunEnv {
        args,
        scenario,
        plan,
        kubeconfig,
        results_dir,
        bin,
        client,
        name: result_name(args, scenario, commit),
        commit,
        run_id,
        epoch,
    };
    let mut rng = Rng::new(seed);
    let loadavg_start = outcome::loadavg();
    log(&format!(
        "== {}: run {}, seed {seed}, {} namespaces, {} workloads (load avg {loadavg_start})",
        env.name, env.run_id, env.plan.namespaces, env.plan.workloads
    ));
    let populated = setup::populate(scenario, &env.plan, &env.run_id);
    if scenario == Scenario::CustomKind {
        crate::custom_kind::install_crd(client).await?;
    }
    let own = Arc::new(OwnRequests::default());
    let (n_objects, setup_s) =
        setup::create(args, client, &populated.pop, &env.plan, &env.run_id, &own).await?;

    let apiserver_cpu = ApiserverCpuMeter::start(kubeconfig);
    let result = measure(&env, populated, own, &mut rng).await;
    let apiserver_cpu_s = apiserver_cpu.finish().map(report::round);
    if matches!(scenario, Scenario::Poisoned | Scenario::Chaos) {
        // Normally removed by the run; a failed run must not leave it refusing writes.
        tenancy::unpoison(client, &env.run_id).await;
    }
    setup::cleanup(client, &env.run_id, args.keep, args.concurrency).await;
    let mut report = result?;
    let passed = report["correctness"]["passed"].as_bool().unwrap_or(false);
    report["run"]["setup_s"] = json!(report::round(setup_s));
    report["run"]["objects_created"] = json!(n_objects);
    report["run"]["loadavg_start"] = json!(loadavg_start);
    // From the controller's start to the end of the run (not the population's creation).
    report["run"]["apiserver_cpu_s"] = json!(apiserver_cpu_s);
    report["run"]["seed"] = json!(seed);
    write_results(&env, &report)?;
    Ok((passed, markdown::summary_row(&report)))
}

/// `<name>.json` and `<name>.md` (the `.svg` was written with the figures).
fn write_results(env: &RunEnv<'_>, report: &Value) -> Result<()> {
    let md = markdown::markdown(report);
    let dir = env.results_dir;
    std::fs::write(
        dir.join(format!("{}.json", env.name)),
        serde_json::to_string_pretty(report)? + "\n",
    )?;
    std::fs::write(dir.join(format!("{}.md", env.name)), &md)?;
    println!("{md}");
    log(&format!(
        "results: {}",
        dir.join(format!("{}.{{json,md,svg}}", env.name)).display()
    ));
    Ok(())
}

/// Everything between the population's creation and its deletion: returns the report.
async fn measure(
    env: &RunEnv<'_>,
    populated: Populated,
    own: Arc<OwnRequests>,
    rng: &mut Rng,
) -> Result<Value> {
    let Populated {
        pop,
        targets,
        initial_hashes,
    } = populated;
    let population = json!({
        "namespaces": pop.namespaces.len(),
        "workloads": pop.workloads.len(),
        "configs": pop.configs.len(),
    });
    let state = Arc::new(Mutex::new(State::default()));
    let watches = mixed::spawn_watches(env.client, &env.run_id, &state, env.epoch, env.scenario);
    if let Err(e) = wait_watches_synced(&state, watches.len(), pop.workloads.len()).await {
        watches.iter().for_each(|w| w.abort());
        return Err(e);
    }
    let (rollouts, rollouts_task) = pause::spawn(env.client, &env.run_id, env.epoch);
    let running_keys = pop.workloads.iter().filter(|w| w.running_image.is_some());
    let running: running::Shared = Arc::new(Mutex::new(running::Rollouts::new(
        running_keys.map(|w| w.key()),
    )));
    let running_watches = running::spawn(env.client, &env.run_id, env.epoch, &running);
    if env.plan.wait_for_rest && !env.args.no_wait_rollouts {
        quiet::wait_for_rest(env.client, &env.plan, &pop, &rollouts).await;
    }
    let n_running = running.lock().unwrap().len();
    let running_timeout = Duration::from_secs_f64(env.plan.wait_base_s + 2.0 * n_running as f64);
    let running_initially = match n_running {
        0 => None,
        // Their first pods, before the controller starts: a reload's rollout is then measured
        // from a running pod, not from the population's creation.
        _ => {
            let t = Instant::now();
            let done =
                running::wait_complete(&running, 1, running_timeout, "before the controller").await;
            Some((done, t.elapsed().as_secs_f64()))
        }
    };

    let mut ctl = Controllers::prepare(env, &own).await?;
    let before = Before {
        api: crate::apimetrics::scrape(env.client).await.ok(),
        own: own.snapshot(),
    };
    ctl.start(env, pop.namespaces.len()).await?;
    tokio::time::sleep(Duration::from_secs_f64(env.plan.warmup_s)).await;
    let proxy_at_changes = ctl.proxy.as_ref().map(|p| p.stats());
    let t_changes = env.epoch.elapsed().as_secs_f64();
    let wall_changes = jiff::Timestamp::now();

    let ctx = driving_context(env, &state, &own, pop);
    let mut driven = drive::drive(env, &ctx, &mut ctl, rng, &targets, &rollouts).await?;
    let times = settle(env, &driven, t_changes, wall_changes).await;
    if n_running > 0 {
        running::wait_complete(&running, 1, running_timeout, "after the reloads").await;
    }

    let fin = outcome::final_readings(
        env,
        &mut ctl,
        &own,
        proxy_at_changes,
        &times,
        &mut driven.notes,
    )
    .await;
    watches.iter().for_each(|w| w.abort());
    running_watches.iter().for_each(|w| w.abort());
    rollouts_task.abort();
    let _ = std::fs::remove_file(&ctl.proxy_kubeconfig);
    let st = state.lock().unwrap();
    let running = running.lock().unwrap();
    outcome::report(
        env,
        Gathered {
            state: &st,
            initial_hashes: &initial_hashes,
            driven,
            ctl: &ctl,
            before,
            fin,
            times,
            population,
            running: (n_running > 0).then_some((&*running, running_initially)),
        },
    )
}

/// What the scenario drivers share: the client, the ledger and the population.
fn driving_context(
    env: &RunEnv<'_>,
    state: &Arc<Mutex<State>>,
    own: &Arc<OwnRequests>,
    pop: Population,
) -> Arc<Ctx> {
    Arc::new(Ctx {
        client: env.client.clone(),
        epoch: env.epoch,
        state: state.clone(),
        own: own.clone(),
        run_id: env.run_id.clone(),
        config_tags: config_tags(env.scenario, &pop),
        pop,
        concurrency: env.args.concurrency,
        nonce: AtomicUsize::new(0),
        phase: Mutex::new(env.scenario.name().to_string()),
    })
}

/// Waits the settle period after the drive; the run's phase times.
async fn settle(
    env: &RunEnv<'_>,
    driven: &outcome::Driven,
    t_changes: f64,
    wall_changes: jiff::Timestamp,
) -> Times {
    let t_reloaded = env.epoch.elapsed().as_secs_f64();
    log(&format!(
        "{} expected reloads seen; settling {}s",
        if driven.completed { "all" } else { "NOT all" },
        env.plan.settle_s
    ));
    tokio::time::sleep(env.plan.settle()).await;
    Times {
        changes: t_changes,
        reloaded: t_reloaded,
        end: env.epoch.elapsed().as_secs_f64(),
        wall_changes,
    }
}

/// Waits until the load generator's watches have listed every workload of the run (they start
/// before the controller, so a reload at its start-up is seen too).
async fn wait_watches_synced(state: &Mutex<State>, watches: usize, workloads: usize) -> Result<()> {
    let t = Instant::now();
    loop {
        let (synced, known) = {
            let st = state.lock().unwrap();
            (st.watches_synced, st.workloads_known())
        };
        if synced >= watches && known >= workloads {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(300) {
            bail!("the workload watch saw {known}/{workloads} workloads after 300s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The tag of each config's changes in the report when the scenario tags by config rather than
/// by phase: how the workload references it (references), the workload's kind (mixed), the
/// tenant (noisy-neighbour, poisoned), or flapping and bystander (flapping).
fn config_tags(scenario: Scenario, pop: &Population) -> BTreeMap<ConfigRef, String> {
    let mut tags = BTreeMap::new();
    for w in &pop.workloads {
        for c in &w.configs {
            let tag = match scenario {
                Scenario::References => format!("{} {:?}", w.refs.name(), c.kind),
                Scenario::Mixed => format!("{:?}", w.kind),
                Scenario::NoisyNeighbour | Scenario::Poisoned => tenancy::tag(c),
                Scenario::Flapping => flapping::tag(c),
                _ => return tags,
            };
            tags.insert(c.clone(), tag);
        }
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Plan, Scale};

    #[test]
    fn configs_are_tagged_by_reference_or_kind_only_where_the_scenario_says() {
        let plan = Plan::new(Scenario::References, Scale::Small);
        let refs = setup::populate(Scenario::References, &plan, "abc").pop;
        let tags = config_tags(Scenario::References, &refs);
        assert_eq!(tags.len(), refs.configs.len());
        let distinct: std::collections::BTreeSet<_> = tags.values().collect();
        // Every reference style, each for a ConfigMap and a Secret.
        assert_eq!(distinct.len(), 2 * crate::objects::RefStyle::OTHERS.len());
        assert!(config_tags(Scenario::Steady, &refs).is_empty());
        let plan = Plan::new(Scenario::Mixed, Scale::Small);
        let mixed = setup::populate(Scenario::Mixed, &plan, "abc").pop;
        let kinds: std::collections::BTreeSet<_> =
            config_tags(Scenario::Mixed, &mixed).into_values().collect();
        assert_eq!(kinds.len(), crate::objects::WorkloadKind::ALL.len());
    }
}
