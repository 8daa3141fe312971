use super::*;

fn assignment(generation: u64, members: &[&str]) -> Arc<Assignment> {
    Arc::new(Assignment::of_members(generation, members))
}

/// r1 joins r0 (generation 1 -> 2): the moves, and one namespace r1 takes.
fn r1_joins() -> (Moves, String) {
    let mut moves = Moves::default();
    moves.record(Some(assignment(1, &["r0"])), assignment(2, &["r0", "r1"]));
    let taken = (0..100)
        .map(|i| format!("team-{i}"))
        .find(|ns| moves.moved(ns, 0).is_some())
        .expect("r1 takes one");
    (moves, taken)
}

#[test]
fn only_namespaces_whose_owner_changed_have_moved() {
    let namespaces: Vec<String> = (0..200).map(|i| format!("team-{i}")).collect();
    let solo = assignment(1, &["r0"]);
    let pair = assignment(2, &["r0", "r1"]);
    let mut moves = Moves::default();
    moves.record(Some(solo.clone()), pair.clone());
    let moved: Vec<&String> = namespaces
        .iter()
        .filter(|ns| moves.moved(ns, 0).is_some())
        .collect();
    assert!(
        !moved.is_empty() && moved.len() < namespaces.len(),
        "r1 takes some namespaces, r0 keeps the others: {} of {} moved",
        moved.len(),
        namespaces.len()
    );
    for ns in &namespaces {
        assert_eq!(
            moves.moved(ns, 0).is_some(),
            pair.owner(ns) == Some("r1"),
            "{ns}: moved exactly when r1 took it"
        );
    }
}

#[test]
fn a_move_counts_until_the_settle_window_after_its_handover_completed() {
    let window = SETTLE_WINDOW.as_millis() as u64;
    let (mut moves, taken) = r1_joins();
    assert!(
        moves.moved(&taken, 10 * window).is_some(),
        "under way: however long the handover takes"
    );
    moves.settled(10 * window);
    assert!(
        moves.moved(&taken, 11 * window - 1).is_some(),
        "within the window"
    );
    assert!(moves.moved(&taken, 11 * window).is_none(), "past it");
    moves.settled(11 * window);
    assert!(moves.moved(&taken, 11 * window).is_none(), "forgotten");
}

#[test]
fn an_unknown_history_moves_every_namespace() {
    let mut first = Moves::default();
    first.record(None, assignment(1, &["r0"]));
    assert!(
        first.moved("team-0", 0).is_some(),
        "whoever acted before this replica started"
    );
    let mut skipped = Moves::default();
    // Generation 2 (never seen here) may have given team-0 to another replica.
    skipped.record(Some(assignment(1, &["r0"])), assignment(3, &["r0"]));
    assert!(skipped.moved("team-0", 0).is_some(), "a skipped generation");
    let mut same = Moves::default();
    same.record(Some(assignment(1, &["r0"])), assignment(2, &["r0"]));
    assert!(same.moved("team-0", 0).is_none(), "one owner throughout");
}

#[test]
fn once_the_others_released_only_configs_changed_before_they_did_are_checked() {
    let (mut moves, taken) = r1_joins();
    assert_eq!(moves.moved(&taken, 0), Some(Settling::Every));
    moves.others_released(1, 500);
    assert_eq!(
        moves.moved(&taken, 0),
        Some(Settling::Every),
        "released an older generation only: they may still act on generation 1's namespaces"
    );
    moves.others_released(2, 700);
    assert_eq!(moves.moved(&taken, 0), Some(Settling::ChangedUpTo(700)));
    moves.others_released(3, 900);
    assert_eq!(
        moves.moved(&taken, 0),
        Some(Settling::ChangedUpTo(700)),
        "the first revision at which they were quiet stays"
    );
    // A later move of the same namespace without quiet others checks every config again.
    moves.record(
        Some(assignment(2, &["r0", "r1"])),
        assignment(4, &["r0", "r1"]),
    );
    assert_eq!(moves.moved(&taken, 0), Some(Settling::Every));
    moves.others_released(4, 1_200);
    assert_eq!(moves.moved(&taken, 0), Some(Settling::ChangedUpTo(1_200)));
}

#[test]
fn a_config_is_checked_unless_its_indexed_version_is_newer_than_the_quiet_revision() {
    assert!(Settling::Every.checks(Some(10_000)));
    let quiet = Settling::ChangedUpTo(700);
    assert!(
        quiet.checks(Some(699)),
        "changed before: another replica may have written newer"
    );
    assert!(quiet.checks(Some(700)));
    assert!(
        !quiet.checks(Some(701)),
        "made after every other replica stopped acting"
    );
    assert!(quiet.checks(None), "not indexed");
    assert!(quiet.checks(Some(0)), "unknown version");
}
