//! The attacks, one file per kind (the numbers are those of `bench/reliability.sh`):
//!
//! - [`flood`]: attack 1, and the pipelined callers of attacks 5 and 8e;
//! - [`upstream`]: attack 2, slow, stalled and absurd upstream POST bodies;
//! - [`oversize`]: attack 3, huge violation lists and huge results;
//! - [`replay`]: attack 4, replay, resumption and a batched POST for a reading client;
//! - [`validation`]: attack 5, ~1 MB params continuously from four clients;
//! - [`crowd`]: attacks 6 and 7, many connections and many vanished sessions;
//! - [`small`]: attack 8, the small ones.
//!
//! Each `attack_*` function returns the attack's JSON report (without the
//! canary, which `run` adds).

use serde_json::Value;

pub(crate) mod crowd;
pub(crate) mod flood;
pub(crate) mod oversize;
pub(crate) mod replay;
pub(crate) mod small;
pub(crate) mod upstream;
pub(crate) mod validation;

pub(crate) fn merge_into(report: &mut Value, extra: Value) {
    if let (Some(r), Value::Object(e)) = (report.as_object_mut(), extra) {
        for (k, v) in e {
            r.insert(k, v);
        }
    }
}
