//! The pure rules of a check: one reading -> a judged sample; the consecutive-failure rule
//! (`failures_allowed`); the final verdict; the one-line message of a failed check.

use jiff::Timestamp;

use crate::config::{CheckConfig, CheckSource, Unclear};
use crate::report::{CheckSample, CheckVerdict};

/// What one run of a check read.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    /// A Prometheus value.
    Value(f64),
    /// An HTTP probe's answer: its status, and why its body did not match (None: it did,
    /// or no `expect_body`).
    Http {
        status: u16,
        body_problem: Option<String>,
    },
    /// The query returned no series.
    NoData,
    /// The source could not be read (down, a timeout, an error answer): the reason, scrubbed.
    Error(String),
}

/// `reading` of `check` at `time`, judged.
pub fn judge(check: &CheckConfig, reading: &Reading, time: Timestamp) -> CheckSample {
    let sample = |value, verdict, note: Option<String>| CheckSample {
        time,
        value,
        verdict,
        note,
    };
    let unclear = |policy: Unclear| match policy {
        Unclear::Fail => CheckVerdict::Failed,
        Unclear::Pass => CheckVerdict::Passed,
        Unclear::Inconclusive => CheckVerdict::Inconclusive,
    };
    match reading {
        Reading::Value(v) => {
            let failed = check.fail_if.is_some_and(|f| f.fails(*v));
            sample(Some(*v), passed_or_failed(failed), None)
        }
        Reading::Http {
            status,
            body_problem,
        } => {
            let expected = match &check.source {
                CheckSource::Http(h) => h.expect_status.as_slice(),
                CheckSource::Prometheus(_) => &[],
            };
            let note = if !expected.contains(status) {
                Some(format!(
                    "expected {}, got {status}",
                    statuses_text(expected)
                ))
            } else {
                body_problem.clone()
            };
            sample(
                Some(f64::from(*status)),
                passed_or_failed(note.is_some()),
                note,
            )
        }
        Reading::NoData => sample(None, unclear(check.no_data), Some("no data".into())),
        Reading::Error(reason) => sample(None, unclear(check.on_error), Some(reason.clone())),
    }
}

fn passed_or_failed(failed: bool) -> CheckVerdict {
    if failed {
        CheckVerdict::Failed
    } else {
        CheckVerdict::Passed
    }
}

