//! Small shared helpers: durations, git, process groups, the allocator's arenas, the YAML
//! reader, capped reading, test faults, generated-docs checks.

pub mod bounded;
#[cfg(test)]
mod doc_links;
pub mod duration;
pub mod fault;
#[cfg(test)]
pub mod generated_docs;
pub mod git;
pub mod in_order;
pub mod memory;
pub mod process_group;
pub mod retry;
pub mod runner;
pub mod shard;
#[cfg(test)]
pub mod shared;
pub mod size;
#[cfg(test)]
pub mod test_cluster;
pub mod yaml;
#[cfg(test)]
pub(crate) mod yaml_fixtures;
