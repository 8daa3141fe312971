use std::sync::Mutex;

use super::*;

fn one_per_second() -> WriteLimiter {
    let one = NonZeroU32::new(1).unwrap();
    write_limiter(one, one)
}

/// Starts waiters in the given order (each registered before the next starts) and returns the
/// order in which they got their cells.
async fn served_order(
    limiter: &WriteLimiter,
    waiters: &[(&'static str, TurnPriority)],
) -> Vec<&'static str> {
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (name, priority) in waiters.iter().copied() {
        let (limiter, served) = (limiter.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            limiter.until_ready(priority).await;
            served.lock().unwrap().push(name);
        }));
        // Let it register and start waiting before the next one arrives.
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for task in tasks {
        task.await.unwrap();
    }
    served.lock().unwrap().clone()
}

#[tokio::test(start_paused = true)]
async fn a_live_reload_goes_before_retries_and_notices_that_waited_longer() {
    let limiter = one_per_second();
    assert!(limiter.try_take(), "the burst cell");
    let order = served_order(
        &limiter,
        &[
            ("notice-1", TurnPriority::Notice),
            ("retry-1", TurnPriority::Retry),
            ("retry-2", TurnPriority::Retry),
            ("live-1", TurnPriority::Live),
            ("live-2", TurnPriority::Live),
        ],
    )
    .await;
    assert_eq!(
        order,
        ["live-1", "live-2", "retry-1", "retry-2", "notice-1"]
    );
}

#[tokio::test(start_paused = true)]
async fn the_rate_is_kept_whatever_the_priorities() {
    let limiter = one_per_second();
    let started = tokio::time::Instant::now();
    let waiters: Vec<(&'static str, TurnPriority)> = vec![
        ("a", TurnPriority::Live),
        ("b", TurnPriority::Notice),
        ("c", TurnPriority::Retry),
        ("d", TurnPriority::Live),
    ];
    let order = served_order(&limiter, &waiters).await;
    assert_eq!(order.len(), 4);
    // One cell at once, then one per second: the fourth cell is due 3 s after the first.
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_secs(3), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(3_100), "{elapsed:?}");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_does_not_hold_back_the_lower_priorities() {
    let limiter = one_per_second();
    assert!(limiter.try_take());
    let live = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.until_ready(TurnPriority::Live).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    live.abort();
    let _ = live.await;
    let waited = limiter.until_ready(TurnPriority::Notice).await;
    assert!(waited <= Duration::from_secs(1), "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn try_take_leaves_a_cell_to_someone_waiting() {
    let limiter = one_per_second();
    assert!(limiter.try_take());
    let waiter = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.until_ready(TurnPriority::Retry).await })
    };
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(waiter.is_finished(), "the retry got the second cell");
    assert!(!limiter.try_take(), "no cell left before 2 s");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(limiter.try_take());
}
