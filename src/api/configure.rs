use crate::error::OrReport;
use crate::jsonb::Jsonb;
use crate::names;
use crate::privilege::{self, Privilege};
use pgrx::prelude::*;
use pgrx::JsonB;

/// `queen_configure(queue, options)`: semantics §3.4. Creates the queue if needed, changes only the
/// options named, and returns every option's effective value.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn queen_configure(queue: Option<&str>, options: default!(Option<Jsonb>, "'{}'")) -> JsonB {
    const F: &str = "queen_configure";
    let queue = names::check_name("queue", "argument \"queue\"", queue).or_report(F);
    // A NULL options object means "change nothing" (semantics §4). Options are read one level deep
    // from the binary jsonb: any valid jsonb argument is read, however deep or large.
    privilege::require(&[queue], Privilege::Configure).or_report(F);
    let patch = options.map_or_else(|| serde_json::json!({}), Jsonb::shallow);
    JsonB(crate::configure::configure(queue, &patch).or_report(F))
}
