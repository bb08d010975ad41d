//! Bounded property tests (a fixed number of cases, seeded, so a failure reproduces): the
//! parsers that take user input never panic, whatever the bytes, and refuse garbage with a
//! message naming the file. Mutations of valid inputs (cut, duplicated, spliced, bytes
//! flipped, YAML punctuation inserted) reach the parsers' edges better than random text.

use std::path::Path;

use rollguard::config::{self, Overrides};
use rollguard::manifests;
use rollguard::util::duration::parse_duration;

const CASES: usize = 400;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const PUNCTUATION: &[&str] = &[
    ":",
    "- ",
    "---\n",
    "&a ",
    "*a",
    "<<: *a\n",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "'",
    "#",
    "\n  ",
    "\t",
    "!!binary ",
    "? ",
    "|\n",
    ">\n",
    "~",
    "null",
    "1e999",
    "99999999999999999999999",
    "\0",
    "\u{feff}",
    ",",
    "%YAML 1.2\n",
];

fn mutate(rng: &mut Rng, seed: &str) -> String {
    let mut text = seed.to_string();
    for _ in 0..1 + rng.below(4) {
        let cut = |t: &String, at: usize| {
            let mut at = at.min(t.len());
            while !t.is_char_boundary(at) {
                at -= 1;
            }
            at
        };
        let at = cut(&text, rng.below(text.len() + 1));
        match rng.below(5) {
            0 => text.truncate(at),
            1 => text.insert_str(at, PUNCTUATION[rng.below(PUNCTUATION.len())]),
            2 => {
                let end = cut(&text, at + rng.below(40));
                let piece = text[at..end].to_string();
                text.insert_str(at, &piece);
            }
            3 => {
                let end = cut(&text, at + rng.below(20));
                text.replace_range(at..end, "");
            }
            _ => {
                let c = char::from_u32(rng.below(0x3000) as u32).unwrap_or('x');
                text.insert(at, c);
            }
        }
    }
    text
}

const CONFIG: &str = "app: shop\nnamespace: shop\nmanifests: [k8s/]\nwait:\n  timeout: 5m\n  fail_fast:\n    err_image_pull_grace: 10s\nhistory: {keep: 3}\non_failure: rollback-all\nlock: {timeout: 30}\ntargets:\n  - name: eu\n    context: sim-1\n  - name: us\n    kubeconfig_env: KC_US\n";

const MANIFEST: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-config\n  labels: &l {app: web}\ndata:\n  greeting: hello\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels: *l\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n        - name: web\n          image: nginx:1.27\n";

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
