//! Simulated time. `--time-scale 10` makes simulated time run ten times faster than real
//! time, so that a 600 s progress deadline passes in a minute of a test.
//!
//! Two timelines, so that a client sees real time and the controllers see fast time:
//!
//! - **Wall time** ([`Clock::now`]) is the real wall clock. Every timestamp the server writes
//!   into an object (creationTimestamp, managedFields, Events, conditions, container
//!   states) is a wall time, so `kubectl get` shows real ages at any time scale and no
//!   timestamp a client sees is ahead of the wall clock. The one exception, as on a real
//!   server, is a graceful pod deletion's `deletionTimestamp`: the moment the grace period
//!   ends, which at time scale `s` is `grace / s` real seconds ahead (see the store).
//! - **Simulated time** ([`Clock::sim_now`], [`Clock::elapsed`]) meets the wall time at
//!   the clock's anchor (its start, to the whole second) and runs `scale` times faster. The
//!   controllers and the kubelet decide in it (a 0.5 s container start, a 10 s back-off, a
//!   600 s progress deadline are simulated spans), and [`Clock::sleep`]/[`Clock::real`] turn
//!   its spans into real ones. The controller loop maps the timestamps it reads from
//!   objects into simulated time ([`Clock::sim_of`]) and those it writes back into wall
//!   time ([`Clock::wall_of`]), keeping its own writes' simulated instants so that the
//!   whole-second rounding of a written timestamp costs no simulated precision.
//!
//! With scale 1 the two timelines are the same (up to the drift between the system's
//! monotonic and wall clocks).

use std::time::{Duration, Instant};

/// A clock shared by one cluster's API server and controllers.
#[derive(Clone, Debug)]
pub struct Clock {
    scale: f64,
    started_real: Instant,
    /// The anchor of the two timelines: where they meet. Above scale 1 it is the wall time
    /// when the clock was made down to the whole second, so that with a whole-number scale
    /// a whole-second wall timestamp maps to a whole-second simulated one and back exactly.
    started_wall: jiff::Timestamp,
    /// The wall time when the clock was made, less `started_wall` (under a second).
    started_after_anchor: Duration,
}

impl Clock {
    /// A clock running `scale` times faster than real time. Scales at or below zero, or not
    /// finite, are treated as 1.
    pub fn new(scale: f64) -> Self {
        let scale = if scale.is_finite() && scale > 0.0 {
            scale
        } else {
            1.0
        };
        let wall = jiff::Timestamp::now();
        let started_wall = if scale == 1.0 {
            wall
        } else {
            jiff::Timestamp::from_second(wall.as_second()).unwrap_or(wall)
        };
        Self {
            scale,
            started_real: Instant::now(),
            started_wall,
            started_after_anchor: Duration::try_from(wall.duration_since(started_wall))
                .unwrap_or_default(),
        }
    }

    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Simulated time elapsed since the clock started.
    pub fn elapsed(&self) -> Duration {
        self.started_real.elapsed().mul_f64(self.scale)
    }

    /// The real wall-clock time, for every timestamp written into an object.
    pub fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }

    /// The simulated instant now: where the controllers' timeline stands. It runs `scale`
    /// times faster than the wall clock from their common anchor, so above scale 1 it is
    /// ahead of the wall clock; it is never written into an object as is (see
    /// [`Clock::wall_of`], which maps it to the wall-clock now).
    pub fn sim_now(&self) -> jiff::Timestamp {
        let since_anchor = self.started_after_anchor + self.started_real.elapsed();
        self.started_wall
            .checked_add(signed(since_anchor.mul_f64(self.scale)))
            .unwrap_or(self.started_wall)
    }

    /// The wall time at which a simulated instant happens (happened).
    pub fn wall_of(&self, sim: jiff::Timestamp) -> jiff::Timestamp {
        self.map(sim, 1.0 / self.scale)
    }

    /// The simulated instant of a wall time (e.g. a timestamp read from an object).
    pub fn sim_of(&self, wall: jiff::Timestamp) -> jiff::Timestamp {
        self.map(wall, self.scale)
    }

    /// `started_wall + (ts - started_wall) * factor`, to the nanosecond.
    fn map(&self, ts: jiff::Timestamp, factor: f64) -> jiff::Timestamp {
        if self.scale == 1.0 {
            return ts;
        }
        let delta = ts.as_nanosecond() - self.started_wall.as_nanosecond();
        let scaled = (delta as f64 * factor).round();
        if !scaled.is_finite() {
            return ts;
        }
        jiff::Timestamp::from_nanosecond(self.started_wall.as_nanosecond() + scaled as i128)
            .unwrap_or(ts)
    }

    /// How much real time a span of simulated time takes.
    pub fn real(&self, simulated: Duration) -> Duration {
        simulated.div_f64(self.scale)
    }

    /// Sleeps for a span of simulated time.
    pub async fn sleep(&self, simulated: Duration) {
        tokio::time::sleep(self.real(simulated)).await;
    }
}

