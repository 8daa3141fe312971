use std::sync::Arc;

use super::*;

fn assignment(generation: u64, members: &[&str]) -> Arc<Assignment> {
    Arc::new(Assignment::of_members(generation, members))
}

fn member(identity: &str, live: bool, synced: u64, released: u64) -> Member {
    Member {
        identity: identity.into(),
        live,
        synced_generation: synced,
        released_generation: released,
        leaving: false,
        hash_ranges: true,
        acted: Default::default(),
    }
}

/// r0 owned everything at generation 1; generation 2 adds r1.
fn overlap() -> ShardView {
    let mut view = ShardView::default();
    assert!(view.install(assignment(1, &["r0"])));
    view.previous = None;
    assert!(view.install(assignment(2, &["r0", "r1"])));
    view
}

#[test]
fn without_a_previous_assignment_there_is_nothing_to_hand_over() {
    let mut view = ShardView::default();
    view.install(assignment(1, &["r0"]));
    view.previous = None;
    let members = [member("r0", true, 1, 1)];
    assert_eq!(next_step(&view, &members), HandoverStep::Wait);
}

#[test]
fn release_waits_until_every_current_member_synced_the_generation() {
    let view = overlap();
    let not_yet = [member("r0", true, 2, 0), member("r1", true, 1, 0)];
    assert_eq!(next_step(&view, &not_yet), HandoverStep::Wait);
    let missing = [member("r0", true, 2, 0)];
    assert_eq!(
        next_step(&view, &missing),
        HandoverStep::Wait,
        "r1 has no Lease yet"
    );
    let synced = [member("r0", true, 2, 0), member("r1", true, 2, 0)];
    assert_eq!(next_step(&view, &synced), HandoverStep::Release(2));
}

#[test]
fn completion_waits_for_live_previous_owners_and_not_for_dead_ones() {
    let mut view = overlap();
    assert!(view.release_previous(2));
    let holding = [member("r0", true, 2, 1), member("r1", true, 2, 0)];
    assert_eq!(next_step(&view, &holding), HandoverStep::Wait);
    let dead = [member("r0", false, 2, 1), member("r1", true, 2, 0)];
    assert_eq!(next_step(&view, &dead), HandoverStep::Complete(2), "fenced");
    let gone = [member("r1", true, 2, 0)];
    assert_eq!(
        next_step(&view, &gone),
        HandoverStep::Complete(2),
        "Lease deleted"
    );
    let released = [member("r0", true, 2, 2), member("r1", true, 2, 0)];
    assert_eq!(next_step(&view, &released), HandoverStep::Complete(2));
    assert!(view.complete_handover(2));
    assert!(view.previous.is_none());
}

#[test]
fn a_newer_generation_mid_handover_keeps_the_last_settled_assignment_as_previous() {
    let mut view = overlap();
    assert!(view.install(assignment(3, &["r0", "r1", "r2"])));
    assert_eq!(view.previous.as_ref().map(|a| a.generation), Some(1));
    assert!(
        !view.release_previous(2),
        "generation 2 is no longer current"
    );
    let synced = [
        member("r0", true, 3, 0),
        member("r1", true, 3, 0),
        member("r2", true, 2, 0),
    ];
    assert_eq!(
        next_step(&view, &synced),
        HandoverStep::Wait,
        "r2 not synced"
    );
    assert!(!view.install(assignment(3, &["r0"])), "not newer");
}

#[test]
fn an_ownership_change_lists_namespaces_entered_and_left() {
    let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
    let change = OwnershipChange::between(4, &set(&["a", "b"]), &set(&["b", "c"]));
    assert_eq!(
        change,
        OwnershipChange {
            generation: 4,
            entered: vec!["c".into()],
            left: vec!["a".into()],
            catch_up: None,
        }
    );
}

#[test]
fn a_catch_up_starts_from_the_lowest_version_of_the_other_members() {
    use crate::model::ConfigKind::{ConfigMap, Secret};
    let assignment = |members: &[&str]| Assignment::of_members(1, members);
    let acted: std::collections::HashMap<String, ActedVersions> = [
        ("r0", [(ConfigMap, 50), (Secret, 60)]),
        ("r1", [(ConfigMap, 40), (Secret, 70)]),
        ("r2", [(ConfigMap, 10), (Secret, 10)]),
    ]
    .into_iter()
    .map(|(m, v)| (m.to_string(), v.into_iter().collect()))
    .collect();
    let before = assignment(&["r0", "r1", "r2"]);
    // Its own version is not a source: r2 gaining catches up from r0 and r1.
    assert_eq!(
        catch_up_since(&[&before], "r2", &acted),
        Some([(ConfigMap, 40), (Secret, 60)].into_iter().collect())
    );
    // A member that stays counts too: what it owned only in a generation superseded before its
    // hand-over completed, it stopped acting on at once (9a13bf3's chaos run).
    assert_eq!(
        catch_up_since(&[&before], "r3", &acted),
        Some([(ConfigMap, 10), (Secret, 10)].into_iter().collect())
    );
    // A member of the previous assignment still in transition counts as well.
    assert_eq!(
        catch_up_since(&[&assignment(&["r0"]), &assignment(&["r3"])], "r3", &acted),
        Some([(ConfigMap, 50), (Secret, 60)].into_iter().collect())
    );
    // A member that never published a version (an older release) cannot be caught up from.
    assert_eq!(
        catch_up_since(&[&assignment(&["r9", "r0"])], "r0", &acted),
        None
    );
}
