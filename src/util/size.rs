//! Memory sizes as people write them (`512MiB`, `1GiB`, `512Mi`), for `--memory-budget`.

/// Why a size was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error(
        "{0:?} is not a memory size: write a whole number and a unit, e.g. 512MiB or 1GiB (units: KiB, MiB, GiB, TiB, or Ki, Mi, Gi, Ti)"
    )]
    Malformed(String),
    #[error("{0:?} is zero: give at least 1MiB")]
    Zero(String),
    #[error("{0:?} is too large: give at most 1024TiB")]
    TooLarge(String),
}

/// The default `--memory-budget` (`memory_budget:`): 512 MiB, what a CI runner spares
/// beside the job's own tools (GitHub's smallest Linux runner has 7 GiB).
pub const DEFAULT_MEMORY_BUDGET: u64 = 512 * MIB;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;
const TIB: u64 = 1024 * GIB;

/// Bytes of a size such as `512MiB`, `1GiB`, `1.5GiB`, `768Mi` (binary units only: a budget in
/// MB would silently be 5 % off from what `free -m` shows; a bare number is refused for the
/// same reason: bytes or MiB?).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let s = text.trim();
    let malformed = || SizeError::Malformed(text.to_string());
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(malformed)?;
    let (number, unit) = s.split_at(split);
    let unit_bytes = match unit.trim() {
        "KiB" | "Ki" => KIB,
        "MiB" | "Mi" => MIB,
        "GiB" | "Gi" => GIB,
        "TiB" | "Ti" => TIB,
        _ => return Err(malformed()),
    };
    let value: f64 = match number.parse::<f64>() {
        Ok(v) if v.is_finite() && !number.is_empty() => v,
        _ => return Err(malformed()),
    };
    let bytes = value * unit_bytes as f64;
    if bytes > (1024 * TIB) as f64 {
        return Err(SizeError::TooLarge(text.to_string()));
    }
    // Whole bytes; a fraction of a byte is not a budget anyone means.
    let bytes = bytes.floor() as u64;
    if bytes == 0 {
        return Err(SizeError::Zero(text.to_string()));
    }
    Ok(bytes)
}

/// `512 MiB`, `1.5 GiB`, `0.56 MiB`: two decimals at most, trailing zeros dropped.
pub fn format_size(bytes: u64) -> String {
    let (value, unit) = if bytes >= GIB {
        (bytes as f64 / GIB as f64, "GiB")
    } else if bytes >= KIB * 100 {
        (bytes as f64 / MIB as f64, "MiB")
    } else {
        (bytes as f64 / KIB as f64, "KiB")
    };
    let text = format!("{value:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_written() {
        let ok: &[(&str, u64)] = &[
            ("512MiB", 512 * MIB),
            ("512Mi", 512 * MIB),
            (" 1GiB ", GIB),
            ("1 GiB", GIB),
            ("1.5GiB", 3 * GIB / 2),
            ("64KiB", 64 * KIB),
            ("2Ti", 2 * TIB),
            ("1024TiB", 1024 * TIB),
        ];
        for (text, bytes) in ok {
            assert_eq!(parse_size(text), Ok(*bytes), "{text}");
        }
        let malformed = [
            "", "512", "MiB", "512MB", "512 mb", "1G", "-1GiB", "1..5GiB", "GiB1", "1e3MiB", "½GiB",
        ];
        for text in malformed {
            assert_eq!(
                parse_size(text),
                Err(SizeError::Malformed(text.to_string())),
                "{text}"
            );
        }
        assert_eq!(parse_size("0MiB"), Err(SizeError::Zero("0MiB".into())));
        assert_eq!(
            parse_size("1025TiB"),
            Err(SizeError::TooLarge("1025TiB".into()))
        );
    }

    #[test]
    fn the_message_says_what_to_write() {
        let e = parse_size("512MB").unwrap_err().to_string();
        assert!(e.contains("\"512MB\"") && e.contains("512MiB"), "{e}");
    }

    #[test]
    fn sizes_print_short() {
        let cases: &[(u64, &str)] = &[
            (512 * MIB, "512 MiB"),
            (GIB, "1 GiB"),
            (3 * GIB / 2, "1.5 GiB"),
            (MIB / 2, "0.5 MiB"),
            (600 * KIB, "0.59 MiB"),
            (64 * KIB, "64 KiB"),
        ];
        for (bytes, text) in cases {
            assert_eq!(format_size(*bytes), *text, "{bytes}");
        }
    }
}
