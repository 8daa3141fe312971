//! The Markdown of a run (`<scenario>-<scale>.md`) and its row in `summary-<scale>.md`.

use serde_json::Value;

fn fmt_counts_top(v: &Value, n: usize) -> String {
    let Some(m) = v.as_object() else {
        return String::new();
    };
    let mut items: Vec<(&String, u64)> = m
        .iter()
        .map(|(k, v)| (k, v.as_u64().unwrap_or(0)))
        .collect();
    items.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    items
        .iter()
        .take(n)
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The rows of a run's table, in order.
#[derive(Default)]
struct Rows(String);

impl Rows {
    fn row(&mut self, k: &str, v: String) {
        self.0.push_str(&format!("| {k} | {v} |\n"));
    }
}

pub fn markdown(r: &Value) -> String {
    let mut rows = Rows(header(r));
    setup_rows(&mut rows, r);
    correctness_rows(&mut rows, r);
    latency_rows(&mut rows, r);
    resource_rows(&mut rows, r);
    api_rows(&mut rows, r);
    if let Some(n) = r["notes"].as_object().filter(|n| !n.is_empty()) {
        rows.row(
            "notes",
            serde_json::to_string(n)
                .unwrap_or_default()
                .replace('|', "/"),
        );
    }
    let mut s = rows.0;
    s.push('\n');
    s
}

/// The title, the run, the controller's command, the machine; the table's head.
fn header(r: &Value) -> String {
    format!(
        "### {} / {}{}\n\nrun {} · {} · machine: {} CPUs ({}), {} GiB, shared (load avg {} at start, {} at end)\n\n| | |\n|---|---|\n",
        r["scenario"].as_str().unwrap_or(""),
        r["scale"].as_str().unwrap_or(""),
        r["controller"]["label"]
            .as_str()
            .map(|l| format!(" — {l}"))
            .unwrap_or_default(),
        r["run"]["id"].as_str().unwrap_or(""),
        r["controller"]["command"].as_str().unwrap_or(""),
        r["run"]["machine"]["cpus"],
        r["run"]["machine"]["cpu_model"].as_str().unwrap_or(""),
        r["run"]["machine"]["mem_gib"],
        r["run"]["loadavg_start"].as_str().unwrap_or(""),
        r["run"]["loadavg_end"].as_str().unwrap_or(""),
    )
}

/// The population and the changes driven.
fn setup_rows(rows: &mut Rows, r: &Value) {
    rows.row(
        "population",
        format!(
            "{} namespaces, {} {}, {} configs (created in {} s)",
            r["population"]["namespaces"],
            r["population"]["workloads"],
            match r["scenario"].as_str() {
                Some("mixed") => "workloads (Deployments, StatefulSets, DaemonSets, CronJobs)",
                Some("references") => {
                    "Deployments (env valueFrom, init container volumes, projected volumes)"
                }
                Some("custom-kind") =>
                    "Knative Services (serving.knative.dev/v1, declared with --custom-kind)",
                _ => "Deployments",
            },
            r["population"]["configs"],
            r["run"]["setup_s"]
        ),
    );
    let driven = driven(r["scenario"].as_str().unwrap_or(""), &r["plan"]);
    rows.row(
        "config changes",
        format!("{} ({driven})", r["correctness"]["changes"]),
    );
}

/// What the scenario drove, from its plan.
fn driven(scenario: &str, plan: &Value) -> String {
    match scenario {
        "steady" | "annotations" | "references" | "mixed" | "cardinality" | "custom-kind" => {
            format!("{} at {}/s", plan["changes"], plan["rate"])
        }
        "sharded" => format!(
            "{} at {}/s, {} replicas with --sharding",
            plan["changes"], plan["rate"], plan["replicas"]
        ),
        "churn" => format!(
            "{} at {}/s while {} extra Deployments/s are created, each deleted {} s later",
            plan["changes"], plan["rate"], plan["churn_rate"], plan["churn_lifetime_s"]
        ),
        "burst" | "ratelimit" => format!("{} at once", plan["changes"]),
        "fanout" => format!(
            "{} changes of one ConfigMap used by {} Deployments, one after the other",
            plan["fanout_changes"], plan["fanout_width"]
        ),
        "waves" => format!(
            "3 changes of one ConfigMap used by {} Deployments, each rolled in health-gated \
             waves; the first superseded after its canaries",
            plan["fanout_width"]
        ),
        "noop" => format!(
            "{} label/annotation-only updates at {}/s, then 2 real changes (sentinels)",
            plan["changes"], plan["rate"]
        ),
        "large" => format!(
            "{} changes of {} Secrets of {} bytes at {}/s",
            plan["changes"], plan["large_secrets"], plan["large_secret_bytes"], plan["rate"]
        ),
        "restart" => format!(
            "{n} priming changes at once, then {n} at {}/s; SIGKILL after {}, down {} s",
            plan["rate"],
            plan["kill_after"],
            plan["down_s"],
            n = plan["changes"]
        ),
        "flapping" => format!(
            "{} Secrets each used by {} Deployments, each rewritten every {} s for {} s, one bystander change per period; {}",
            plan["flap_secrets"],
            plan["flap_width"],
            num(&plan["flap_period_s"]),
            num(&plan["flap_for_s"]),
            match plan["churn_limit"].as_u64() {
                Some(0) | None => "the controller without the churn breaker".to_string(),
                Some(m) => format!(
                    "--churn-limit={m} --churn-window={}s --churn-quiet={}s",
                    num(&plan["churn_window_s"]),
                    num(&plan["churn_quiet_s"])
                ),
            }
        ),
        "pause" => format!(
            "{} Deployments with a {} s pause period, each ConfigMap changed {} times 1 s apart",
            plan["pause_workloads"], plan["pause_period_s"], plan["pause_changes_each"]
        ),
        _ => String::new(),
    }
}

/// The verdict, the churn's and the pause's checks, examples of what went wrong.
fn correctness_rows(rows: &mut Rows, r: &Value) {
    let c = &r["correctness"];
    rows.row(
        "correctness",
        format!(
            "**{}**: {}/{} expected reloads seen ({} folded into a later change), {} missing, {} unexpected, {} duplicates, {} stale, {} wrong field, {} write errors",
            if c["passed"].as_bool().unwrap_or(false) {
                "PASS"
            } else {
                "FAIL"
            },
            c["reloaded"],
            c["expected_reloads"],
            c["coalesced"],
            c["missing"],
            c["unexpected"],
            c["duplicates"],
            c["stale"],
            c["wrong_field"],
            c["write_errors"]
        ),
    );
    if c["churned_workloads"].as_u64().unwrap_or(0) > 0 {
        let ch = &r["churn"];
        let o = &ch["outcome"];
        rows.row(
            "churn",
            format!(
                "{} workloads created, {} deleted ({} / {} errors); {} of their reloads (allowed, not counted above), {} reappeared after deletion; controller workload writes by response code {}; controller errors at the end {}; /ready {} polls, {} not 200",
                o["created"],
                o["deleted"],
                o["create_errors"],
                o["delete_errors"],
                c["churned_reloads"],
                c["resurrected"],
                ch["controller_workload_write_codes"],
                ch["controller_errors_at_end"],
                o["health_polls"],
                o["health_failures"],
            ),
        );
    }
    let pause = &r["notes"]["pause"];
    if pause.is_object() {
        rows.row(
            "pause",
            format!(
                "{} Deployments changed {} times each: paused for {} s (min {} / p50 {} / max {}; period {} s), {} problems (one pause, one rollout, resumed, paused-at removed), {} paused without a change",
                pause["deployments_changed"],
                pause["changes_per_deployment"],
                pause["paused_for_s"]["p50"],
                pause["paused_for_s"]["min"],
                pause["paused_for_s"]["p50"],
                pause["paused_for_s"]["max"],
                pause["pause_period_s"],
                pause["problems"],
                pause["deployments_paused_without_a_change"],
            ),
        );
    }
    let fl = &r["flapping"];
    if fl.is_object() {
        rows.row("flapping", flapping_row(fl));
    }
    if let Some(ex) = c["examples"].as_array().filter(|e| !e.is_empty()) {
        rows.row(
            "examples",
            ex.iter()
                .take(5)
                .filter_map(|e| e.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        );
    }
}

/// Rollouts per flapping workload against the bound, the release, the breaker's counters.
fn flapping_row(fl: &Value) -> String {
    let n = &fl["rollouts_per_workload"];
    let bound = match fl["rollouts_bound"].as_u64() {
        Some(b) => format!("at most {b}"),
        None => "no bound without the breaker".into(),
    };
    let release = &fl["release_after_last_write_s"];
    let release = match release.is_object() {
        true => format!(
            "; the release {}–{} s after the last write",
            release["min"], release["max"]
        ),
        false => String::new(),
    };
    let counters = &fl["breaker_metrics"];
    let counters = match counters.is_object() {
        true => format!(
            "; controller: {} trips (expected {}), {} open at the end, {} held changes (expected {})",
            num(&counters["trips"]),
            fl["expected"]["trips"],
            num(&counters["open_at_end"]),
            num(&counters["held_changes"]),
            fl["expected"]["held_changes"]
        ),
        false => "; no breaker metrics scraped".into(),
    };
    let events = match fl["events_by_reason"].as_object() {
        Some(e) if !e.is_empty() => {
            let each: Vec<String> = e.iter().map(|(r, n)| format!("{n} {r}")).collect();
            format!("; Events: {}", each.join(", "))
        }
        _ => String::new(),
    };
    format!(
        "rollouts per workload min {} / median {} / max {} (mean {}; {bound}; {} in all) over {} writes of each Secret in {} s; {}/{} rolled after the last write, {}/{} carry the final content{release}{counters}{events}; {} problems",
        n["min"],
        n["median"],
        n["max"],
        n["mean"],
        fl["rollouts_total"],
        fl["writes_per_secret"],
        fl["flapped_s"],
        fl["rolled_after_last_write"],
        fl["workloads"],
        fl["with_final_content"],
        fl["workloads"],
        fl["problems"],
    )
}

/// A number as written in a flag: `60`, `2.5` (not serde's `60.0`).
fn num(v: &Value) -> String {
    v.as_f64().map(|x| x.to_string()).unwrap_or_default()
}

/// Reload latency, overall and per tag.
fn latency_rows(rows: &mut Rows, r: &Value) {
    let l = &r["latency_ms"];
    rows.row(
        "reload latency (write ack -> template change seen)",
        format!(
            "p50 {} ms · p90 {} ms · p99 {} ms · max {} ms (n={})",
            l["p50_ms"], l["p90_ms"], l["p99_ms"], l["max_ms"], l["count"]
        ),
    );
    let run = &r["running"];
    if run.is_object() && run["reloads"].as_u64() == Some(0) {
        rows.row(
            "rolled pods ready (running share)",
            format!(
                "no reload of the {} running Deployments ({} of all, 1 replica of {}); pods by node {}",
                run["deployments"],
                run["share"],
                run["image"].as_str().unwrap_or(""),
                run["pods_by_node"],
            ),
        );
    } else if run.is_object() {
        let l = &run["rolled_ready_ms"];
        rows.row(
            "rolled pods ready (write ack -> new pod Ready, old pod gone; running share)",
            format!(
                "p50 {} ms · p90 {} ms · p99 {} ms · max {} ms (n={}); {} of {} reloads of the {} running Deployments ({} of all, 1 replica of {}) never finished rolling; pods by node {}",
                l["p50_ms"],
                l["p90_ms"],
                l["p99_ms"],
                l["max_ms"],
                l["count"],
                run["not_completed"],
                run["reloads"],
                run["deployments"],
                run["share"],
                run["image"].as_str().unwrap_or(""),
                run["pods_by_node"],
            ),
        );
    }
    if let Some(tags) = r["latency_ms_by_tag"].as_object().filter(|t| t.len() > 1) {
        for (tag, t) in tags {
            rows.row(
                &format!("  latency, {tag}"),
                format!(
                    "p50 {} ms · p99 {} ms · max {} ms (n={})",
                    t["p50_ms"], t["p99_ms"], t["max_ms"], t["count"]
                ),
            );
        }
    }
}

/// Time to ready, the replicas (sharded), memory and CPU.
fn resource_rows(rows: &mut Rows, r: &Value) {
    let res = &r["resources"];
    let ready: Vec<String> = r["time_to_ready_s"]
        .as_array()
        .map(|a| a.iter().map(|t| format!("{t} s")).collect())
        .unwrap_or_default();
    let sharded = r["sharding"].is_object();
    rows.row(
        "time to ready (start -> /ready 200)",
        if ready.is_empty() {
            "not measured".into()
        } else if sharded {
            format!("{} (per replica)", ready.join(", "))
        } else {
            ready.join(", then after the restart ")
        },
    );
    if sharded {
        for (k, v) in crate::sharded::markdown_rows(r) {
            rows.row(&k, v);
        }
    }
    let (rss, cpu) = match sharded {
        true => (
            "controller RSS (sum of the replicas)",
            "controller CPU-seconds (sum of the replicas)",
        ),
        false => ("controller RSS", "controller CPU-seconds"),
    };
    rows.row(
        rss,
        format!(
            "at ready {} MiB · steady {} MiB · end {} MiB · peak (VmHWM) {} MiB",
            res["rss_at_ready_mib"], res["rss_steady_mib"], res["rss_end_mib"], res["rss_peak_mib"]
        ),
    );
    rows.row(
        cpu,
        format!(
            "to ready {} · change phase {} · total {}",
            res["cpu_s_to_ready"], res["cpu_s_change_phase"], res["cpu_s_total"]
        ),
    );
}

/// The controller's requests and bytes received (counting proxy), and its requests by user
/// agent (the API server's audit log).
fn api_rows(rows: &mut Rows, r: &Value) {
    if let Some(cpu) = r["run"]["apiserver_cpu_s"].as_f64() {
        rows.row(
            "kube-apiserver CPU-seconds (controller start -> end of the run)",
            format!("{cpu}"),
        );
    }
    let api = &r["api_requests"];
    if api.get("startup_total").is_some() {
        rows.row(
            "controller API requests (counting proxy)",
            format!(
                "startup {} ({}) · change phase {} ({})",
                api["startup_total"],
                fmt_counts_top(&api["startup"], 8),
                api["change_phase_total"],
                fmt_counts_top(&api["change_phase"], 8)
            ),
        );
    }
    if let Some(total) = api["startup_bytes_received_total"].as_u64() {
        let by_resource: Vec<String> = top_counts(&api["startup_bytes_received"], 4)
            .into_iter()
            .map(|(k, n)| format!("{k} {}", fmt_mib(n)))
            .collect();
        rows.row(
            "bytes received from the API server (counting proxy)",
            format!(
                "startup {} ({}) · change phase {}",
                fmt_mib(total),
                by_resource.join(", "),
                fmt_mib(
                    api["change_phase_bytes_received_total"]
                        .as_u64()
                        .unwrap_or(0)
                )
            ),
        );
    }
    let audit = &r["api_requests_audit"];
    for (phase, label) in [("startup", "startup"), ("change_phase", "change phase")] {
        if let Some(agents) = audit[phase].as_object() {
            for (agent, a) in agents {
                rows.row(
                    &format!("API server audit log, {label}, user agent `{agent}`"),
                    format!(
                        "{} requests ({}); response codes {}",
                        a["total"],
                        fmt_counts_top(&a["requests"], 8),
                        a["codes"]
                    ),
                );
            }
        }
    }
}

fn fmt_mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / 1048576.0)
}

