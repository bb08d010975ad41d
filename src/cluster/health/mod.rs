//! Health rules: pure functions of Kubernetes objects (as JSON), no I/O.
//!
//! `assess` follows kstatus (kubernetes-sigs/cli-utils) with kubectl's rollout-status order of
//! checks for workloads; `pods` adds fail-fast on pods of the new revision, `pulls` judges
//! image-pull errors by what they say.

mod exits;
mod kstatus;
mod pods;
pub mod pulls;
mod status;

pub use exits::{ContainerFacts, container_facts, signal_name};
pub use kstatus::{assess, assess_as, infer_type};
pub use pods::{
    PodProblem, RevisionSelector, Severity, TEMPLATE_DIGEST_ANNOTATION, label_selector,
    new_revision_selector, pod_matches, pod_problems, slim_template, take_template,
    template_digest,
};
pub use status::{Assessment, Status, warning_event_line};
/// The string at a path of keys, for the watch code beside these rules.
pub(crate) use status::{condition, condition_is, int_at, str_at};
