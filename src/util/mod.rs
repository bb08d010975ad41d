//! Small shared helpers: durations, git, the YAML reader, generated-docs checks.

pub mod duration;
#[cfg(test)]
pub mod generated_docs;
pub mod git;
#[cfg(test)]
pub mod shared;
#[cfg(test)]
pub mod test_cluster;
pub mod yaml;
