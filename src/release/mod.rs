//! Release records: one Secret per revision of an app, stored in the target cluster.
//!
//! A record is a gzip-compressed JSON document in the Secret's `release` key, and the
//! manifests it applied a gzip-compressed JSON array in its `manifests` key (Secrets, not
//! ConfigMaps, because manifests may contain Secrets). Two keys, so that a status change
//! carries the manifests' bytes over without decoding them, and so that every target of a
//! run shares one encoding of the manifests. The labels carry the app, revision and
//! status so that `kubectl get secrets -l rollguard.dev/app=shop` shows the history. The
//! decisions (next revision, what to prune, what to supersede, which record is last good) are
//! pure functions of the records; [`ReleaseStore`] does the I/O.

mod codec;
pub mod dropped;
pub mod lock;
mod record;
pub mod session;
mod store;
#[cfg(test)]
mod tests;

pub use codec::*;
pub use record::*;
pub use store::*;
