//! The result types of semantics §3 (`queen.push_result`, `queen.message`, `queen.ack_result`,
//! created by sql/schema.sql) as Rust return types, so that the functions are declared
//! `RETURNS queen.push_result` and `RETURNS SETOF queen.push_result` as docs/semantics.md writes them
//! (pgrx's `TableIterator` can only declare `RETURNS TABLE (...)`).
//!
//! A row is returned as a composite datum of the function's declared result type: the tuple
//! descriptor comes from the type cache (a hash lookup per row, no copy), the tuple is formed
//! from the fields in declaration order.

use pgrx::callconv::{BoxRet, FcInfo, RetAbi};
use pgrx::datum::{Datum, IntoDatum, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::Uuid;

/// Form a composite datum of the calling function's result type from `datums`.
///
/// # Safety
///
/// `fcinfo` must be the call info of the function now running, whose declared result type
/// (or set element type) is a composite type; `datums` must hold, in that type's attribute
/// order, a valid datum of each attribute's type (None for NULL); and the datum returned must
/// be returned as that call's result.
unsafe fn composite<'fcx>(fcinfo: &mut FcInfo<'fcx>, datums: &[Option<pg_sys::Datum>]) -> Datum<'fcx> {
    // SAFETY: `raw` and its `flinfo` are the live call info of the running function (caller).
    // Its result type is a composite (caller), so lookup_rowtype_tupdesc returns a pinned
    // descriptor, released once the tuple is formed; the arrays have `natts` entries (checked
    // before they are read), and heap_form_tuple copies the datums, typed as the descriptor
    // says (caller), into one tuple palloc'd in the call's memory context, which outlives the
    // return. HeapTupleHeaderGetDatum turns that tuple into a composite datum.
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

/// A result row put into a set-returning function's tuplestore.
///
/// # Safety
///
/// Implemented only for rows whose fields are, in order, the attributes of the composite type
/// the function is declared to return a set of.
pub unsafe trait ResultRow {
    /// Put the row into `store`, of descriptor `desc`; its by-reference values are made in
    /// `scratch` (reused from row to row: tuplestore_putvalues copies them).
    ///
    /// # Safety
    ///
    /// `store` and `desc` are those InitMaterializedSRF made for the running function, which
    /// returns a set of this row's type.
    unsafe fn put(self, store: *mut pg_sys::Tuplestorestate, desc: pg_sys::TupleDesc, scratch: &mut Scratch);
}

/// Memory for one row's by-reference values (a uuid's bytes, a text's varlena), in 8-byte
/// words so that each value starts aligned as a datum must. Filled after `reserve` made room
/// for the whole row, so that no value moves while the row's datums point at it.
#[derive(Default)]
pub struct Scratch {
    words: Vec<u64>,
}

impl Scratch {
    /// Room for values of `bytes` in all (each rounded up to a word), the row before dropped.
    fn reserve(&mut self, bytes: usize) {
        self.words.clear();
        self.words.reserve(bytes.div_ceil(8));
    }

    /// `header` (a varlena's, or none) then `bytes`, copied into the room made by `reserve`;
    /// a datum pointing at them.
    fn place(&mut self, header: Option<u32>, bytes: &[u8]) -> pg_sys::Datum {
        let h = header.map_or(0, |_| 4);
        let n = (h + bytes.len()).div_ceil(8);
        let start = self.words.len();
        assert!(start + n <= self.words.capacity(), "queen: a result row larger than the room made for it");
        self.words.resize(start + n, 0);
        // SAFETY: the n words just added (within the capacity reserved: nothing moved) hold
        // h + bytes.len() bytes; the datum points at their first, 8-byte aligned.
        unsafe {
            let at = self.words.as_mut_ptr().add(start) as *mut u8;
            if let Some(header) = header {
                std::ptr::copy_nonoverlapping(header.to_ne_bytes().as_ptr(), at, 4);
            }
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at.add(h), bytes.len());
            pg_sys::Datum::from(at)
        }
    }
}

/// A field of a result row as a datum, by-reference values made in a [`Scratch`] (no palloc,
/// no call into PostgreSQL): what a tenth of a pop 100 + `queen_ack_lease` cycle went to, a
/// uuid or a text at a time (issue 23).
pub trait Field {
    /// The bytes this field takes in a scratch (0 for a by-value or NULL one).
    fn room(&self) -> usize {
        0
    }
    fn datum(&self, scratch: &mut Scratch) -> Option<pg_sys::Datum>;
}

impl Field for Uuid {
    fn room(&self) -> usize {
        16
    }
    fn datum(&self, scratch: &mut Scratch) -> Option<pg_sys::Datum> {
        Some(scratch.place(None, self.as_bytes()))
    }
}

