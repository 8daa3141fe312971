//! Text output of explain and lint, for people. JSON output is the serde form of the same types.

use std::fmt::Write;

use super::report::{ConfigReport, Explanation, UseReport};
use super::{LastReload, Lint, Severity};

fn short(hash: &Option<String>) -> String {
    match hash {
        Some(h) if h.len() > 12 => h[..12].to_string(),
        Some(h) => h.clone(),
        None => "-".into(),
    }
}

fn use_line(u: &UseReport) -> String {
    let init = if u.init_container {
        " (init container)"
    } else {
        ""
    };
    match u.how {
        crate::references::UseHow::EnvFrom | crate::references::UseHow::EnvValueFrom => {
            format!("{} in container {}{init}", u.how.as_str(), u.place)
        }
        _ if u.containers.is_empty() => format!(
            "{} '{}' (mounted by no container: does not count)",
            u.how.as_str(),
            u.place
        ),
        _ => format!(
            "{} '{}' mounted by {}",
            u.how.as_str(),
            u.place,
            u.containers.join(", ")
        ),
    }
}

/// One config: how it is used, the verdict, the hashes.
pub fn config_text(out: &mut String, c: &ConfigReport) {
    let _ = writeln!(out, "  {}/{}", c.kind, c.name);
    for u in &c.uses {
        let _ = writeln!(out, "    used by:  {}", use_line(u));
    }
    if !c.named_by.is_empty() {
        let _ = writeln!(out, "    named by: reload list {}", c.named_by.join(", "));
    }
    if c.uses.is_empty() && c.named_by.is_empty() {
        let _ = writeln!(out, "    used by:  (nothing in the pod template)");
    }
    if !c.exists {
        let _ = writeln!(out, "    exists:   no");
    }
    let verdict = if c.reload { "yes" } else { "no" };
    let _ = writeln!(
        out,
        "    reload on change: {verdict} ({}): {}",
        c.reason, c.because
    );
    if let (Some(container), Some(var)) = (&c.container, &c.env_var) {
        let _ = writeln!(out, "    env var:  {var} on container {container}");
    }
    if let Some(keys) = &c.counted_keys {
        let _ = writeln!(
            out,
            "    counts:   keys {} only (--precise-keys): a change of another key rolls nothing",
            keys.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "    hash:     recorded {}, current {}: {}",
        short(&c.recorded_hash),
        short(&c.current_hash),
        c.hash_state.describe(c.reload)
    );
    if let Some(held) = &c.held {
        let _ = writeln!(out, "    held:     {held}");
    }
}

pub fn explanation_text(e: &Explanation, last: Option<&LastReload>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} {}/{}", e.kind, e.namespace, e.name);
    let _ = writeln!(
        out,
        "  controller settings: --reload-strategy={} --auto-reload-all={}",
        e.strategy, e.auto_reload_all
    );
    let _ = writeln!(out, "\nAnnotations:");
    if e.annotations.is_empty() {
        let _ = writeln!(out, "  (no reload annotation)");
    }
    for a in &e.annotations {
        let kinds: Vec<&str> = a.kinds.iter().map(|k| k.as_str()).collect();
        let read = if a.read { "read" } else { "NOT READ" };
        let scope = if kinds.is_empty() {
            String::new()
        } else {
            format!(" for {}", kinds.join(", "))
        };
        let _ = writeln!(
            out,
            "  {}: {:?}  ({}, {read}{scope})",
            a.key,
            a.value,
            a.source.as_str()
        );
        if let Some(note) = &a.note {
            let _ = writeln!(out, "    {note}");
        }
        if let Some(problem) = &a.problem {
            let _ = writeln!(out, "    problem: {problem}");
        }
    }
    let _ = writeln!(out, "\nPolicy:");
    for t in &e.policy.by_type {
        let _ = writeln!(
            out,
            "  {:<20} auto={} typed-auto={} search={} reload-list=[{}] exclude=[{}]",
            t.kind.as_str(),
            t.auto,
            t.typed_auto,
            t.search,
            t.reload_list.join(", "),
            t.exclude.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "  rollout-strategy={} pause-period={}",
        e.policy.rollout_strategy,
        e.policy.pause_period.as_deref().unwrap_or("none")
    );
    if let Some(window) = &e.policy.reload_window {
        let _ = writeln!(out, "  reload-window={window}");
    }
    if let Some(delay) = &e.policy.reload_delay {
        let _ = writeln!(out, "  reload-delay={delay}");
    }
    let _ = writeln!(out, "\nConfigs:");
    if e.configs.is_empty() {
        let _ = writeln!(out, "  (none used or named)");
    }
    for c in &e.configs {
        config_text(&mut out, c);
    }
    if let Some(last) = last {
        let _ = writeln!(out, "\nLast reload:");
        if last.recorded.is_empty() && last.events.is_empty() {
            let _ = writeln!(out, "  none recorded and no Reloaded event");
        }
        for r in &last.recorded {
            let _ = writeln!(out, "  recorded: {r}");
        }
        for ev in &last.events {
            let _ = writeln!(out, "  event {} {}: {}", ev.time, ev.reason, ev.message);
        }
    }
    out
}

/// The single verdict of `--for`.
pub fn verdict_line(c: &ConfigReport) -> String {
    format!(
        "Would a change of {}/{} reload it? {}: {}",
        c.kind,
        c.name,
        if c.reload { "yes" } else { "no" },
        c.because
    )
}

pub fn lint_text(findings: &[Lint]) -> String {
    let mut out = String::new();
    for f in findings {
        let level = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let _ = writeln!(
            out,
            "{level:<7} {} {}/{}: [{}] {}",
            f.kind, f.namespace, f.name, f.check, f.message
        );
    }
    let errors = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let _ = writeln!(out, "{} finding(s), {errors} error(s)", findings.len());
    out
}
