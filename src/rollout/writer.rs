//! Writes reloads to the API server, one strategy per workload kind:
//! - Deployment, StatefulSet, DaemonSet, DeploymentConfig, Argo Rollout: JSON Patch of the pod
//!   template, guarded by a `test` of the resourceVersion (optimistic concurrency);
//! - Argo Rollout with `rollout-strategy: restart`, or whose template is a Deployment's
//!   (`spec.workloadRef`): `spec.restartAt`;
//! - CronJob: never modified; a Job is created from its template; with
//!   `cronjob-reload-strategy: patch`, a JSON Patch of its job template and its running Jobs
//!   re-created;
//! - Job: deleted and re-created with the same name and the new template;
//! - any kind but CronJob and Job annotated `kube-reloader.io/restart-by: eviction`: its pods
//!   evicted one at a time, the template untouched (`eviction`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy,
};
use opentelemetry::trace::Status;
use serde_json::{Value, json};
use tracing::{Instrument, Span, debug, info, info_span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::config::{AnnotationKeys, Settings};
use crate::model::{ConfigKey, WorkloadKey, WorkloadKind};
use crate::pod_restart::{IN_PLACE_UNSUPPORTED, RestartBy, evicts_for};
use crate::reload_policy::{
    CronJobReloadStrategy, RolloutStrategy, cronjob_reload_strategy_of, pause_period_of,
    restart_by_for, rollout_strategy_of,
};
use crate::reloader_format::template::{
    EnvPlacement, TemplateChange, edit_template, json_patch_ops,
};
use crate::resources::{api_resource, workload_reference};
use crate::shard::{Ownership, Settling};

use crate::shadow::Shadow;
use crate::shadow::marks::{carries, marks_of, ours_after_edit};

use super::events::{EventSink, failed_message, reloaded_message};
use super::eviction::Restarted;
use super::pause::PauseKeeper;
use super::queue::{QueuedChange, WorkloadWriter, WriteError, WriteOutcome, WriteTurn, classify};

/// Shadow mode: how often, and how far apart, a vanished Job is read again (see
/// `read_recreated_job`): 2 s in all.
const SHADOW_JOB_REREADS: u32 = 10;
const SHADOW_JOB_REREAD_PAUSE: Duration = Duration::from_millis(200);

/// A limiter wait longer than this re-reads the workload before writing (once per attempt).
const REREAD_AFTER_WAIT: Duration = Duration::from_millis(200);

/// A JSON Patch whose `test` of the resourceVersion fails gets a bare 422 (reason Invalid, no
/// causes, no hint of the test), as does an op that no longer applies to the current object. The
/// ops were derived from the object just read, so both mean it changed since: a conflict, retried
/// on a fresh read. A 422 with causes is a real validation error. A 404 means the workload was
/// deleted since it was read: the fresh read then drops the write as vanished.
fn classify_json_patch(error: kube::Error) -> WriteError {
    match &error {
        kube::Error::Api(s)
            if s.code == 422 && s.details.as_ref().is_none_or(|d| d.causes.is_empty()) =>
        {
            WriteError::Conflict(s.message.clone())
        }
        kube::Error::Api(s) if s.code == 404 => WriteError::Conflict(s.message.clone()),
        _ => classify(error),
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// A workload as read for a write, and the template changes to apply to it.
type Read = (DynamicObject, Vec<TemplateChange>);

/// How a write attempt ended.
enum Step {
    /// Nothing to write, or nothing could be.
    Done(WriteOutcome),
    /// Written: the workload's uid (for the Events) and the configs reloaded for.
    Written {
        uid: Option<String>,
        configs: Vec<ConfigKey>,
    },
}

/// Checks, before a write in a namespace another replica may have acted on lately, that this
/// replica's view of the configs is as new as the API server's, and gives the changes to write
/// (each with the newest hash known); `settling` says which configs need the comparison. The
/// hand-over implements it (`handover::config_view`); the writer only knows it must ask.
pub trait ViewCheck: Send + Sync {
    fn ensure_current<'a>(
        &'a self,
        changes: &'a [QueuedChange],
        settling: Settling,
    ) -> futures::future::BoxFuture<'a, Result<Vec<TemplateChange>, WriteError>>;
}

pub struct KubeWriter {
    client: Client,
    settings: Arc<Settings>,
    ownership: Arc<Ownership>,
    events: EventSink,
    pauses: PauseKeeper,
    /// The hand-over's check that this replica's view of the configs is current, in
    /// namespaces that moved lately (`handover::config_view`); none: write as queued.
    view_check: Option<Arc<dyn ViewCheck>>,
    /// Shadow mode: every write is computed and handed here instead of being sent.
    shadow: Option<Arc<Shadow>>,
}

impl KubeWriter {
    pub fn new(
        client: Client,
        settings: Arc<Settings>,
        ownership: Arc<Ownership>,
        events: EventSink,
        pauses: PauseKeeper,
    ) -> Self {
        Self {
            view_check: None,
            client,
            settings,
            ownership,
            events,
            pauses,
            shadow: None,
        }
    }

    /// Writes in namespaces that moved lately go through `check` first.
    pub fn checking_views(self, check: Arc<dyn ViewCheck>) -> Self {
        Self {
            view_check: Some(check),
            ..self
        }
    }

    /// Shadow mode: predict every write to `shadow`, send none.
    pub fn shadowing(self, shadow: Arc<Shadow>) -> Self {
        Self {
            shadow: Some(shadow),
            ..self
        }
    }

    fn api(&self, key: &WorkloadKey) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &key.namespace, &api_resource(key.kind))
    }

    fn keys(&self) -> &AnnotationKeys {
        &self.settings.keys
    }

    async fn write_once(
        &self,
        key: &WorkloadKey,
        changes: &[QueuedChange],
        turn: &WriteTurn<'_>,
    ) -> Result<WriteOutcome, WriteError> {
        // Counted from before the ownership check to the end of the write: a replica giving this
        // namespace up waits for it before telling the next owner to start.
        let _in_flight = self.ownership.start_write(&key.namespace);
        // A queued write can outlive this replica's ownership of the namespace: re-check first.
        if !self.ownership.owns(&key.namespace) {
            return Ok(WriteOutcome::Dropped("namespace not owned"));
        }
        // Fenced (membership not renewed in time): hold the write; it goes out once this replica
        // is a member again and still owns the namespace, or is dropped if it moved.
        if !self.ownership.may_write() {
            return Err(WriteError::NotYet(
                "fenced: membership Lease not renewed".into(),
            ));
        }
        let api = self.api(key);
        let read = match self.read_for_write(&api, key, changes).await? {
            Some(read) => read,
            None if self.shadow.is_some() && key.kind == WorkloadKind::Job => {
                match self.read_recreated_job(&api, key, changes).await? {
                    Some(read) => read,
                    None => return Ok(WriteOutcome::Dropped("workload vanished")),
                }
            }
            None => return Ok(WriteOutcome::Dropped("workload vanished")),
        };
        let now = jiff::Timestamp::now();
        let restart_by = self.restart_by(key.kind, &read.0.metadata);
        if restart_by != RestartBy::Template {
            return self.restart_pods(&api, key, read, restart_by, turn).await;
        }
        let restart = self.restarts(key, &read.0);
        if let Some(shadow) = &self.shadow {
            return self.predict(shadow, key, changes, read, restart, now);
        }
        let step = match restart {
            true => self.restart_rollout(&api, key, read, turn, now).await?,
            false => {
                self.write_template(&api, key, changes, read, turn, now)
                    .await?
            }
        };
        match step {
            Step::Done(outcome) => Ok(outcome),
            Step::Written { uid, configs } => {
                let strategy = self.settings.strategy_for(key.kind).as_str();
                self.announce_reloaded(key, uid, &configs, strategy);
                Ok(WriteOutcome::Reloaded)
            }
        }
    }

    /// `restart-by: eviction`: the pods are evicted one step per attempt
    /// (`super::eviction`), the template untouched; `in-place` cannot be done. Shadow mode
    /// predicts no template for either.
    async fn restart_pods(
        &self,
        api: &Api<DynamicObject>,
        key: &WorkloadKey,
        (object, template_changes): Read,
        restart_by: RestartBy,
        turn: &WriteTurn<'_>,
    ) -> Result<WriteOutcome, WriteError> {
        if let Some(shadow) = &self.shadow {
            shadow.unjudged(key);
            return Ok(WriteOutcome::Predicted);
        }
        if restart_by == RestartBy::InPlace {
            return Err(WriteError::Permanent(IN_PLACE_UNSUPPORTED.into()));
        }
        if !evicts_for(key.kind) {
            return Err(WriteError::Permanent(format!(
                "restart-by: eviction does not apply to a {}: an evicted pod of it is not replaced",
                key.kind
            )));
        }
        let step = super::eviction::restart_step(
            &self.client,
            api,
            key,
            &object,
            &template_changes,
            self.keys(),
            turn,
        )
        .await?;
        match step {
            Restarted::UpToDate => Ok(WriteOutcome::UpToDate),
            Restarted::Done => {
                let configs: Vec<ConfigKey> =
                    template_changes.iter().map(|c| c.config.clone()).collect();
                self.announce_reloaded(key, object.metadata.uid, &configs, "eviction");
                Ok(WriteOutcome::Reloaded)
            }
        }
    }

    fn restart_by(&self, kind: WorkloadKind, meta: &ObjectMeta) -> RestartBy {
        let annotations = meta.annotations.clone().unwrap_or_default();
        restart_by_for(kind, self.keys(), &annotations).0
    }

    /// A Rollout whose template is a Deployment's (workloadRef) can only be restarted: its own
    /// template is empty and the Deployment's is not its to write (as Reloader does).
    fn restarts(&self, key: &WorkloadKey, object: &DynamicObject) -> bool {
        key.kind == WorkloadKind::Rollout
            && (self.rollout_strategy(&object.metadata) == RolloutStrategy::Restart
                || object.data.pointer("/spec/workloadRef").is_some())
    }

    /// Shadow mode: the template edited as for a write, and the marks it would leave for each
    /// config handed to the judge; nothing is sent. A config whose value the template already
    /// carries (the incumbent was faster than this read) is predicted as it stands; one the
    /// edit could not place anywhere (no container takes it) would not be written: no
    /// prediction.
    fn predict(
        &self,
        shadow: &Shadow,
        key: &WorkloadKey,
        changes: &[QueuedChange],
        (object, template_changes): Read,
        restart: bool,
        now: jiff::Timestamp,
    ) -> Result<WriteOutcome, WriteError> {
        if restart {
            shadow.unjudged(key);
            return Ok(WriteOutcome::Predicted);
        }
        let cronjob = self.cronjob_strategy(&object.metadata);
        let mut value =
            serde_json::to_value(object).map_err(|e| WriteError::Permanent(e.to_string()))?;
        let edit = edit_template(
            &mut value,
            key.kind,
            EnvPlacement::of_write(key.kind, cronjob),
            self.settings.strategy_for(key.kind),
            self.keys(),
            &template_changes,
            now.as_second(),
        )
        .map_err(|e| WriteError::Permanent(e.to_string()))?;
        let template = value
            .pointer(key.kind.pod_template_pointer())
            .unwrap_or(&Value::Null);
        for change in &template_changes {
            let marks = marks_of(template, self.keys(), &change.config);
            if !edit.written.contains(&change.config) && !carries(&marks, change) {
                continue;
            }
            let changed_at = changes
                .iter()
                .find(|c| c.change.config == change.config)
                .map_or_else(std::time::Instant::now, |c| c.observed_at);
            let marks = ours_after_edit(marks, change, self.settings.strategy_for(key.kind));
            shadow.predicted(key, &change.config, marks, changed_at);
        }
        Ok(WriteOutcome::Predicted)
    }

    /// An Argo Rollout with `rollout-strategy: restart`: `spec.restartAt`, template untouched.
    async fn restart_rollout(
        &self,
        api: &Api<DynamicObject>,
        key: &WorkloadKey,
        (object, template_changes): Read,
        turn: &WriteTurn<'_>,
        now: jiff::Timestamp,
    ) -> Result<Step, WriteError> {
        let patch = json!({"spec": {"restartAt": now.to_string()}});
        turn.take().await;
        api.patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(classify)?;
        Ok(Step::Written {
            uid: object.metadata.uid,
            configs: template_changes.iter().map(|c| c.config.clone()).collect(),
        })
    }

    /// Edits the pod template and writes it the kind's way (JSON Patch, a Job from a CronJob, a
    /// Job re-created). A long wait for the limiter makes the read stale (other controllers
    /// update the object meanwhile) and the resourceVersion test would fail: then the object is
    /// read again, once, keeping the turn already taken.
    async fn write_template(
        &self,
        api: &Api<DynamicObject>,
        key: &WorkloadKey,
        changes: &[QueuedChange],
        mut read: Read,
        turn: &WriteTurn<'_>,
        now: jiff::Timestamp,
    ) -> Result<Step, WriteError> {
        let mut reread = false;
        let (mut value, edit, cronjob) = loop {
            let (object, template_changes) = &read;
            let mut value =
                serde_json::to_value(object).map_err(|e| WriteError::Permanent(e.to_string()))?;
            let cronjob = self.cronjob_strategy(&object.metadata);
            let edit = edit_template(
                &mut value,
                key.kind,
                EnvPlacement::of_write(key.kind, cronjob),
                self.settings.strategy_for(key.kind),
                self.keys(),
                template_changes,
                now.as_second(),
            )
            .map_err(|e| WriteError::Permanent(e.to_string()))?;
            if edit.is_empty() {
                debug!(workload = %key, "already up to date, nothing written");
                return Ok(Step::Done(WriteOutcome::UpToDate));
            }
            if turn.take().await < REREAD_AFTER_WAIT || reread {
                break (value, edit, cronjob);
            }
            reread = true;
            read = match self.read_for_write(api, key, changes).await? {
                Some(read) => read,
                None => return Ok(Step::Done(WriteOutcome::Dropped("workload vanished"))),
            };
        };
        match key.kind {
            WorkloadKind::CronJob if cronjob == CronJobReloadStrategy::Patch => {
                self.patch_template(key, &mut value, &edit.touched, now)
                    .await?;
                self.recreate_running_jobs(key, &value).await?;
            }
            WorkloadKind::CronJob => self.create_job_from_cronjob(key, &value).await?,
            WorkloadKind::Job => self.recreate_job(key, value).await?,
            _ => {
                self.patch_template(key, &mut value, &edit.touched, now)
                    .await?
            }
        }
        Ok(Step::Written {
            uid: read.0.metadata.uid,
            configs: edit.written,
        })
    }

    /// One log line and one Event per config a write reloaded for (Reloader's message); the
    /// Events go out after the write ([`EventSink::reloaded`]).
    fn announce_reloaded(
        &self,
        key: &WorkloadKey,
        uid: Option<String>,
        configs: &[ConfigKey],
        strategy: &str,
    ) {
        let reference = workload_reference(key, uid);
        let trace_id = crate::spans::current_trace_id();
        for config in configs {
            info!(
                workload = %key,
                config = %config,
                strategy,
                trace_id = trace_id.as_deref().unwrap_or_default(),
                "reloaded"
            );
            self.events.reloaded(
                &reference,
                reloaded_message(config, key, trace_id.as_deref()),
            );
        }
    }

    fn cronjob_strategy(&self, meta: &ObjectMeta) -> CronJobReloadStrategy {
        let annotations = meta.annotations.clone().unwrap_or_default();
        cronjob_reload_strategy_of(self.keys(), &annotations).0
    }

    fn rollout_strategy(&self, meta: &ObjectMeta) -> RolloutStrategy {
        let annotations = meta.annotations.clone().unwrap_or_default();
        rollout_strategy_of(self.keys(), &annotations).0
    }

    /// Shadow mode: a Job gone when read is most likely being re-created by the incumbent's
    /// reload (delete, then create): it is read again for a short while, so the prediction is
    /// made against the new Job rather than dropped.
    async fn read_recreated_job(
        &self,
        api: &Api<DynamicObject>,
        key: &WorkloadKey,
        changes: &[QueuedChange],
    ) -> Result<Option<Read>, WriteError> {
        for _ in 0..SHADOW_JOB_REREADS {
            tokio::time::sleep(SHADOW_JOB_REREAD_PAUSE).await;
            if let Some(read) = self.read_for_write(api, key, changes).await? {
                return Ok(Some(read));
            }
        }
        Ok(None)
    }

    /// Reads the workload for a write, with the changes to write; `None` when it vanished.
    /// During a handover the changes carry the newest hash this replica knows, once its view of
    /// the configs is current, checked after the read (see handover/config_view.rs for why the order
    /// matters).
    async fn read_for_write(
        &self,
        api: &Api<DynamicObject>,
        key: &WorkloadKey,
        changes: &[QueuedChange],
    ) -> Result<Option<Read>, WriteError> {
        let Some(object) = api.get_opt(&key.name).await.map_err(classify)? else {
            info!(workload = %key, "workload vanished before its reload was written, dropped");
            return Ok(None);
        };
        let settling = self.ownership.settling_in(&key.namespace);
        let template_changes = match (&self.view_check, settling) {
            (Some(check), Some(settling)) => check.ensure_current(changes, settling).await?,
            _ => changes.iter().map(|c| c.change.clone()).collect(),
        };
        Ok(Some((object, template_changes)))
    }

    async fn patch_template(
        &self,
        key: &WorkloadKey,
        value: &mut Value,
        touched: &[String],
        now: jiff::Timestamp,
    ) -> Result<(), WriteError> {
        let mut touched = touched.to_vec();
        let pause = self.pause_to_start(key, value);
        if let Some(period) = pause {
            // Pause in the same write as the template change, so one rollout covers the period.
            value["spec"]["paused"] = json!(true);
            let annotations = value["metadata"]
                .as_object_mut()
                .map(|m| m.entry("annotations").or_insert_with(|| json!({})));
            if let Some(Value::Object(a)) = annotations {
                a.insert(self.keys().paused_at.clone(), json!(now.to_string()));
            }
            touched.push("/spec/paused".into());
            touched.push("/metadata/annotations".into());
            self.pauses.schedule(key.clone(), now.as_second(), period);
        }
        let ops = json_patch_ops(value, &touched);
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))
            .map_err(|e| WriteError::Permanent(e.to_string()))?;
        self.api(key)
            .patch(
                &key.name,
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
            .map_err(classify_json_patch)?;
        Ok(())
    }

    /// A Deployment with a pause period that kube-reloader is not already pausing.
    fn pause_to_start(&self, key: &WorkloadKey, value: &Value) -> Option<i64> {
        if key.kind != WorkloadKind::Deployment {
            return None;
        }
        let annotations: BTreeMap<String, String> =
            serde_json::from_value(value.pointer("/metadata/annotations")?.clone()).ok()?;
        let period = pause_period_of(self.keys(), &annotations).ok().flatten()?;
        if annotations.contains_key(&self.keys().paused_at) {
            return None;
        }
        Some(period.as_secs() as i64)
    }

    async fn create_job_from_cronjob(
        &self,
        key: &WorkloadKey,
        cronjob: &Value,
    ) -> Result<(), WriteError> {
        let job_template = cronjob
            .pointer("/spec/jobTemplate")
            .cloned()
            .unwrap_or(json!({}));
        let mut annotations = job_template
            .pointer("/metadata/annotations")
            .cloned()
            .unwrap_or(json!({}));
        annotations["cronjob.kubernetes.io/instantiate"] = json!("manual");
        let job = json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "generateName": format!("{}-", key.name),
                "namespace": &*key.namespace,
                "labels": job_template.pointer("/metadata/labels").cloned().unwrap_or(json!({})),
                "annotations": annotations,
                "ownerReferences": [{
                    "apiVersion": "batch/v1",
                    "kind": "CronJob",
                    "name": &*key.name,
                    "uid": cronjob.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
                    "controller": true,
                    "blockOwnerDeletion": true
                }]
            },
            "spec": job_template.get("spec").cloned().unwrap_or(json!({}))
        });
        let job: DynamicObject =
            serde_json::from_value(job).map_err(|e| WriteError::Permanent(e.to_string()))?;
        let jobs: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &key.namespace,
            &api_resource(WorkloadKind::Job),
        );
        jobs.create(&PostParams::default(), &job)
            .await
            .map_err(classify)?;
        Ok(())
    }

    /// After a CronJob's job template was patched: its Jobs still running are re-created (with
    /// their own spec, as Reloader does), so what runs now reads the new value too. Skipped when
    /// Jobs are not handled (`--ignored-workload-types=jobs`).
    async fn recreate_running_jobs(
        &self,
        key: &WorkloadKey,
        cronjob: &Value,
    ) -> Result<(), WriteError> {
        if !self.settings.handles_workload(WorkloadKind::Job) {
            return Ok(());
        }
        let uid = cronjob.pointer("/metadata/uid").and_then(Value::as_str);
        let jobs: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &key.namespace,
            &api_resource(WorkloadKind::Job),
        );
        let listed = jobs.list(&Default::default()).await.map_err(classify)?;
        for job in listed.items {
            let owned =
                job.metadata.owner_references.iter().flatten().any(|o| {
                    o.kind == "CronJob" && o.name == *key.name && Some(o.uid.as_str()) == uid
                });
            let active = job.data.pointer("/status/active").and_then(Value::as_i64);
            let Some(name) = job.metadata.name.clone() else {
                continue;
            };
            if owned && active.is_some_and(|n| n > 0) {
                let job_key = WorkloadKey::new(WorkloadKind::Job, &key.namespace, &name);
                let value =
                    serde_json::to_value(&job).map_err(|e| WriteError::Permanent(e.to_string()))?;
                self.recreate_job(&job_key, value).await?;
                info!(workload = %key, job = name, "running Job of a patched CronJob re-created");
            }
        }
        Ok(())
    }

    async fn recreate_job(&self, key: &WorkloadKey, mut job: Value) -> Result<(), WriteError> {
        let uid = job
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(String::from);
        strip_server_fields(&mut job);
        let api = self.api(key);
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&key.name, &params).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(classify(e)),
        }
        let job: DynamicObject =
            serde_json::from_value(job).map_err(|e| WriteError::Permanent(e.to_string()))?;
        // The old Job may take a moment to go (finalizers): retry "already exists" briefly. A
        // transient failure is retried here too: the Job is deleted already, and a retry of the
        // whole write would find it gone and drop the reload with it.
        for attempt in 0..50 {
            match api
                .create(&PostParams::default(), &job)
                .await
                .map_err(classify)
            {
                Ok(_) => return Ok(()),
                Err(WriteError::Conflict(_) | WriteError::Transient(_)) if attempt < 49 => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
        Err(WriteError::Transient(
            "the old Job was not gone in time".into(),
        ))
    }
}