impl Field for str {
    fn room(&self) -> usize {
        (4 + self.len()).div_ceil(8) * 8
    }
    fn datum(&self, scratch: &mut Scratch) -> Option<pg_sys::Datum> {
        // A text: a 4-byte varlena header (SET_VARSIZE's: the length, header included, two
        // bits up on a little-endian machine) and the bytes, as cstring_to_text_with_len makes
        // one.
        let len = u32::try_from(4 + self.len()).expect("queen: a result text under 1 GB");
        #[cfg(target_endian = "little")]
        let header = len << 2;
        #[cfg(target_endian = "big")]
        let header = len & 0x3FFF_FFFF;
        Some(scratch.place(Some(header), self.as_bytes()))
    }
}

impl Field for String {
    fn room(&self) -> usize {
        self.as_str().room()
    }
    fn datum(&self, scratch: &mut Scratch) -> Option<pg_sys::Datum> {
        self.as_str().datum(scratch)
    }
}

impl Field for &str {
    fn room(&self) -> usize {
        (**self).room()
    }
    fn datum(&self, scratch: &mut Scratch) -> Option<pg_sys::Datum> {
        (**self).datum(scratch)
    }
}

impl<T: Field> Field for Option<T> {
    fn room(&self) -> usize {
        self.as_ref().map_or(0, Field::room)
    }
    fn datum(&self, scratch: &mut Scratch) -> Option<pg_sys::Datum> {
        self.as_ref().and_then(|v| v.datum(scratch))
    }
}

/// By-value fields (and the rare by-reference ones a scratch does not make) as IntoDatum makes
/// them.
macro_rules! field_by_into_datum {
    ($($ty:ty),*) => {$(
        impl Field for $ty {
            fn datum(&self, _: &mut Scratch) -> Option<pg_sys::Datum> {
                self.clone().into_datum()
            }
        }
    )*};
}
field_by_into_datum!(i32, i64, bool, TimestampWithTimeZone, crate::jsonb::Jsonb);

impl Field for pgrx::JsonB {
    fn datum(&self, _: &mut Scratch) -> Option<pg_sys::Datum> {
        pgrx::JsonB(self.0.clone()).into_datum()
    }
}

/// Put one row of `datums` (None for NULL) into `store`.
///
/// # Safety
///
/// `desc` describes `store`'s rows, which have `N` attributes of the datums' types.
unsafe fn put_values<const N: usize>(
    store: *mut pg_sys::Tuplestorestate,
    desc: pg_sys::TupleDesc,
    datums: [Option<pg_sys::Datum>; N],
) {
    let mut values: [pg_sys::Datum; N] = datums.map(|d| d.unwrap_or(pg_sys::Datum::from(0)));
    let mut nulls: [bool; N] = datums.map(|d| d.is_none());
    // SAFETY: the caller's descriptor and store; tuplestore_putvalues copies the values into
    // a tuple of the store's memory.
    unsafe {
        assert_eq!(N, (*desc).natts as usize, "queen: result type has another shape");
        pg_sys::tuplestore_putvalues(store, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
    }
}

/// The rows of a set-returning function, handed to PostgreSQL all at once (materialize mode:
/// the function fills the tuplestore the executor reads) rather than one call per row, as
/// pgrx's `SetOfIterator` does. Each row went through a call of the function, a composite
/// datum formed and taken apart again: a tenth of a pop 100 + `queen_ack_lease` cycle
/// (issue 23). Named as pgrx's, whose macro knows a function returns a set by that name.
pub struct SetOfIterator<'a, T> {
    rows: Vec<T>,
    _lifetime: std::marker::PhantomData<&'a ()>,
}

impl<T> SetOfIterator<'_, T> {
    pub fn new(rows: impl IntoIterator<Item = T>) -> Self {
        SetOfIterator { rows: rows.into_iter().collect(), _lifetime: std::marker::PhantomData }
    }
}

// SAFETY: box_ret_in_fcinfo returns the set in materialize mode, as the executor reads a
// set-returning function in FROM or a select list (both allow it); nothing is kept between calls.
unsafe impl<T: ResultRow> RetAbi for SetOfIterator<'_, T> {
    type Item = T;
    type Ret = Self;

    fn to_ret(self) -> Self {
        self
    }

    unsafe fn box_ret_in_fcinfo(fcinfo: pg_sys::FunctionCallInfo, ret: Self) -> pg_sys::Datum {
        // SAFETY: the running function's call info, declared to return a set of T's type
        // (ResultRow's contract). InitMaterializedSRF raises an SQL error where materialize
        // mode is not allowed, and makes the store and the descriptor of the declared result
        // type in the query's memory.
        unsafe {
            pg_sys::InitMaterializedSRF(fcinfo, 0);
            let rsinfo = (*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo;
            let (store, desc) = ((*rsinfo).setResult, (*rsinfo).setDesc);
            let mut scratch = Scratch::default();
            for row in ret.rows {
                row.put(store, desc, &mut scratch);
            }
        }
        pg_sys::Datum::from(0)
    }

    unsafe fn move_into_fcinfo_fcx(self, _fcinfo: pg_sys::FunctionCallInfo) {}

    unsafe fn fill_fcinfo_fcx(&self, _fcinfo: pg_sys::FunctionCallInfo) {}
}

