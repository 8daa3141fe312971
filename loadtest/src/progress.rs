//! Progress lines on stderr, stamped with the seconds since the load test started.

use std::sync::OnceLock;
use std::time::Instant;

static START: OnceLock<Instant> = OnceLock::new();

pub fn log(msg: &str) {
    let t = START.get_or_init(Instant::now).elapsed().as_secs_f64();
    eprintln!("[loadtest {t:>7.1}s] {msg}");
}

/// Starts the clock of the progress lines (else the first line does).
pub fn start_clock() {
    START.get_or_init(Instant::now);
}
