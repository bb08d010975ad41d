//! `--shard I/N`: which slice of the fleet one CI matrix job deploys.
//!
//! A target belongs to the shard with the highest weight for its name (rendezvous, or highest
//! random weight, hashing): the owner depends only on the name and N, so adding or removing
//! a target moves no other target, and every job of a matrix computes the same slices
//! without talking to the others. The hash is spelt out here (FNV-1a, then splitmix64's
//! finalizer), not the standard library's, whose output may change between Rust releases:
//! a plan job and the deploy jobs must agree even when built apart. Waves need no special
//! case: a target keeps its wave, so each shard runs its part of wave 0 first (and may have
//! no target in some wave).

use serde::{Deserialize, Serialize};

/// One slice of N: `index` counts from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// Why a `--shard` (or `$ROLLGUARD_SHARD`) value was refused; said after the flag's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    #[error(
        "{0:?} is not I/N: write the shard's number, a slash and the number of shards, e.g. 2/3 for the second of three"
    )]
    Form(String),
    #[error("{0:?}: there are no shards with N = 0; N is the number of matrix jobs, at least 1")]
    NoShards(String),
    #[error(
        "{text:?}: shards count from 1 to N, so I must be between 1 and {count}; e.g. 1/{count} is the first"
    )]
    OutOfRange { text: String, count: u32 },
}

impl std::str::FromStr for Shard {
    type Err = ShardError;

