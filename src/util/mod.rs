//! Small shared helpers: durations, git, the YAML reader, capped reading, generated-docs
//! checks, test fault injection.

pub mod bounded;
pub mod duration;
#[cfg(test)]
pub mod generated_docs;
pub mod git;
#[cfg(test)]
pub mod shared;
#[cfg(test)]
pub mod test_cluster;
pub mod yaml;

/// Test-only fault injection (debug builds): `ROLLGUARD_TEST_PANIC=<place>` panics there,
/// so that the end-to-end tests can prove what a panic leaves behind.
#[track_caller]
pub fn test_panic_point(place: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("ROLLGUARD_TEST_PANIC").is_ok_and(|p| p == place) {
        panic!("test panic at {place}");
    }
    #[cfg(not(debug_assertions))]
    let _ = place;
}
