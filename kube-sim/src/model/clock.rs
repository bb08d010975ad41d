//! Simulated time. `--time-scale 10` makes simulated time run ten times faster than real
//! time, so that a 600 s progress deadline passes in a minute of a test.

use std::time::{Duration, Instant};

/// A clock shared by one cluster's API server and controllers.
///
/// Simulated wall time starts at the real wall time when the clock is made and then advances
/// `scale` times faster than real time.
#[derive(Clone, Debug)]
pub struct Clock {
    scale: f64,
    started_real: Instant,
    started_wall: jiff::Timestamp,
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
        Self {
            scale,
            started_real: Instant::now(),
            started_wall: jiff::Timestamp::now(),
        }
    }

    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Simulated time elapsed since the clock started.
    pub fn elapsed(&self) -> Duration {
        self.started_real.elapsed().mul_f64(self.scale)
    }

    /// The simulated wall-clock time, used for timestamps written into objects.
    pub fn now(&self) -> jiff::Timestamp {
        let elapsed = jiff::SignedDuration::try_from(self.elapsed()).unwrap_or_default();
        self.started_wall
            .checked_add(elapsed)
            .unwrap_or(self.started_wall)
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
    fn time_formats_match_kubernetes() {
        let ts: jiff::Timestamp = "2026-11-30T09:15:08.123456789Z".parse().unwrap();
        assert_eq!(format_time(ts), "2026-11-30T09:15:08Z");
        assert_eq!(format_micro_time(ts), "2026-11-30T09:15:08.123456Z");
    }
}
