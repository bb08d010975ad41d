//! Where objects live: the table of served resources and the object store of a cluster.

pub mod registry;
pub mod store;
