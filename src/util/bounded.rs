//! Reading user files and command output under a size cap, in bounded memory, into text
//! that is checked (UTF-8, no NUL) with the line of the first bad byte. The caps are
//! documented in README ("Size caps").

use std::io::Read;
use std::path::Path;

const MIB: u64 = 1024 * 1024;
/// One manifest file: an object is at most about 1.5 MiB (etcd's limit), a file holds a few.
pub const MAX_MANIFEST_FILE: u64 = 16 * MIB;
/// All manifest files of a run together.
pub const MAX_MANIFESTS_TOTAL: u64 = 32 * MIB;
/// The stdout of the `render:` command (the same bound as all manifests).
pub const MAX_RENDER_OUTPUT: u64 = MAX_MANIFESTS_TOTAL;
/// rollguard.yaml.
pub const MAX_CONFIG_FILE: u64 = MIB;
/// A kubeconfig file: one of a thousand clusters with their certificates inline is about 5 MiB.
pub const MAX_KUBECONFIG_FILE: u64 = 16 * MIB;
/// Problems reported per file: the first ones, then a count (a generated file of 100,000
/// broken documents must not print 100,000 lines).
pub const MAX_ISSUES_PER_FILE: usize = 20;

/// Why a file or an output could not be taken as text. Messages name no file: the caller
/// prints `file:line: message`.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    #[error(
        "{} the {} cap on {what}; split it or leave out what is not deployed",
        match size { Some(s) => format!("is {}, over", size_text(*s)), None => "passes".to_string() },
        size_text(*cap)
    )]
    TooLarge {
        what: &'static str,
        cap: u64,
        size: Option<u64>,
    },
    #[error(
        "is not UTF-8 text: byte 0x{byte:02x} at line {line} (byte offset {offset}) is invalid; save it as UTF-8"
    )]
    NotUtf8 {
        line: usize,
        offset: usize,
        byte: u8,
    },
    #[error(
        "contains a NUL byte at line {line}, column {column}: YAML and JSON text has none (is it a binary file?)"
    )]
    Nul { line: usize, column: usize },
}

impl ReadError {
    /// The 1-based line of the problem, 0 when it is about the whole file.
    pub fn line(&self) -> usize {
        match self {
            ReadError::NotUtf8 { line, .. } | ReadError::Nul { line, .. } => *line,
            _ => 0,
        }
    }
}

/// `16 MiB`, `1.5 MiB`, `900 bytes`.
pub fn size_text(bytes: u64) -> String {
    if bytes >= MIB {
        let mib = bytes as f64 / MIB as f64;
        if bytes.is_multiple_of(MIB) {
            format!("{} MiB", bytes / MIB)
        } else {
            format!("{mib:.1} MiB")
        }
    } else if bytes >= 1024 {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} bytes")
    }
}

/// The text of the file at `path`, at most `cap` bytes: the size is checked before reading
/// and the read stops one byte past the cap (a file that grows meanwhile is caught too).
pub fn read_file(path: &Path, cap: u64, what: &'static str) -> Result<String, ReadError> {
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    if size > cap {
        return Err(ReadError::TooLarge {
            what,
            cap,
            size: Some(size),
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(ReadError::TooLarge {
            what,
            cap,
            size: None,
        });
    }
    decode(bytes)
}

/// `bytes` as text: UTF-8 without NUL, else the line of the first bad byte.
pub fn decode(bytes: Vec<u8>) -> Result<String, ReadError> {
    let line_at =
        |bytes: &[u8], offset: usize| bytes[..offset].iter().filter(|b| **b == b'\n').count() + 1;
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let offset = e.utf8_error().valid_up_to();
            let bytes = e.as_bytes();
            return Err(ReadError::NotUtf8 {
                line: line_at(bytes, offset),
                offset,
                byte: bytes.get(offset).copied().unwrap_or(0),
            });
        }
    };
    if let Some(offset) = text.find('\0') {
        let line_start = text[..offset].rfind('\n').map_or(0, |p| p + 1);
        return Err(ReadError::Nul {
            line: line_at(text.as_bytes(), offset),
            column: text[line_start..offset].chars().count() + 1,
        });
    }
    Ok(text)
}

/// Keeps the first [`MAX_ISSUES_PER_FILE`] of `issues` and replaces the rest by one made by
/// `more` from their count.
pub fn cap_issues<T>(issues: &mut Vec<T>, more: impl FnOnce(usize) -> T) {
    if issues.len() > MAX_ISSUES_PER_FILE {
        let rest = issues.len() - MAX_ISSUES_PER_FILE;
        issues.truncate(MAX_ISSUES_PER_FILE);
        issues.push(more(rest));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_names_the_line_of_the_bad_byte() {
        let cases: [(&[u8], &str); 4] = [
            (b"a: 1\nb: \xff\n", "byte 0xff at line 2 (byte offset 8)"),
            (b"\xc3", "byte 0xc3 at line 1 (byte offset 0)"),
            (b"a: 1\n\nb: x\0y\n", "NUL byte at line 3, column 5"),
            (b"\0", "NUL byte at line 1, column 1"),
        ];
        for (bytes, expected) in cases {
            let err = decode(bytes.to_vec()).unwrap_err().to_string();
            assert!(err.contains(expected), "{bytes:?}: {err}");
        }
        assert_eq!(decode("ä: ü\n".as_bytes().to_vec()).unwrap(), "ä: ü\n");
    }

    #[test]
    fn read_file_refuses_past_the_cap_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.yaml");
        std::fs::write(&path, vec![b'#'; 2048]).unwrap();
        let err = read_file(&path, 1024, "one manifest file").unwrap_err();
        assert_eq!(
            err.to_string(),
            "is 2 KiB, over the 1 KiB cap on one manifest file; split it or leave out what is not deployed"
        );
        assert_eq!(read_file(&path, 2048, "x").unwrap().len(), 2048);
        let missing = read_file(&dir.path().join("nope"), 10, "x").unwrap_err();
        assert!(
            missing.to_string().starts_with("cannot read: "),
            "{missing}"
        );
    }

    #[test]
    fn issues_are_capped_with_a_count() {
        let mut issues: Vec<String> = (0..25).map(|i| i.to_string()).collect();
        cap_issues(&mut issues, |n| format!("... and {n} more"));
        assert_eq!(issues.len(), MAX_ISSUES_PER_FILE + 1);
        assert_eq!(issues[19], "19");
        assert_eq!(issues[20], "... and 5 more");
        let mut few = vec![1, 2];
        cap_issues(&mut few, |_| 0);
        assert_eq!(few, vec![1, 2]);
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(size_text(16 * MIB), "16 MiB");
        assert_eq!(size_text(3 * MIB / 2), "1.5 MiB");
        assert_eq!(size_text(900), "900 bytes");
    }
}