fn signed(d: Duration) -> jiff::SignedDuration {
    jiff::SignedDuration::try_from(d).unwrap_or(jiff::SignedDuration::MAX)
}

impl Default for Clock {
    fn default() -> Self {
        Self::new(1.0)
    }
}

/// Formats a timestamp as Kubernetes does for `Time` fields: RFC 3339, whole seconds, `Z`.
pub fn format_time(ts: jiff::Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Formats a timestamp as Kubernetes does for `MicroTime` fields (Leases, Events).
pub fn format_micro_time(ts: jiff::Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_speeds_up_simulated_time() {
        let clock = Clock::new(10.0);
        assert_eq!(
            clock.real(Duration::from_secs(600)),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn bad_scales_fall_back_to_real_time() {
        for scale in [0.0, -3.0, f64::NAN, f64::INFINITY] {
            assert_eq!(Clock::new(scale).scale(), 1.0);
        }
    }

    #[test]
    fn now_is_the_wall_clock_at_any_scale() {
        for scale in [1.0, 10.0, 100.0, 1000.0] {
            let clock = Clock::new(scale);
            std::thread::sleep(Duration::from_millis(20));
            let before = jiff::Timestamp::now();
            let now = clock.now();
            let after = jiff::Timestamp::now();
            assert!(before <= now && now <= after, "scale {scale}");
        }
    }

    #[test]
    fn simulated_time_runs_scaled_and_maps_to_the_wall_clock_now() {
        let clock = Clock::new(100.0);
        let sim_start = clock.sim_now();
        std::thread::sleep(Duration::from_millis(50));
        let sim = clock.sim_now();
        let wall = jiff::Timestamp::now();
        // 50 ms of real time is at least 5 simulated seconds.
        assert!(sim.duration_since(sim_start) >= jiff::SignedDuration::from_secs(5));
        assert!(clock.elapsed() >= Duration::from_secs(5));
        // The simulated now is ahead of the wall clock; mapped back it is the wall-clock now.
        assert!(sim > wall);
        let back = clock.wall_of(sim);
        assert!(back <= wall, "{back} after {wall}");
        assert!(wall.duration_since(back) < jiff::SignedDuration::from_millis(20));
    }

    #[test]
    fn whole_second_wall_times_map_to_simulated_time_and_back_exactly() {
        for scale in [1.0, 2.0, 20.0, 100.0] {
            let clock = Clock::new(scale);
            let wall = jiff::Timestamp::from_second(clock.now().as_second() - 3600).unwrap();
            for offset in [0, 1, 59, 3600, 7201] {
                let ts = wall
                    .checked_add(jiff::SignedDuration::from_secs(offset))
                    .unwrap();
                let sim = clock.sim_of(ts);
                assert_eq!(sim.subsec_nanosecond(), 0, "scale {scale}: {sim}");
                assert_eq!(clock.wall_of(sim), ts, "scale {scale}");
            }
            // A simulated span of `scale` seconds is one wall second.
            let a = clock.wall_of(clock.sim_of(wall));
            let later = clock
                .sim_of(wall)
                .checked_add(jiff::SignedDuration::from_secs_f64(scale))
                .unwrap();
            assert_eq!(
                clock.wall_of(later).duration_since(a),
                jiff::SignedDuration::from_secs(1)
            );
        }
    }

    #[test]
    fn time_formats_match_kubernetes() {
        let ts: jiff::Timestamp = "2026-11-30T09:15:08.123456789Z".parse().unwrap();
        assert_eq!(format_time(ts), "2026-11-30T09:15:08Z");
        assert_eq!(format_micro_time(ts), "2026-11-30T09:15:08.123456Z");
    }
}
