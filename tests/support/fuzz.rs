//! The mutation fuzzer shared by tests/parsers_never_panic.rs (bounded, in `cargo test`) and
//! the bench's `fuzz` section (longer): seeds, a deterministic RNG, and mutations of valid
//! inputs (cut, duplicated, spliced, bytes flipped, YAML punctuation inserted), which reach
//! the parsers' edges better than random text.

/// xorshift64*: deterministic, no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

pub const PUNCTUATION: &[&str] = &[
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

pub fn mutate(rng: &mut Rng, seed: &str) -> String {
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

pub const CONFIG: &str = "app: shop\nnamespace: shop\nmanifests: [k8s/]\nwait:\n  timeout: 5m\n  fail_fast:\n    pull_grace: 10s\nhistory: {keep: 3}\non_failure: rollback-all\nlock: {timeout: 30}\ntargets:\n  - name: eu\n    context: sim-1\n  - name: us\n    kubeconfig_env: KC_US\n";

pub const MANIFEST: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-config\n  labels: &l {app: web}\ndata:\n  greeting: hello\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels: *l\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n        - name: web\n          image: nginx:1.27\n";
