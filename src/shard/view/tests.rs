use super::*;

fn assignment(generation: u64, members: &[&str]) -> Arc<Assignment> {
    Arc::new(Assignment::of_members(generation, members))
}

#[test]
fn only_namespaces_whose_owner_changed_have_moved() {
    let namespaces: Vec<String> = (0..200).map(|i| format!("team-{i}")).collect();
    let solo = assignment(1, &["r0"]);
    let pair = assignment(2, &["r0", "r1"]);
    let mut moves = Moves::default();
    moves.record(Some(solo.clone()), pair.clone());
    let moved: Vec<&String> = namespaces.iter().filter(|ns| moves.moved(ns, 0)).collect();
    assert!(
        !moved.is_empty() && moved.len() < namespaces.len(),
        "r1 takes some namespaces, r0 keeps the others: {} of {} moved",
        moved.len(),
        namespaces.len()
    );
    for ns in &namespaces {
        assert_eq!(
            moves.moved(ns, 0),
            pair.owner(ns) == Some("r1"),
            "{ns}: moved exactly when r1 took it"
        );
    }
}

#[test]
fn a_move_counts_until_the_settle_window_after_its_handover_completed() {
    let window = SETTLE_WINDOW.as_millis() as u64;
    let mut moves = Moves::default();
    moves.record(Some(assignment(1, &["r0"])), assignment(2, &["r0", "r1"]));
    let taken = (0..100)
        .map(|i| format!("team-{i}"))
        .find(|ns| moves.moved(ns, 0))
        .expect("r1 takes one");
    assert!(
        moves.moved(&taken, 10 * window),
        "under way: however long the handover takes"
    );
    moves.settled(10 * window);
    assert!(moves.moved(&taken, 11 * window - 1), "within the window");
    assert!(!moves.moved(&taken, 11 * window), "past it");
    moves.settled(11 * window);
    assert!(!moves.moved(&taken, 11 * window), "forgotten");
}

#[test]
fn an_unknown_history_moves_every_namespace() {
    let mut first = Moves::default();
    first.record(None, assignment(1, &["r0"]));
    assert!(
        first.moved("team-0", 0),
        "whoever acted before this replica started"
    );
    let mut skipped = Moves::default();
    // Generation 2 (never seen here) may have given team-0 to another replica.
    skipped.record(Some(assignment(1, &["r0"])), assignment(3, &["r0"]));
    assert!(skipped.moved("team-0", 0), "a skipped generation");
    let mut same = Moves::default();
    same.record(Some(assignment(1, &["r0"])), assignment(2, &["r0"]));
    assert!(!same.moved("team-0", 0), "one owner throughout");
}
