//! Runs futures at most `limit` at once and gives their results in the order they were given.
//!
//! `futures::StreamExt::buffered` keeps the order too, but a finished future holds its slot
//! until every one before it finished: one slow cluster or object stalls the whole bound.
//! Here a finished future frees its slot at once; only the results wait to be put in order.
//!
//! [`in_order_made`] makes each future only when a slot is free. A future's memory is its
//! largest state's from the moment it is made: made up front, the dry runs of 50 targets x
//! 100 objects were 5,000 such futures, most of the preflight's peak heap.

use std::future::Future;

use futures::stream::FuturesUnordered;
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

/// The outputs of `make(0)` .. `make(count - 1)`, in that order, with at most `limit` (at
/// least 1) made and running at once; `on_each` is called as each one finishes.
pub async fn in_order_made<F: Future>(
    count: usize,
    limit: usize,
    mut make: impl FnMut(usize) -> F,
    mut on_each: impl FnMut(),
) -> Vec<F::Output> {
    let mut running = FuturesUnordered::new();
    let mut done = Vec::with_capacity(count);
    let mut next = 0;
    loop {
        while next < count && running.len() < limit.max(1) {
            let i = next;
            running.push(make(i).map(move |out| (i, out)));
            next += 1;
        }
        let Some(finished) = running.next().await else {
            break;
        };
        on_each();
        done.push(finished);
    }
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, out)| out).collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::{Instant, sleep};

    use super::{in_order, in_order_made};

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

    /// Futures are made as slots free up, never more than the limit alive at once.
    #[tokio::test(start_paused = true)]
    async fn futures_are_made_only_when_a_slot_is_free() {
        use std::cell::Cell;
        let delays = [30u64, 10, 10, 10, 5];
        let (alive, most, finished) = (Cell::new(0), Cell::new(0), Cell::new(0));
        let start = Instant::now();
        let out = in_order_made(
            delays.len(),
            2,
            |i| {
                alive.set(alive.get() + 1);
                most.set(most.get().max(alive.get()));
                let alive = &alive;
                async move {
                    sleep(Duration::from_millis(delays[i])).await;
                    alive.set(alive.get() - 1);
                    i
                }
            },
            || finished.set(finished.get() + 1),
        )
        .await;
        assert_eq!(out, vec![0, 1, 2, 3, 4]);
        assert_eq!((most.get(), finished.get()), (2, 5));
        // 1 and 2 pass the slow 0 in the other slot: 30 ms in all, then 3 and 4.
        assert_eq!(start.elapsed(), Duration::from_millis(35));
    }
}
