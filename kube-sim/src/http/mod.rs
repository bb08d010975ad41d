//! The HTTP side of a cluster: the server, request handlers, tables, protobuf, OpenAPI,
//! faults and counters.

pub mod faults;
pub mod handlers;
pub mod openapi;
pub mod protobuf;
pub mod server;
pub mod table;
pub mod watch;
