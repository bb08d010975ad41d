//! Test-only fault injection, reachable from every layer.

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