/// Clears what the API server owns on a Job so it can be created again with the same name.
fn strip_server_fields(job: &mut Value) {
    const CONTROLLER_LABELS: [&str; 2] = ["controller-uid", "batch.kubernetes.io/controller-uid"];
    if let Some(meta) = job.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "generation",
            "selfLink",
            "ownerReferences",
        ] {
            meta.remove(field);
        }
    }
    if let Some(obj) = job.as_object_mut() {
        obj.remove("status");
    }
    if let Some(spec) = job.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("selector");
        spec.remove("manualSelector");
    }
    for pointer in ["/metadata/labels", "/spec/template/metadata/labels"] {
        if let Some(labels) = job.pointer_mut(pointer).and_then(Value::as_object_mut) {
            for l in CONTROLLER_LABELS {
                labels.remove(l);
            }
        }
    }
}

impl WorkloadWriter for Arc<KubeWriter> {
    async fn write(
        &self,
        key: &WorkloadKey,
        changes: &[QueuedChange],
        turn: &WriteTurn<'_>,
    ) -> Result<WriteOutcome, WriteError> {
        // One span per attempt under the change's `reload` span: retries and failures show in
        // the trace even while the write is still backing off.
        let span = info_span!("write");
        let result = self
            .write_once(key, changes, turn)
            .instrument(span.clone())
            .await;
        record_write(&span, &result);
        // Only a permanent error ends the queue's retries: that is the failure to report.
        if let Err(WriteError::Permanent(error)) = &result {
            self.events
                .reload_failed(&workload_reference(key, None), failed_message(key, error))
                .await;
        }
        result
    }

