//! Running the extension's SQL: named queries from `sql/queries/*.sql`, prepared once per
//! backend and kept (SPI_keepplan), then reused by every call.
//!
//! pgmq re-plans each call through dynamic `EXECUTE`; a kept plan skips parse, analysis and
//! planning. Postgres revalidates kept plans itself when the tables they use change (for
//! instance after `DROP EXTENSION queen; CREATE EXTENSION queen`).
//!
//! Every query names its tables with their schema (`queen.`), so neither `search_path` nor a
//! user's objects can change what a kept plan means, and every value is a bound parameter:
//! no SQL text is ever built from user input.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::PgOid;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiResult, SpiTupleTable};
use std::cell::RefCell;
use std::collections::HashMap;

/// A query of a `sql/queries/*.sql` file: the file's text, the name of its section, and the
/// types of its parameters ($1, $2, ...).
pub struct Query {
    pub file: &'static str,
    pub name: &'static str,
    pub args: &'static [PgOid],
}

thread_local! {
    // Boxed and never removed, so a plan's address is stable: the borrow of the map ends before
    // the plan runs, and a query that (through a trigger, say) calls back into queen cannot
    // find the map borrowed.
    static PLANS: RefCell<HashMap<(usize, &'static str), Box<OwnedPreparedStatement>>> =
        RefCell::new(HashMap::new());
}

/// The text of section `name` of a query file. Sections start with a line `-- name: <name>`
/// and run to the next such line.
pub fn section(file: &'static str, name: &str) -> &'static str {
    let marker = format!("-- name: {name}\n");
    let start = file
        .find(&marker)
        .unwrap_or_else(|| panic!("queen: query \"{name}\" is missing from its sql file"))
        + marker.len();
    let end = file[start..].find("-- name: ").map_or(file.len(), |i| start + i);
    file[start..end].trim()
}

impl Query {
    /// Execute the query with `args`, preparing and keeping its plan on first use in this
    /// backend. The result table lives as long as the SPI connection.
    pub fn execute<'conn>(
        &self,
        client: &mut SpiClient<'conn>,
        args: &[DatumWithOid<'_>],
    ) -> SpiResult<SpiTupleTable<'conn>> {
        let key = (self.file.as_ptr() as usize, self.name);
        let mut plan: Option<*const OwnedPreparedStatement> =
            PLANS.with(|p| p.borrow().get(&key).map(|b| &**b as *const _));
        if plan.is_none() {
            let kept = Box::new(client.prepare_mut(section(self.file, self.name), self.args)?.keep());
            plan = Some(&*kept as *const _);
            PLANS.with(|p| p.borrow_mut().insert(key, kept));
        }
        // SAFETY: the box behind the pointer lives in PLANS until the backend exits.
        let plan: &'static OwnedPreparedStatement = unsafe { &*plan.expect("prepared above") };
        client.update(plan, None, args)
    }
}

#[cfg(test)]
mod tests {
    use super::section;

    #[test]
    fn sections_are_found_by_name() {
        const FILE: &str = "-- header\n-- name: one\nSELECT 1;\n\n-- name: two\nSELECT\n  2;\n";
        assert_eq!(section(FILE, "one"), "SELECT 1;");
        assert_eq!(section(FILE, "two"), "SELECT\n  2;");
    }
}
