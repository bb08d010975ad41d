//! What the API server does to an object on a write, as functions of values: defaults,
//! managed fields, the schema check, selectors, server-side apply and the patch types.

pub mod apply;
pub mod decode;
pub mod defaults;
pub mod event_views;
pub mod managed_fields;
pub mod schema;
pub mod selectors;
pub mod validation;