/// The `n` largest values of an object of counts (ties: in key order).
fn top_counts(v: &Value, n: usize) -> Vec<(&String, u64)> {
    let Some(m) = v.as_object() else {
        return Vec::new();
    };
    let mut items: Vec<(&String, u64)> = m
        .iter()
        .map(|(k, v)| (k, v.as_u64().unwrap_or(0)))
        .collect();
    items.sort_by_key(|e| std::cmp::Reverse(e.1));
    items.truncate(n);
    items
}

pub fn summary_row(r: &Value) -> String {
    let c = &r["correctness"];
    let l = &r["latency_ms"];
    let res = &r["resources"];
    let scenario = match r["plan"]["replicas"].as_u64() {
        Some(n) if r["sharding"].is_object() => format!(
            "sharded ({n} replica{}; RSS, CPU: sum)",
            if n == 1 { "" } else { "s" }
        ),
        _ => r["scenario"].as_str().unwrap_or("").to_string(),
    };
    format!(
        "| {} | {} | {}/{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        scenario,
        if c["passed"].as_bool().unwrap_or(false) {
            "PASS"
        } else {
            "**FAIL**"
        },
        c["reloaded"],
        c["expected_reloads"],
        c["missing"],
        c["unexpected"],
        c["duplicates"],
        l["p50_ms"],
        l["p99_ms"],
        l["max_ms"],
        r["time_to_ready_s"]
            .as_array()
            .map(|a| a
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" / "))
            .unwrap_or_default(),
        res["rss_peak_mib"],
        res["cpu_s_total"],
        r["api_requests"]["change_phase_total"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_flapping_row_says_the_bound_and_the_breakers_counters_or_their_absence() {
        let with = json!({
            "rollouts_per_workload": {"min": 4, "median": 4, "max": 4, "mean": 4.0},
            "rollouts_bound": 4, "rollouts_total": 40, "writes_per_secret": 10, "flapped_s": 18.0,
            "rolled_after_last_write": 10, "with_final_content": 10, "workloads": 10,
            "release_after_last_write_s": {"min": 5.09, "max": 5.15},
            "breaker_metrics": {"trips": 2.0, "open_at_end": 0.0, "held_changes": 14.0},
            "expected": {"trips": 2, "held_changes": 14},
            "events_by_reason": {"ReloadsHeld": 2, "ReloadsReleased": 2},
            "problems": 0,
        });
        let row = flapping_row(&with);
        assert!(
            row.contains("max 4 (mean 4.0; at most 4; 40 in all)"),
            "{row}"
        );
        assert!(row.contains("2 trips (expected 2), 0 open"), "{row}");
        assert!(row.contains("5.09–5.15 s after the last write"), "{row}");
        assert!(
            row.contains("Events: 2 ReloadsHeld, 2 ReloadsReleased"),
            "{row}"
        );
        let without = json!({"rollouts_per_workload": {"max": 10}, "problems": 0});
        let row = flapping_row(&without);
        assert!(row.contains("no bound without the breaker"), "{row}");
        assert!(row.contains("no breaker metrics scraped"), "{row}");
        assert!(!row.contains("Events"), "{row}");
        assert_eq!(num(&json!(60.0)), "60");
        assert_eq!(num(&json!(2.5)), "2.5");
    }
}
