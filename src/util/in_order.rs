//! Runs futures at most `limit` at once and gives their results in the order they were given.
//!
//! `futures::StreamExt::buffered` keeps the order too, but a finished future holds its slot
//! until every one before it finished: one slow cluster or object stalls the whole bound.
//! Here a finished future frees its slot at once; only the results wait to be put in order.

use std::future::Future;

use futures::{FutureExt, StreamExt};

/// The outputs of `futures`, in their order, with at most `limit` (at least 1) running.
///
/// Takes a `Vec`, not an iterator: with the caller's iterator (closures over borrows) in the
/// returned future's type, rustc cannot prove it `Send` for every lifetime, and the fleet's
/// futures run on spawned tasks.
pub fn in_order<F: Future>(futures: Vec<F>, limit: usize) -> impl Future<Output = Vec<F::Output>> {
    futures::stream::iter(futures.into_iter().enumerate())
        .map(|(i, f)| f.map(move |out| (i, out)))
        .buffer_unordered(limit.max(1))
        .collect::<Vec<_>>()
        .map(|mut done| {
            done.sort_unstable_by_key(|(i, _)| *i);
            done.into_iter().map(|(_, out)| out).collect()
        })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::{Instant, sleep};

    use super::in_order;

    /// One slow future among quick ones: the quick ones pass it (the whole takes as long as
    /// the slow one), and the results keep the given order.
    #[tokio::test(start_paused = true)]
    async fn a_slow_future_does_not_hold_the_bound() {
        // (limit, millisecond delays, simulated ms the whole takes)
        let table: [(usize, &[u64], u64); 4] = [
            (2, &[100, 10, 10, 10], 100),
            (2, &[10, 10, 10, 10], 20),
            (1, &[100, 10, 10], 120),
            (0, &[5, 5], 10),
        ];
        for (limit, delays, total) in table {
            let start = Instant::now();
            let futures = delays.iter().enumerate().map(|(i, &ms)| async move {
                sleep(Duration::from_millis(ms)).await;
                i
            });
            let out = in_order(futures.collect(), limit).await;
            assert_eq!(out, (0..delays.len()).collect::<Vec<_>>(), "{delays:?}");
            assert_eq!(
                start.elapsed(),
                Duration::from_millis(total),
                "limit {limit}, delays {delays:?}"
            );
        }
    }
}