    /// Strict: two whole numbers without sign or spaces around one slash, 1 <= I <= N.
    fn from_str(text: &str) -> Result<Shard, ShardError> {
        let form = || ShardError::Form(text.to_string());
        let (index, count) = text.split_once('/').ok_or_else(form)?;
        let number = |part: &str| {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(form());
            }
            part.parse::<u32>().map_err(|_| form())
        };
        let (index, count) = (number(index)?, number(count)?);
        if count == 0 {
            return Err(ShardError::NoShards(text.to_string()));
        }
        if index == 0 || index > count {
            return Err(ShardError::OutOfRange {
                text: text.to_string(),
                count,
            });
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// Whether this shard deploys the target named `name`.
    pub fn owns(&self, name: &str) -> bool {
        owner(name, self.count) == self.index
    }

    /// The items this shard deploys, in their order (so each wave keeps its order).
    pub fn slice<T>(&self, items: Vec<T>, name: impl Fn(&T) -> &str) -> Vec<T> {
        items.into_iter().filter(|i| self.owns(name(i))).collect()
    }
}

/// The shard (1..=count) that deploys the target named `name`; 1 when count is 0 or 1.
pub fn owner(name: &str, count: u32) -> u32 {
    let base = fnv1a(name.as_bytes());
    let mut best = (0u64, 1u32);
    for index in 1..=count.max(1) {
        let weight = mix(base ^ u64::from(index).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        // Strictly greater: a tie (practically never) goes to the lower index, the same in
        // every job.
        if weight > best.0 || index == 1 {
            best = (weight, index);
        }
    }
    best.1
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// splitmix64's finalizer: every input bit moves every output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_strictly() {
        // (text, parsed or the start of the error)
        type Want = Result<(u32, u32), &'static str>;
        let cases: &[(&str, Want)] = &[
            ("1/1", Ok((1, 1))),
            ("2/3", Ok((2, 3))),
            ("3/3", Ok((3, 3))),
            ("12/40", Ok((12, 40))),
            ("0/3", Err("\"0/3\": shards count from 1 to N")),
            ("4/3", Err("\"4/3\": shards count from 1 to N")),
            ("1/0", Err("\"1/0\": there are no shards")),
            ("0/0", Err("\"0/0\": there are no shards")),
            ("1", Err("\"1\" is not I/N")),
            ("", Err("\"\" is not I/N")),
            ("1/", Err("\"1/\" is not I/N")),
            ("/3", Err("\"/3\" is not I/N")),
            (" 1/3", Err("\" 1/3\" is not I/N")),
            ("1 /3", Err("\"1 /3\" is not I/N")),
            ("+1/3", Err("\"+1/3\" is not I/N")),
            ("-1/3", Err("\"-1/3\" is not I/N")),
            ("1/3/4", Err("\"1/3/4\" is not I/N")),
            ("1.0/3", Err("\"1.0/3\" is not I/N")),
            ("a/b", Err("\"a/b\" is not I/N")),
            ("1/99999999999", Err("\"1/99999999999\" is not I/N")),
        ];
        for (text, want) in cases {
            let got = text.parse::<Shard>();
            match (want, &got) {
                (Ok((i, n)), Ok(s)) => {
                    assert_eq!((s.index, s.count), (*i, *n), "{text}");
                    assert_eq!(s.to_string(), *text);
                }
                (Err(start), Err(e)) => {
                    assert!(e.to_string().starts_with(start), "{text}: {e}")
                }
                _ => panic!("{text}: {got:?}"),
            }
        }
    }

    /// Pinned owners: a change of the hash would move targets between the jobs of a
    /// matrix built from different rollguard versions, so it must be deliberate.
    #[test]
    fn owners_are_pinned() {
        let names = [
            "eu",
            "us",
            "ap",
            "sa",
            "af",
            "canary",
            "edge-0001",
            "edge-0002",
        ];
        let got: Vec<(u32, u32, u32)> = names
            .iter()
            .map(|n| (owner(n, 1), owner(n, 2), owner(n, 3)))
            .collect();
        assert_eq!(got, PINNED, "{names:?}");
    }

    const PINNED: [(u32, u32, u32); 8] = [
        (1, 2, 2),
        (1, 1, 1),
        (1, 1, 1),
        (1, 1, 3),
        (1, 1, 1),
        (1, 1, 1),
        (1, 1, 3),
        (1, 1, 3),
    ];

    /// Deterministic names: a fixed-seed generator (no dependency on a property-test crate).
    fn names(seed: u64, count: usize) -> Vec<String> {
        let mut state = seed;
        (0..count)
            .map(|i| {
                state = mix(state.wrapping_add(0x9E37_79B9_7F4A_7C15));
                let len = 1 + (state % 12) as usize;
                let letters: String = (0..len)
                    .map(|k| char::from(b'a' + ((state >> (k * 5)) % 26) as u8))
                    .collect();
                format!("{letters}-{i}")
            })
            .collect()
    }

    #[test]
    fn every_target_is_in_exactly_one_shard() {
        for seed in 0..20 {
            let all = names(seed, 60);
            for count in 1..=8 {
                let mut seen: Vec<&String> = Vec::new();
                for index in 1..=count {
                    let shard = Shard { index, count };
                    let slice = shard.slice(all.iter().collect(), |n| n.as_str());
                    // Each slice keeps the fleet's order.
                    let positions: Vec<usize> = slice
                        .iter()
                        .map(|n| all.iter().position(|a| a == *n).unwrap_or(usize::MAX))
                        .collect();
                    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
                    seen.extend(slice);
                }
                seen.sort();
                let mut want: Vec<&String> = all.iter().collect();
                want.sort();
                assert_eq!(seen, want, "seed {seed}, N = {count}");
            }
        }
    }

    #[test]
    fn adding_or_removing_a_target_moves_no_other() {
        for seed in 0..50 {
            let mut fleet = names(seed, 30);
            let added = names(seed + 1000, 1).remove(0);
            for count in 1..=8 {
                let before: Vec<u32> = fleet.iter().map(|n| owner(n, count)).collect();
                fleet.push(added.clone());
                let after: Vec<u32> = fleet.iter().map(|n| owner(n, count)).collect();
                assert_eq!(
                    before[..],
                    after[..before.len()],
                    "seed {seed}, N = {count}"
                );
                // Removing one from the middle moves no other either.
                let removed = fleet.remove(7);
                let without: Vec<u32> = fleet.iter().map(|n| owner(n, count)).collect();
                let mut want = after.clone();
                want.remove(7);
                assert_eq!(without, want, "{removed} removed");
                fleet.insert(7, removed);
                fleet.pop();
            }
        }
    }

    #[test]
    fn shards_are_about_even() {
        let all = names(7, 4000);
        for count in [2u32, 3, 4, 8] {
            let even = all.len() as f64 / f64::from(count);
            for index in 1..=count {
                let n = all.iter().filter(|a| owner(a, count) == index).count() as f64;
                assert!(
                    (n - even).abs() < even * 0.15,
                    "shard {index}/{count} has {n} of {}",
                    all.len()
                );
            }
        }
    }

    #[test]
    fn waves_are_sliced_within_each_wave() {
        // (name, wave) in config order: every shard's slice keeps each target's wave and
        // the order of waves.
        let fleet: Vec<(String, u32)> = names(3, 40)
            .into_iter()
            .enumerate()
            .map(|(i, n)| (n, (i / 10) as u32))
            .collect();
        for index in 1..=3 {
            let slice = Shard { index, count: 3 }.slice(fleet.clone(), |t| t.0.as_str());
            assert!(slice.windows(2).all(|w| w[0].1 <= w[1].1), "{slice:?}");
            assert!(slice.iter().all(|t| fleet.contains(t)));
        }
    }
}
