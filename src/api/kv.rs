use crate::error::{OrReport, QueenError};
use crate::jsonb::Jsonb;
use pgrx::prelude::*;
use pgrx::JsonB;

/// `queen_kv(operations, required_raises)`: key/value operations in the caller's transaction,
/// in order (docs/api.md, "Key/value"); one result per operation, in order. A `required`
/// operation that does not apply raises 23514 (the transaction rolls back), or, with
/// `required_raises => false` (queen-gateway, which answers Queen's refusal itself), ends the
/// results there. `RETURNS SETOF jsonb`.
/// (Under queen's search_path without a SET clause: gucs::with_fixed_search_path.)
#[pg_extern(volatile, parallel_unsafe)]
fn queen_kv(operations: Option<Jsonb>, required_raises: default!(bool, true)) -> SetOfIterator<'static, JsonB> {
    const F: &str = "queen_kv";
    let results = crate::gucs::with_fixed_search_path(|| {
        let ops = operations.ok_or(QueenError::NullValue { argument: "operations" }).or_report(F);
        let ops = crate::kv::parse_all(&ops.to_text()).or_report(F);
        let outcome = crate::kv::run(&ops).or_report(F);
        if let (Some(i), true) = (outcome.failed_required, required_raises) {
            crate::kv::required_failed(i, &outcome.results[i]).report(F);
        }
        outcome.results
    });
    SetOfIterator::new(results.into_iter().map(JsonB))
}
