//! Where objects live: the table of served resources and the object store of a cluster.

pub mod apply;
pub mod registry;
pub mod store;
