//! The outcome of one run: per target what happened and why, and how it is shown.
//!
//! The model (`model.rs`) is the single source for every sink: the JSON file (`to_json`), the PR
//! comment and step summary (`to_markdown`), the terminal's final table (`to_table`) and the
//! exit code. It carries no object bodies, so Secret values cannot leak through it.

mod check_view;
pub mod clean;
pub mod diff;
pub mod escape;
pub(crate) mod json;
pub mod log_filter;
mod markdown;
pub mod merge;
mod model;
pub mod plan;
pub mod progress;
pub mod redact;
mod terminal;

pub use clean::Clean;
pub use json::{plan_to_json, report_schema, to_json};
pub use markdown::{
    COMMENT_LIMIT, FullReport, MarkdownOptions, STEP_SUMMARY_LIMIT, icon, plan_to_markdown,
    to_markdown,
};
pub use model::*;
pub use plan::ChangePlan;
pub use terminal::to_table;