    async fn flush(&self, deadline: std::time::Duration) -> bool {
        self.events.flush(deadline).await
    }

    async fn report_failure(&self, key: &WorkloadKey, error: &WriteError, failures: u32) {
        let error = format!("{error} (failed {failures} times, still retrying)");
        self.events
            .reload_failed(&workload_reference(key, None), failed_message(key, &error))
            .await;
    }
}

/// Marks a `write` attempt's span with how it ended; a failed attempt is an error span, a step
/// of a restart by eviction is not.
fn record_write(span: &Span, result: &Result<WriteOutcome, WriteError>) {
    match result {
        Ok(outcome) => span.set_attribute("result", outcome_label(outcome)),
        // A step of a write done in steps: progress, not a failure.
        Err(WriteError::Progressing(step)) => {
            span.set_attribute("result", "progressing");
            span.set_attribute("step", step.clone());
        }
        Err(error) => {
            span.set_attribute("error.type", error.metric_label());
            span.set_status(Status::error(error.to_string()));
        }
    }
}

fn outcome_label(outcome: &WriteOutcome) -> &'static str {
    match outcome {
        WriteOutcome::Reloaded => "reloaded",
        WriteOutcome::UpToDate => "up_to_date",
        WriteOutcome::Dropped(_) => "dropped",
        WriteOutcome::Predicted => "predicted",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_server_owned_job_fields() {
        let mut job = json!({
            "metadata": {"name": "j", "uid": "u", "resourceVersion": "1", "labels": {"controller-uid": "u", "app": "a"}},
            "spec": {"selector": {}, "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "u", "job-name": "j"}}}},
            "status": {}
        });
        strip_server_fields(&mut job);
        assert_eq!(
            job,
            json!({
                "metadata": {"name": "j", "labels": {"app": "a"}},
                "spec": {"template": {"metadata": {"labels": {"job-name": "j"}}}}
            })
        );
    }

    #[test]
    fn a_bare_422_on_a_json_patch_is_a_conflict() {
        // What kube-apiserver answers when the resourceVersion `test` op fails.
        let bare: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "reason": "Invalid", "details": {}, "code": 422,
            "message": "the server rejected our request due to an error in our request"
        }))
        .unwrap();
        assert!(matches!(
            classify_json_patch(kube::Error::Api(Box::new(bare))),
            WriteError::Conflict(_)
        ));
        let invalid: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "reason": "Invalid", "code": 422, "message": "invalid env",
            "details": {"causes": [{"reason": "FieldValueInvalid", "field": "spec.template"}]}
        }))
        .unwrap();
        assert!(matches!(
            classify_json_patch(kube::Error::Api(Box::new(invalid))),
            WriteError::Permanent(_)
        ));
        let gone: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "reason": "NotFound", "code": 404,
            "message": "deployments.apps \"web\" not found"
        }))
        .unwrap();
        assert!(matches!(
            classify_json_patch(kube::Error::Api(Box::new(gone))),
            WriteError::Conflict(_)
        ));
    }

    #[test]
    fn api_resources() {
        assert_eq!(api_resource(WorkloadKind::Rollout).plural, "rollouts");
        assert_eq!(api_resource(WorkloadKind::CronJob).api_version, "batch/v1");
    }
}
