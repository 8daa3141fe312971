//! The `mixed` scenario's workload kinds on the load generator's watch: Deployments,
//! StatefulSets and DaemonSets are recorded like Deployments (a template change is the reload);
//! a CronJob is never modified by a reload, Reloader creates a Job from it instead, so a Job
//! whose controller owner is a CronJob of the run counts as that CronJob's reload (once per Job),
//! and a change of the CronJob's own template is recorded under another key (`cronjob:ns/name`)
//! that no change expects, so it is unexpected.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Client, Resource};
use tokio::task::JoinHandle;

use crate::ledger::State;
use crate::objects::RUN_LABEL;

/// How the watch records an object of one kind.
pub trait Watched:
    Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    fn record(&self, st: &mut State, t: f64);
    fn forget(&self, st: &mut State);
}

fn ns_key<K: Resource>(o: &K) -> Option<String> {
    Some(format!(
        "{}/{}",
        o.meta().namespace.as_deref()?,
        o.meta().name.as_deref()?
    ))
}

macro_rules! templated {
    ($t:ty) => {
        impl Watched for $t {
            fn record(&self, st: &mut State, t: f64) {
                let Some(key) = ns_key(self) else { return };
                let generation = self.metadata.generation.unwrap_or(0);
                st.apply(key, generation, &self.spec.template, t);
            }
            fn forget(&self, st: &mut State) {
                if let Some(key) = ns_key(self) {
                    st.delete(&key);
                }
            }
        }
    };
}

templated!(Deployment);
templated!(StatefulSet);
templated!(DaemonSet);

/// The key of a CronJob's own template: no change expects a reload there.
fn cronjob_key(c: &CronJob) -> Option<String> {
    Some(format!("cronjob:{}", ns_key(c)?))
}

impl Watched for CronJob {
    fn record(&self, st: &mut State, t: f64) {
        let Some(key) = cronjob_key(self) else { return };
        let template = self
            .spec
            .job_template
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let generation = self.metadata.generation.unwrap_or(0);
        st.apply(key, generation, &template, t);
    }
    fn forget(&self, st: &mut State) {
        if let Some(key) = cronjob_key(self) {
            st.delete(&key);
        }
    }
}

impl Watched for Job {
    fn record(&self, st: &mut State, t: f64) {
        let owner = self
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "CronJob" && o.controller == Some(true));
        let (Some(owner), Some(ns), Some(uid), Some(spec)) = (
            owner,
            self.metadata.namespace.as_deref(),
            self.metadata.uid.clone(),
            self.spec.as_ref(),
        ) else {
            return;
        };
        st.apply_job(uid, format!("{ns}/{}", owner.name), &spec.template, t);
    }
    fn forget(&self, _: &mut State) {}
}

/// A Knative Service (`custom-kind`): its revision template, recorded as a Deployment's.
impl Watched for crate::custom_kind::KnativeService {
    fn record(&self, st: &mut State, t: f64) {
        let (Some(ns), Some(name)) = (&self.metadata.namespace, &self.metadata.name) else {
            return;
        };
        let generation = self.metadata.generation.unwrap_or(0);
        st.apply(format!("{ns}/{name}"), generation, &self.spec.template, t);
    }
    fn forget(&self, st: &mut State) {
        if let (Some(ns), Some(name)) = (&self.metadata.namespace, &self.metadata.name) {
            st.delete(&format!("{ns}/{name}"));
        }
    }
}

/// Watches the run's objects of kind `K` and records every change of a reloader field.
async fn observe<K: Watched>(
    client: Client,
    run_id: String,
    state: Arc<Mutex<State>>,
    epoch: Instant,
) {
    let api: Api<K> = Api::all(client);
    let cfg = watcher::Config::default()
        .labels(&format!("{RUN_LABEL}={run_id}"))
        .page_size(1000);
    let mut stream = watcher::watcher(api, cfg).boxed();
    while let Some(ev) = stream.next().await {
        let t = epoch.elapsed().as_secs_f64();
        let error = {
            let mut st = state.lock().unwrap();
            match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    o.record(&mut st, t);
                    None
                }
                Ok(watcher::Event::Delete(o)) => {
                    o.forget(&mut st);
                    None
                }
                Ok(watcher::Event::InitDone) => {
                    st.watches_synced += 1;
                    None
                }
                Ok(watcher::Event::Init) => None,
                Err(e) => {
                    st.watch_errors += 1;
                    Some(e.to_string())
                }
            }
        };
        if let Some(e) = error {
            crate::progress::log(&format!("{} watch error (retrying): {e}", K::kind(&())));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// The watches of a run: Deployments only, every kind of `mixed` and the Jobs created from
/// CronJobs, or `custom-kind`'s Knative Services only.
pub fn spawn_watches(
    client: &Client,
    run_id: &str,
    state: &Arc<Mutex<State>>,
    epoch: Instant,
    scenario: crate::scenario::Scenario,
) -> Vec<JoinHandle<()>> {
    use crate::scenario::Scenario;
    let args = || (client.clone(), run_id.to_string(), state.clone(), epoch);
    let mut out = Vec::new();
    let (c, r, s, e) = args();
    if scenario == Scenario::CustomKind {
        out.push(tokio::spawn(observe::<crate::custom_kind::KnativeService>(
            c, r, s, e,
        )));
        return out;
    }
    out.push(tokio::spawn(observe::<Deployment>(c, r, s, e)));
    if scenario == Scenario::Mixed {
        let (c, r, s, e) = args();
        out.push(tokio::spawn(observe::<StatefulSet>(c, r, s, e)));
        let (c, r, s, e) = args();
        out.push(tokio::spawn(observe::<DaemonSet>(c, r, s, e)));
        let (c, r, s, e) = args();
        out.push(tokio::spawn(observe::<CronJob>(c, r, s, e)));
        let (c, r, s, e) = args();
        out.push(tokio::spawn(observe::<Job>(c, r, s, e)));
    }
    out
}