/// "200", "200 or 204".
pub fn statuses_text(statuses: &[u16]) -> String {
    let words: Vec<String> = statuses.iter().map(u16::to_string).collect();
    match words.split_last() {
        None => "nothing".into(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// Failing results in a row: a check fails its target once the streak is longer than
/// `failures_allowed`. A passing result ends the streak; an inconclusive one is no result
/// and leaves it as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Streak {
    pub failures: u32,
}

impl Streak {
    /// Counts `verdict`; true when the check now fails its target.
    pub fn record(&mut self, verdict: CheckVerdict, failures_allowed: u32) -> bool {
        match verdict {
            CheckVerdict::Failed => {
                self.failures = self.failures.saturating_add(1);
                self.failures > failures_allowed
            }
            CheckVerdict::Passed => {
                self.failures = 0;
                false
            }
            CheckVerdict::Inconclusive | CheckVerdict::NotRun => false,
        }
    }
}

/// The verdict of a check over its samples: failed when it failed its target; else
/// inconclusive when any result was; passed when it took a sample; else not run.
pub fn verdict(samples: &[CheckSample], failed_target: bool) -> CheckVerdict {
    if failed_target {
        CheckVerdict::Failed
    } else if samples.is_empty() {
        CheckVerdict::NotRun
    } else if samples
        .iter()
        .any(|s| s.verdict == CheckVerdict::Inconclusive)
    {
        CheckVerdict::Inconclusive
    } else {
        CheckVerdict::Passed
    }
}

/// The one line of a failing sample: `error-rate = 0.043 > 0.01 at 12:03:10` (UTC).
pub fn failure_message(check: &CheckConfig, sample: &CheckSample) -> String {
    let at = sample.time.strftime("%H:%M:%S");
    let name = &check.name;
    match (sample.value, &check.source, &check.fail_if) {
        (Some(v), CheckSource::Prometheus(_), Some(f)) => {
            format!("{name} = {} {f} at {at}", format_value(v))
        }
        (Some(v), CheckSource::Http(_), _) => {
            let note = sample.note.as_deref().unwrap_or("failed");
            format!("{name} = {} ({note}) at {at}", format_value(v))
        }
        _ => {
            let note = sample.note.as_deref().unwrap_or("no value");
            format!("{name}: {note} at {at}")
        }
    }
}

/// A value for people: `0.043`, `3`, `1.5e-7`; at most 6 decimals.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let fixed = format!("{v:.6}");
    let trimmed = fixed.trim_end_matches('0').trim_end_matches('.');
    if (trimmed == "0" || trimmed == "-0") && v != 0.0 {
        format!("{v:e}")
    } else {
        trimmed.to_string()
    }
}

/// What the live view shows of a sample: "0.02", "503", "no data", "error".
pub fn short(sample: &CheckSample) -> String {
    match (sample.value, sample.verdict) {
        (Some(v), _) => format_value(v),
        (None, _) if sample.note.as_deref() == Some("no data") => "no data".into(),
        (None, _) => "error".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Auth, Comparison, FailIf, HttpProbe, PrometheusSource};
    use std::time::Duration;

    fn prom(no_data: Unclear, on_error: Unclear) -> CheckConfig {
        CheckConfig {
            name: "error-rate".into(),
            source: CheckSource::Prometheus(PrometheusSource {
                url: "http://p".into(),
                auth: Auth::None,
                query: "q".into(),
            }),
            fail_if: Some(FailIf {
                op: Comparison::Greater,
                threshold: 0.01,
            }),
            interval: Duration::from_secs(10),
            failures_allowed: 0,
            no_data,
            on_error,
            line: 1,
        }
    }

    fn http() -> CheckConfig {
        CheckConfig {
            name: "healthz".into(),
            source: CheckSource::Http(HttpProbe {
                url: "http://h".into(),
                expect_status: vec![200, 204],
                expect_body: None,
                timeout: Duration::from_secs(5),
            }),
            fail_if: None,
            ..prom(Unclear::Inconclusive, Unclear::Inconclusive)
        }
    }

    fn at() -> Timestamp {
        "2026-12-02T12:03:10Z".parse().expect("a time")
    }

    /// A check, what it read, and the sample's verdict, value and note.
    type Row = (
        CheckConfig,
        Reading,
        CheckVerdict,
        Option<f64>,
        Option<&'static str>,
    );

    #[test]
    fn readings_are_judged() {
        use CheckVerdict::*;
        let i = Unclear::Inconclusive;
        let table: Vec<Row> = vec![
            (prom(i, i), Reading::Value(0.043), Failed, Some(0.043), None),
            (prom(i, i), Reading::Value(0.01), Passed, Some(0.01), None),
            (prom(i, i), Reading::Value(0.0), Passed, Some(0.0), None),
            (
                prom(i, i),
                Reading::NoData,
                Inconclusive,
                None,
                Some("no data"),
            ),
            (
                prom(Unclear::Fail, i),
                Reading::NoData,
                Failed,
                None,
                Some("no data"),
            ),
            (
                prom(Unclear::Pass, i),
                Reading::NoData,
                Passed,
                None,
                Some("no data"),
            ),
            (
                prom(i, i),
                Reading::Error("down".into()),
                Inconclusive,
                None,
                Some("down"),
            ),
            (
                prom(i, Unclear::Fail),
                Reading::Error("down".into()),
                Failed,
                None,
                Some("down"),
            ),
            (
                prom(i, Unclear::Pass),
                Reading::Error("down".into()),
                Passed,
                None,
                Some("down"),
            ),
            (
                http(),
                Reading::Http {
                    status: 204,
                    body_problem: None,
                },
                Passed,
                Some(204.0),
                None,
            ),
            (
                http(),
                Reading::Http {
                    status: 503,
                    body_problem: None,
                },
                Failed,
                Some(503.0),
                Some("expected 200 or 204, got 503"),
            ),
            (
                http(),
                Reading::Http {
                    status: 200,
                    body_problem: Some("the body does not match \"ok\"".into()),
                },
                Failed,
                Some(200.0),
                Some("the body does not match \"ok\""),
            ),
        ];
        for (check, reading, verdict, value, note) in table {
            let s = judge(&check, &reading, at());
            assert_eq!(
                (s.verdict, s.value, s.note.as_deref()),
                (verdict, value, note),
                "{reading:?} {:?}",
                check.no_data
            );
        }
    }

    #[test]
    fn a_streak_longer_than_allowed_fails() {
        use CheckVerdict::*;
        // (failures_allowed, verdicts, the index at which the target fails)
        let table: &[(u32, &[CheckVerdict], Option<usize>)] = &[
            (0, &[Passed, Failed], Some(1)),
            (1, &[Failed, Passed, Failed, Passed], None),
            (1, &[Failed, Failed], Some(1)),
            (1, &[Failed, Inconclusive, Failed], Some(2)),
            (
                2,
                &[Failed, Failed, Passed, Failed, Failed, Failed],
                Some(5),
            ),
            (0, &[Inconclusive, Inconclusive], None),
        ];
        for (allowed, verdicts, want) in table {
            let mut streak = Streak::default();
            let failed_at = verdicts.iter().position(|v| streak.record(*v, *allowed));
            assert_eq!(failed_at, *want, "{allowed} {verdicts:?}");
        }
    }

    #[test]
    fn verdicts_and_messages() {
        let s = |verdict| CheckSample {
            time: at(),
            value: Some(1.0),
            verdict,
            note: None,
        };
        use CheckVerdict::*;
        assert_eq!(verdict(&[], false), NotRun);
        assert_eq!(verdict(&[s(Passed), s(Failed)], false), Passed);
        assert_eq!(verdict(&[s(Passed), s(Inconclusive)], false), Inconclusive);
        assert_eq!(verdict(&[s(Failed)], true), Failed);

        let check = prom(Unclear::Fail, Unclear::Inconclusive);
        let failed = judge(&check, &Reading::Value(0.043), at());
        assert_eq!(
            format!("AnalysisFailed: {}", failure_message(&check, &failed)),
            "AnalysisFailed: error-rate = 0.043 > 0.01 at 12:03:10"
        );
        let none = judge(&check, &Reading::NoData, at());
        assert_eq!(
            failure_message(&check, &none),
            "error-rate: no data at 12:03:10"
        );
        let probe = judge(
            &http(),
            &Reading::Http {
                status: 503,
                body_problem: None,
            },
            at(),
        );
        assert_eq!(
            failure_message(&http(), &probe),
            "healthz = 503 (expected 200 or 204, got 503) at 12:03:10"
        );
        for (v, want) in [
            (0.2, "0.2"),
            (3.0, "3"),
            (0.1 + 0.2, "0.3"),
            (1.5e-7, "1.5e-7"),
            (-2.5, "-2.5"),
        ] {
            assert_eq!(format_value(v), want);
        }
    }
}
