//! Human durations as written in rollguard.yaml and flags: "5m", "90s", "1h30m", "1.5s", "250ms".

use std::time::Duration;

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (write e.g. \"90s\", \"5m\", \"1h30m\")")]
pub struct DurationError {
    pub input: String,
    pub reason: &'static str,
}

/// The longest duration any setting accepts (documented in the README). Deadlines are
/// `Instant + duration`; a bound keeps that sum far from overflow on every platform, and no
/// CI step waits longer than a day.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

const TOO_LONG: &str = "longer than the maximum of 24h";

/// Refuses a duration above [`MAX_DURATION`]; `input` is the text the user wrote.
pub fn bounded(d: Duration, input: &str) -> Result<Duration, DurationError> {
    if d > MAX_DURATION {
        return Err(DurationError {
            input: input.to_string(),
            reason: TOO_LONG,
        });
    }
    Ok(d)
}

/// Parses a duration made of `<number><unit>` parts (units: ms, s, m, h, d), at most
/// [`MAX_DURATION`]. A bare number is taken as seconds, so `timeout: 300` works as users
/// expect.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let total = parse_unbounded(input)?;
    bounded(total, input)
}

fn parse_unbounded(input: &str) -> Result<Duration, DurationError> {
    let fail = |reason| DurationError {
        input: input.to_string(),
        reason,
    };
    let text = input.trim();
    if text.is_empty() {
        return Err(fail("empty"));
    }
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| fail("a number needs a unit"))?;
        if number_len == 0 {
            return Err(fail("expected a number"));
        }
        let number: f64 = rest[..number_len]
            .parse()
            .map_err(|_| fail("not a number"))?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return Err(fail("unknown unit (use ms, s, m, h or d)")),
        };
        rest = &rest[unit_len..];
        let part =
            Duration::try_from_secs_f64(number * seconds_per_unit).map_err(|_| fail(TOO_LONG))?;
        total = total.checked_add(part).ok_or_else(|| fail(TOO_LONG))?;
    }
    Ok(total)
}

/// Short human form, in the syntax [`parse_duration`] reads back: "350ms", "4.2s", "5m",
/// "1m30s", "1h2m".
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs();
    if secs < 60 {
        let tenths = (ms % 1000) / 100;
        return if tenths == 0 {
            format!("{secs}s")
        } else {
            format!("{secs}.{tenths}s")
        };
    }
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_table() {
        let cases: &[(&str, Option<u64>)] = &[
            ("5m", Some(300_000)),
            ("90s", Some(90_000)),
            ("1h30m", Some(5_400_000)),
            ("1.5s", Some(1_500)),
            ("250ms", Some(250)),
            ("300", Some(300_000)),
            (" 2m ", Some(120_000)),
            ("1d", Some(86_400_000)),
            ("0s", Some(0)),
            ("", None),
            ("m", None),
            ("5", Some(5_000)),
            ("5x", None),
            ("5m3", None),
            ("-5s", None),
            ("1..5s", None),
            ("24h", Some(86_400_000)),
            ("24h1ms", None),
            ("2d", None),
            ("86401", None),
            ("18446744073709551615", None),
            ("18446744073709551615s", None),
            ("18446744073709551616s", None),
            ("1e300s", None),
            ("99999999999999999999999999h", None),
            ("inf", None),
            ("NaNs", None),
        ];
        for (input, want) in cases {
            let got = parse_duration(input).ok().map(|d| d.as_millis() as u64);
            assert_eq!(got, *want, "input {input:?}");
        }
    }

    #[test]
    fn error_message_names_input() {
        let err = parse_duration("5x").unwrap_err().to_string();
        assert!(err.contains("\"5x\""), "{err}");
        assert!(err.contains("unknown unit"), "{err}");
    }

    #[test]
    fn too_long_says_the_maximum() {
        let err = parse_duration("18446744073709551615s")
            .unwrap_err()
            .to_string();
        assert!(err.contains("maximum of 24h"), "{err}");
        assert!(bounded(MAX_DURATION, "1d").is_ok());
        assert!(bounded(MAX_DURATION + Duration::from_nanos(1), "x").is_err());
    }

    #[test]
    fn formats_table() {
        let cases = [
            (Duration::ZERO, "0ms"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(2500), "2.5s"),
            (Duration::from_millis(4_200), "4.2s"),
            (Duration::from_secs(5), "5s"),
            (Duration::from_secs(42), "42s"),
            (Duration::from_secs(300), "5m"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(125), "2m5s"),
            (Duration::from_secs(3_720), "1h2m"),
            (Duration::from_secs(5400), "1h30m"),
        ];
        for (d, want) in cases {
            assert_eq!(format_duration(d), want);
            // What rollguard prints, rollguard reads (to the tenth of a second).
            let back = parse_duration(want).unwrap();
            assert!(back <= d && d - back < Duration::from_millis(100), "{want}");
        }
    }
}
