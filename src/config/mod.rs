//! rollguard.yaml + command-line overrides + `ROLLGUARD_*` / `INPUT_*` environment -> `Config`:
//! the model, the parser (file and line in every error, all problems at once), the overrides,
//! the name rules and suggestions, and the JSON Schema.

mod check_parse;
mod checks;
pub mod env_vars;
mod model;
mod names;
mod overrides;
mod parse;
mod pipeline;
mod schema;
#[cfg(test)]
mod tests;

pub use model::*;
pub use names::{dns_label_problem, nearest};
pub use overrides::Overrides;
pub use parse::{config_path, load, missing_shells, missing_working_dirs, parse};
pub use pipeline::{
    DEFAULT_KILL_GRACE, DEFAULT_SCRIPT_TIMEOUT, PipelineStage, Scope, ScriptCommand, ScriptStage,
    default_pipeline, script_stages,
};
pub use schema::json_schema;