/// Make a struct a result row: `result_row!(Type = "queen.x" { field, ... })` for a struct the
/// rules already return (pop's, push's and ack's results are returned as they are, never copied
/// into a second struct), or `result_row!(struct Name = "queen.x" { field: Type, ... })` to
/// declare one here. The fields are listed in the SQL type's attribute order; a field written
/// `status.as_str()` is converted by that method.
macro_rules! result_row {
    ($(#[$doc:meta])* struct $name:ident = $sql:literal { $($field:ident: $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        pub struct $name {
            $(pub $field: $ty,)*
        }
        result_row!($name = $sql { $($field),* });
    };
    ($name:ty = $sql:literal { $($field:ident $(. $conv:ident ())?),* $(,)? }) => {
        // SAFETY: a function returning this row is declared to return `$sql` (RETURN_SQL
        // below), a composite type whose attributes are the fields, in order and with the
        // SQL types of their Rust types (sql/schema.sql); box_into forms a tuple of it.
        unsafe impl BoxRet for $name {
            /// # Safety
            ///
            /// `fcinfo` must be the call info of the running function, declared to return
            /// this row's composite type (or a set of it), and the datum must be returned as
            /// its result.
            unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
                let datums = [$(self.$field $(.$conv())?.into_datum(),)*];
                // SAFETY: the caller's fcinfo is of a function returning `$sql`, whose
                // attributes the fields give in order, each as a datum of its SQL type.
                unsafe { composite(fcinfo, &datums) }
            }
        }

        // SAFETY: as BoxRet's: the fields in `$sql`'s attribute order, each a datum of its
        // SQL type.
        unsafe impl ResultRow for $name {
            unsafe fn put(self, store: *mut pg_sys::Tuplestorestate, desc: pg_sys::TupleDesc, scratch: &mut Scratch) {
                scratch.reserve(0 $(+ Field::room(&self.$field $(.$conv())?))*);
                let datums = [$(Field::datum(&self.$field $(.$conv())?, scratch),)*];
                // SAFETY: the caller's store and descriptor are of `$sql` (ResultRow's
                // contract); the datums point into `self` and `scratch`, both alive here.
                unsafe { put_values(store, desc, datums) }
            }
        }

        // SAFETY: the type is never an argument (ARGUMENT_SQL is an error), and as a result
        // it is declared as `$sql`, the composite type box_into forms a tuple of.
        unsafe impl SqlTranslatable for $name {
            const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!($name);
            const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
            const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> =
                Err(ArgumentError::NotValidAsArgument($sql));
            const RETURN_SQL: Result<ReturnsRef, ReturnsError> = Ok(ReturnsRef::One(SqlMappingRef::literal($sql)));
        }
    };
}

// `queen.push_result`: push's results as they are.
result_row!(crate::push::PushResult = "queen.push_result" {
    idx, message_id, transaction_id, queue, partition, partition_id, status.as_str()
});

// `queen.message`: pop's deliveries as they are.
result_row!(crate::pop::Popped = "queen.message" {
    message_id, transaction_id, queue, partition, partition_id, payload, trace_id, created_at,
    consumer_group, lease_id, lease_expires_at, attempt,
});

// `queen.ack_result`: ack's results as they are.
result_row!(crate::ack::AckResult = "queen.ack_result" {
    idx, message_id, success, error, lease_released, dead_lettered
});

result_row!(
    /// `queen.timer_result`.
    struct TimerResultRow = "queen.timer_result" {
        queue: String,
        timer_key: String,
        partition: String,
        message_id: Option<Uuid>,
        transaction_id: String,
        deliver_at: TimestampWithTimeZone,
        status: &'static str,
    }
);

result_row!(
    /// `queen.timer`.
    struct TimerRow = "queen.timer" {
        queue: String,
        timer_key: String,
        partition: String,
        payload: crate::jsonb::Jsonb,
        transaction_id: String,
        message_id: Option<Uuid>,
        trace_id: Option<Uuid>,
        deliver_at: TimestampWithTimeZone,
        scheduled_at: TimestampWithTimeZone,
        attempts: i32,
        last_error: Option<String>,
    }
);
