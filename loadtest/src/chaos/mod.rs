//! The `chaos` scenario (wired into the load test in the next commit): the seeded fault
//! schedule and the checker of the recorded history.

pub mod check;
pub mod schedule;
