//! Loopback ports for the processes the integration tests and the load test start.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// A loopback port nothing listens on, taken from below the kernel's ephemeral range. A port
/// from `bind(":0")` is an ephemeral one, which any process's outgoing connection (the
/// controller's own API connections included) may take between this call and the controller's
/// bind: the admin endpoint then fails with "Address already in use" (a chaos run's replica
/// started by a scale fault a minute after its port was chosen did, three times over). Each
/// call in a process gets a new port (a counter, offset by the process id so that two
/// processes rarely start at the same place).
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOWEST: u32 = 10_000;
    let below = ephemeral_range_start().max(LOWEST + 1_000);
    let span = below - LOWEST;
    let offset = std::process::id().wrapping_mul(97) % span;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(n < span, "no free loopback port in {LOWEST}..{below}");
        let port = u16::try_from(LOWEST + (offset + n) % span).expect("below 65536");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`; 32768 if unreadable).
fn ephemeral_range_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..20).map(|_| free_port()).collect();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        assert!(
            ports
                .iter()
                .all(|p| u32::from(*p) < ephemeral_range_start())
        );
    }
}
