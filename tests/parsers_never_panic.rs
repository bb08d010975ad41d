//! Bounded property tests (a fixed number of cases, seeded, so a failure reproduces): the
//! parsers that take user input never panic, whatever the bytes, and refuse garbage with a
//! message naming the file. Mutations of valid inputs (cut, duplicated, spliced, bytes
//! flipped, YAML punctuation inserted) reach the parsers' edges better than random text.

use std::path::Path;

use rollguard::config::{self, Overrides};
use rollguard::manifests;
use rollguard::util::duration::parse_duration;

const CASES: usize = 400;

#[path = "support/fuzz.rs"]
mod fuzz;
use fuzz::{CONFIG, MANIFEST, Rng, mutate};

#[test]
fn the_config_loader_never_panics_and_names_the_file() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let no_env = |_: &str| None;
    for _ in 0..CASES {
        let text = mutate(&mut rng, CONFIG);
        let result = std::panic::catch_unwind(|| {
            config::parse(
                &text,
                Path::new("rollguard.yaml"),
                &Overrides::default(),
                &no_env,
            )
        });
        match result {
            Err(_) => panic!("config::parse panicked on:\n{text:?}"),
            Ok(Err(e)) => assert!(
                e.to_string().contains("rollguard.yaml"),
                "the error names the file: {e}\nfor {text:?}"
            ),
            Ok(Ok(_)) => {}
        }
    }
}

#[test]
fn the_manifest_parser_never_panics_and_names_the_file() {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for _ in 0..CASES {
        let text = mutate(&mut rng, MANIFEST);
        match std::panic::catch_unwind(|| manifests::parse(&text, Path::new("k8s/app.yaml"))) {
            Err(_) => panic!("manifests::parse panicked on:\n{text:?}"),
            Ok(Err(e)) => assert!(
                e.to_string().contains("k8s/app.yaml"),
                "the error names the file: {e}\nfor {text:?}"
            ),
            Ok(Ok(_)) => {}
        }
    }
}

#[test]
fn the_duration_parser_never_panics_and_stays_bounded() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    for _ in 0..CASES * 5 {
        let text = mutate(&mut rng, "1h30m15.5s250ms");
        match std::panic::catch_unwind(|| parse_duration(&text)) {
            Err(_) => panic!("parse_duration panicked on {text:?}"),
            Ok(Ok(d)) => assert!(
                d <= rollguard::util::duration::MAX_DURATION,
                "{text:?} -> {d:?}"
            ),
            Ok(Err(_)) => {}
        }
    }
}

#[test]
fn kube_sim_rules_never_panic() {
    let mut rng = Rng(0xA076_1D64_78BD_642F);
    let seed = "- {cluster: sim-2, image: \"*:v2\", behaviour: ImagePullBackOff}\n- {image: \"nginx:*\", behaviour: Ready}\n";
    for _ in 0..CASES {
        let text = mutate(&mut rng, seed);
        if std::panic::catch_unwind(|| kube_sim::rules::parse(&text)).is_err() {
            panic!("kube_sim::rules::parse panicked on {text:?}");
        }
    }
}
