//! `rollguard demo`: three simulated clusters, a good deploy, then a bad image in one
//! cluster, with the fast failure and the report. Needs kube-sim (being built).

use crate::cli::DemoArgs;
use crate::error::Error;

pub async fn run(_args: DemoArgs) -> Result<i32, Error> {
    Err(Error::Demo(
        "the demo needs kube-sim, which is not merged yet".into(),
    ))
}
