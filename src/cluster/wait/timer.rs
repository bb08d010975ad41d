//! The timer: the wait's (or the bake's) deadline and the instant the next grace ends, so
//! that a tolerated problem fails exactly when its grace is over, never by polling.

use tokio::time::Instant;

/// What woke the timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::cluster) enum Alarm {
    /// The deadline passed.
    Deadline,
    /// A grace ended: evaluate again.
    GraceEnded,
}

pub(in crate::cluster) struct Timer {
    deadline: Instant,
    grace_end: Option<Instant>,
}

impl Timer {
    pub(in crate::cluster) fn new(deadline: Instant) -> Timer {
        Timer {
            deadline,
            grace_end: None,
        }
    }

    pub(in crate::cluster) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The next instant a grace ends, as the latest evaluation says (None: none running).
    pub(in crate::cluster) fn set_grace_end(&mut self, at: Option<Instant>) {
        self.grace_end = at;
    }

    /// The alarm that rings first: a grace that ends at the deadline or after it is the
    /// deadline's business.
    pub(in crate::cluster) fn next_alarm(&self) -> (Instant, Alarm) {
        match self.grace_end {
            Some(at) if at < self.deadline => (at, Alarm::GraceEnded),
            _ => (self.deadline, Alarm::Deadline),
        }
    }

    /// Sleeps until the next alarm and says which it was.
    pub(in crate::cluster) async fn ring(&self) -> Alarm {
        let (at, alarm) = self.next_alarm();
        tokio::time::sleep_until(at).await;
        alarm
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_first_alarm_rings() {
        let start = Instant::now();
        let s = |secs| start + Duration::from_secs(secs);
        // (grace end, the alarm that rings first)
        let cases = [
            (None, (s(60), Alarm::Deadline)),
            (Some(s(5)), (s(5), Alarm::GraceEnded)),
            (Some(s(60)), (s(60), Alarm::Deadline)),
            (Some(s(90)), (s(60), Alarm::Deadline)),
        ];
        for (grace_end, want) in cases {
            let mut timer = Timer::new(s(60));
            timer.set_grace_end(grace_end);
            assert_eq!(timer.next_alarm(), want, "{grace_end:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_grace_rings_when_it_ends() {
        let start = Instant::now();
        let mut timer = Timer::new(start + Duration::from_secs(60));
        timer.set_grace_end(Some(start + Duration::from_secs(5)));
        assert_eq!(timer.ring().await, Alarm::GraceEnded);
        assert_eq!(Instant::now(), start + Duration::from_secs(5));
    }
}
