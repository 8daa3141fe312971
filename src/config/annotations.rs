//! The annotation keys, overridable by flags as in Reloader.

use super::Flags;

/// Every annotation key the controller reads or writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationKeys {
    pub auto: String,
    pub search: String,
    pub match_: String,
    pub ignore: String,
    pub configmap_reload: String,
    pub secret_reload: String,
    pub spc_reload: String,
    pub configmap_auto: String,
    pub secret_auto: String,
    pub spc_auto: String,
    pub configmap_exclude: String,
    pub secret_exclude: String,
    pub spc_exclude: String,
    pub rollout_strategy: String,
    /// CronJobs: `patch` patches the job template instead of creating a Job at once.
    pub cronjob_reload_strategy: String,
    pub pause_period: String,
    pub paused_at: String,
    pub last_reloaded_from: String,
    /// This project's own: key-precise values per workload (not configurable, not Reloader's).
    pub precise_keys: String,
    /// This project's own: the maintenance window and the delay after a change
    /// (`reload_windows`), on a workload or its namespace.
    pub reload_window: String,
    pub reload_delay: String,
    /// This project's own: how a workload's pods are restarted (`pod_restart`), and the record
    /// of what they were restarted for, on its metadata.
    pub restart_by: String,
    pub restarted_for: String,
}

impl Default for AnnotationKeys {
    fn default() -> Self {
        Self {
            auto: "reloader.stakater.com/auto".into(),
            search: "reloader.stakater.com/search".into(),
            match_: "reloader.stakater.com/match".into(),
            ignore: "reloader.stakater.com/ignore".into(),
            configmap_reload: "configmap.reloader.stakater.com/reload".into(),
            secret_reload: "secret.reloader.stakater.com/reload".into(),
            spc_reload: "secretproviderclass.reloader.stakater.com/reload".into(),
            configmap_auto: "configmap.reloader.stakater.com/auto".into(),
            secret_auto: "secret.reloader.stakater.com/auto".into(),
            spc_auto: "secretproviderclass.reloader.stakater.com/auto".into(),
            configmap_exclude: "configmaps.exclude.reloader.stakater.com/reload".into(),
            secret_exclude: "secrets.exclude.reloader.stakater.com/reload".into(),
            spc_exclude: "secretproviderclasses.exclude.reloader.stakater.com/reload".into(),
            rollout_strategy: "reloader.stakater.com/rollout-strategy".into(),
            cronjob_reload_strategy: "reloader.stakater.com/cronjob-reload-strategy".into(),
            pause_period: "deployment.reloader.stakater.com/pause-period".into(),
            paused_at: "deployment.reloader.stakater.com/paused-at".into(),
            last_reloaded_from: "reloader.stakater.com/last-reloaded-from".into(),
            precise_keys: "kube-reloader.io/precise-keys".into(),
            reload_window: "kube-reloader.io/reload-window".into(),
            reload_delay: "kube-reloader.io/reload-delay".into(),
            restart_by: "kube-reloader.io/restart-by".into(),
            restarted_for: "kube-reloader.io/restarted-for".into(),
        }
    }
}

impl AnnotationKeys {
    /// Every key, as configured: what the controller reads on workloads, pod templates and
    /// configs, and what it writes (lint flags any other key under the same domains). The
    /// destructuring makes a new field a compile error here until it is listed.
    pub fn all(&self) -> [&str; 23] {
        let Self {
            auto,
            search,
            match_,
            ignore,
            configmap_reload,
            secret_reload,
            spc_reload,
            configmap_auto,
            secret_auto,
            spc_auto,
            configmap_exclude,
            secret_exclude,
            spc_exclude,
            rollout_strategy,
            cronjob_reload_strategy,
            pause_period,
            paused_at,
            last_reloaded_from,
            precise_keys,
            reload_window,
            reload_delay,
            restart_by,
            restarted_for,
        } = self;
        [
            auto,
            search,
            match_,
            ignore,
            configmap_reload,
            secret_reload,
            spc_reload,
            configmap_auto,
            secret_auto,
            spc_auto,
            configmap_exclude,
            secret_exclude,
            spc_exclude,
            rollout_strategy,
            cronjob_reload_strategy,
            pause_period,
            paused_at,
            last_reloaded_from,
            precise_keys,
            reload_window,
            reload_delay,
            restart_by,
            restarted_for,
        ]
        .map(String::as_str)
    }

    pub fn from_flags(f: &Flags) -> Self {
        Self {
            auto: f.auto_annotation.clone(),
            search: f.auto_search_annotation.clone(),
            match_: f.search_match_annotation.clone(),
            ignore: f.ignore_annotation.clone(),
            configmap_reload: f.configmap_annotation.clone(),
            secret_reload: f.secret_annotation.clone(),
            configmap_auto: f.configmap_auto_annotation.clone(),
            secret_auto: f.secret_auto_annotation.clone(),
            configmap_exclude: f.configmap_exclude_annotation.clone(),
            secret_exclude: f.secret_exclude_annotation.clone(),
            spc_reload: f.secretproviderclass_annotation.clone(),
            spc_auto: f.secretproviderclass_auto_annotation.clone(),
            spc_exclude: f.secretproviderclass_exclude_annotation.clone(),
            pause_period: f.pause_deployment_annotation.clone(),
            paused_at: f.pause_deployment_time_annotation.clone(),
            ..Self::default()
        }
    }
}
