//! Runs futures at most `limit` at once and gives their results in the order they were given.
//!
//! `futures::StreamExt::buffered` keeps the order too, but a finished future holds its slot
//! until every one before it finished: one slow cluster or object stalls the whole bound.
//! Here a finished future frees its slot at once; only the results wait to be put in order.
//!
//! [`in_order_made`] makes each future only when a slot is free. A future's memory is its
//! largest state's from the moment it is made: made up front, the dry runs of 50 targets x
//! 100 objects were 5,000 such futures, most of the preflight's peak heap. Its [`Window`]
//! may add a bound shared by many callers: the fleet's requests in flight.

use std::future::Future;
use std::sync::Arc;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::Semaphore;

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

/// How many of one caller's futures may run at once: `limit` (at least 1), each also holding
/// a permit of `shared` when given, a bound across callers (the fleet's requests in flight).
#[derive(Debug, Clone)]
pub struct Window {
    pub limit: usize,
    pub shared: Option<Arc<Semaphore>>,
}

impl Window {
    /// A window of `limit` with no shared bound.
    pub fn of(limit: usize) -> Window {
        Window {
            limit,
            shared: None,
        }
    }
}

/// The outputs of `make(0)` .. `make(count - 1)`, in that order, with at most the window's
/// limit made and running at once; `on_each` is called as each one finishes. With a shared
/// bound, a future is made only once it holds a permit: while some of its own run, a caller
/// waits for one of them to end before asking again; with none running it queues for one.
pub async fn in_order_made<F: Future>(
    count: usize,
    window: &Window,
    mut make: impl FnMut(usize) -> F,
    mut on_each: impl FnMut(),
) -> Vec<F::Output> {
    let mut running = FuturesUnordered::new();
    let mut done = Vec::with_capacity(count);
    let mut next = 0;
    loop {
        while next < count && running.len() < window.limit.max(1) {
            let permit = match &window.shared {
                None => None,
                Some(pool) => match pool.clone().try_acquire_owned() {
                    Ok(permit) => Some(permit),
                    Err(_) if !running.is_empty() => break,
                    // Only a closed pool refuses, and none is ever closed: run unbounded.
                    Err(_) => pool.clone().acquire_owned().await.ok(),
                },
            };
            let i = next;
            running.push(make(i).map(move |out| {
                drop(permit);
                (i, out)
            }));
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

    use super::{Window, in_order, in_order_made};

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
            &Window::of(2),
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

    /// Callers sharing a bound: never more futures alive than the shared permits, each
    /// caller within its own limit, and every result in its caller's order.
    #[tokio::test(start_paused = true)]
    async fn callers_sharing_a_bound_stay_within_it() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        // (shared permits, callers, limit each, futures each, simulated ms the whole takes:
        // every future takes 10 ms)
        let table: [(usize, usize, usize, usize, u64); 4] = [
            (3, 2, 2, 4, 30),
            (8, 2, 2, 4, 20),
            (1, 3, 4, 2, 60),
            (4, 4, 1, 2, 20),
        ];
        for (permits, callers, limit, each, total) in table {
            let window = Window {
                limit,
                shared: Some(std::sync::Arc::new(tokio::sync::Semaphore::new(permits))),
            };
            let (alive, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
            let start = Instant::now();
            let runs = (0..callers).map(|_| {
                in_order_made(
                    each,
                    &window,
                    |i| {
                        let now = alive.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        let alive = &alive;
                        async move {
                            sleep(Duration::from_millis(10)).await;
                            alive.fetch_sub(1, Ordering::SeqCst);
                            i
                        }
                    },
                    || {},
                )
            });
            let outs = futures::future::join_all(runs).await;
            let case = format!("{permits} permits, {callers} x {limit}");
            assert!(
                outs.iter().all(|o| *o == (0..each).collect::<Vec<_>>()),
                "{case}"
            );
            let bound = permits.min(callers * limit);
            assert_eq!(most.load(Ordering::SeqCst), bound, "{case}");
            assert_eq!(start.elapsed(), Duration::from_millis(total), "{case}");
        }
    }
}
