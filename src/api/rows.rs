//! The result types of SPEC §3 (`queen.push_result`, `queen.message`, `queen.ack_result`,
//! created by sql/schema.sql) as Rust return types, so that the functions are declared
//! `RETURNS queen.push_result` and `RETURNS SETOF queen.push_result` as the SPEC writes them
//! (pgrx's `TableIterator` can only declare `RETURNS TABLE (...)`).
//!
//! A row is returned as a composite datum of the function's declared result type: the tuple
//! descriptor comes from the type cache (a hash lookup per row, no copy), the tuple is formed
//! from the fields in declaration order.

use crate::jsonb::Jsonb;
use pgrx::callconv::{BoxRet, FcInfo};
use pgrx::datum::{Datum, IntoDatum, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::Uuid;

/// Form a composite datum of the calling function's result type from `datums`.
unsafe fn composite<'fcx>(fcinfo: &mut FcInfo<'fcx>, datums: &[Option<pg_sys::Datum>]) -> Datum<'fcx> {
    unsafe {
        let raw = fcinfo.as_mut_ptr();
        let mut typid = pg_sys::get_fn_expr_rettype((*raw).flinfo);
        if typid == pg_sys::InvalidOid {
            typid = pg_sys::get_func_rettype((*(*raw).flinfo).fn_oid);
        }
        let tupdesc = pg_sys::lookup_rowtype_tupdesc(typid, -1);
        let mut values: Vec<pg_sys::Datum> = datums.iter().map(|d| d.unwrap_or(pg_sys::Datum::from(0))).collect();
        let mut nulls: Vec<bool> = datums.iter().map(Option::is_none).collect();
        assert_eq!(values.len(), (*tupdesc).natts as usize, "queen: result type has another shape");
        let tuple = pg_sys::heap_form_tuple(tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::DecrTupleDescRefCount(tupdesc);
        fcinfo.return_raw_datum(pg_sys::HeapTupleHeaderGetDatum((*tuple).t_data))
    }
}

macro_rules! result_row {
    ($(#[$doc:meta])* $name:ident = $sql:literal { $($field:ident: $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        pub struct $name {
            $(pub $field: $ty,)*
        }

        unsafe impl BoxRet for $name {
            unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
                let datums = [$(self.$field.into_datum(),)*];
                unsafe { composite(fcinfo, &datums) }
            }
        }

        unsafe impl SqlTranslatable for $name {
            const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!($name);
            const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
            const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> =
                Err(ArgumentError::NotValidAsArgument($sql));
            const RETURN_SQL: Result<ReturnsRef, ReturnsError> = Ok(ReturnsRef::One(SqlMappingRef::literal($sql)));
        }
    };
}

result_row!(
    /// `queen.push_result`.
    PushRow = "queen.push_result" {
        idx: i32,
        message_id: Uuid,
        transaction_id: String,
        queue: String,
        partition: String,
        partition_id: Uuid,
        status: &'static str,
    }
);

result_row!(
    /// `queen.message`.
    MessageRow = "queen.message" {
        message_id: Uuid,
        transaction_id: String,
        queue: String,
        partition: String,
        partition_id: Uuid,
        payload: Jsonb,
        trace_id: Option<Uuid>,
        created_at: TimestampWithTimeZone,
        consumer_group: Option<String>,
        lease_id: Option<Uuid>,
        lease_expires_at: Option<TimestampWithTimeZone>,
        attempt: i32,
    }
);

result_row!(
    /// `queen.ack_result`.
    AckRow = "queen.ack_result" {
        idx: i32,
        message_id: Option<Uuid>,
        success: bool,
        error: Option<String>,
        lease_released: bool,
        dead_lettered: bool,
    }
);
