//! `Jsonb`: a jsonb value handed through as the datum Postgres gave us.
//!
//! pgrx's `JsonB` converts every value to text and parses it into a `serde_json::Value`, and
//! back again on the way out. A broker moves payloads without looking at them, so payloads in
//! and out of queen stay datums: the pushed argument goes to the INSERT as is, and a popped
//! payload is copied out of SPI's memory and returned as is.

use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::{Datum, FromDatum, IntoDatum};
use pgrx::pg_sys;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use serde_json::Value;

/// A jsonb datum, valid for the current function call.
#[derive(Debug, Clone, Copy)]
pub struct Jsonb(pub pg_sys::Datum);

impl Jsonb {
    /// Parse into a `serde_json::Value` (for inputs queen must read, such as batch items).
    pub fn to_value(self) -> Value {
        let text = unsafe {
            let detoasted = pg_sys::pg_detoast_datum_packed(self.0.cast_mut_ptr());
            let cstr =
                pgrx::fcinfo::direct_function_call_as_datum(pg_sys::jsonb_out, &[Some(pg_sys::Datum::from(detoasted))])
                    .expect("queen: jsonb_out returns text");
            let s =
                std::ffi::CStr::from_ptr(cstr.cast_mut_ptr::<std::os::raw::c_char>()).to_string_lossy().into_owned();
            pg_sys::pfree(cstr.cast_mut_ptr());
            s
        };
        serde_json::from_str(&text).expect("queen: jsonb text is JSON")
    }
}

impl FromDatum for Jsonb {
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _: pg_sys::Oid) -> Option<Self> {
        if is_null {
            None
        } else {
            Some(Jsonb(datum))
        }
    }
}

impl IntoDatum for Jsonb {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(self.0)
    }
    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONBOID
    }
}

unsafe impl<'fcx> ArgAbi<'fcx> for Jsonb {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        unsafe { arg.unbox_arg_using_from_datum().unwrap_or_else(|| panic!("argument {index} must not be null")) }
    }
}

unsafe impl BoxRet for Jsonb {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        unsafe { fcinfo.return_raw_datum(self.0) }
    }
}

unsafe impl SqlTranslatable for Jsonb {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(Jsonb);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("jsonb"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> = Ok(ReturnsRef::One(SqlMappingRef::literal("jsonb")));
}
