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

/// An element of a JSON array that queen reads field by field: an object (holding only the
/// fields read), or the JSON type of an element that is not one.
#[derive(Debug, Clone, PartialEq)]
pub enum Element {
    Object(serde_json::Map<String, Value>),
    Other(&'static str),
}

#[cfg(test)]
impl Element {
    pub fn of(v: &Value) -> Element {
        match v {
            Value::Object(m) => Element::Object(m.clone()),
            Value::Null => Element::Other("null"),
            Value::Bool(_) => Element::Other("boolean"),
            Value::Number(_) => Element::Other("number"),
            Value::String(_) => Element::Other("string"),
            Value::Array(_) => Element::Other("array"),
        }
    }
}

impl Jsonb {
    /// The elements of a JSON array read from the binary jsonb with Postgres' own lookups,
    /// each object holding only the fields named in `keys`: the fields queen reads of a batch
    /// (a push's items, an ack batch), so that payloads are never turned into text or parsed,
    /// and any valid jsonb is accepted as it is (SPEC §10: nesting beyond serde_json's
    /// recursion limit, numbers beyond f64). Err is the JSON type of an argument that is not an
    /// array.
    pub fn elements(self, keys: &[&str]) -> Result<Vec<Element>, &'static str> {
        unsafe {
            let root = self.root();
            let header = (*root).header;
            if header & pg_sys::JB_FARRAY == 0 || header & pg_sys::JB_FSCALAR != 0 {
                return Err(if header & pg_sys::JB_FOBJECT != 0 { "object" } else { "scalar" });
            }
            let n = header & pg_sys::JB_CMASK;
            let mut out = Vec::with_capacity(n as usize);
            for i in 0..n {
                let v = pg_sys::getIthJsonbValueFromContainer(root, i);
                out.push(match object_of(v) {
                    Some(obj) => {
                        let mut m = serde_json::Map::new();
                        for key in keys {
                            let mut res = std::mem::zeroed::<pg_sys::JsonbValue>();
                            let found = pg_sys::getKeyJsonValueFromContainer(
                                obj,
                                key.as_ptr() as *const std::os::raw::c_char,
                                key.len() as i32,
                                &mut res,
                            );
                            if !found.is_null() {
                                m.insert((*key).to_string(), scalar(&*found));
                            }
                        }
                        Element::Object(m)
                    }
                    None => Element::Other(kind_of(&*v)),
                });
            }
            Ok(out)
        }
    }

    /// The value one level deep: a scalar as it is; an object or array with its scalar members,
    /// and nested containers as empty ones (queen reads no deeper: `queen_configure`'s options).
    pub fn shallow(self) -> Value {
        unsafe {
            let root = self.root();
            let mut it = pg_sys::JsonbIteratorInit(root);
            let mut v = std::mem::zeroed::<pg_sys::JsonbValue>();
            let (mut obj, mut arr, mut key) = (serde_json::Map::new(), Vec::new(), String::new());
            let mut is_object = false;
            loop {
                match pg_sys::JsonbIteratorNext(&mut it, &mut v, true) {
                    pg_sys::JsonbIteratorToken::WJB_DONE => break,
                    pg_sys::JsonbIteratorToken::WJB_BEGIN_OBJECT => is_object = true,
                    pg_sys::JsonbIteratorToken::WJB_KEY => {
                        key = match scalar(&v) {
                            Value::String(k) => k,
                            other => other.to_string(),
                        }
                    }
                    pg_sys::JsonbIteratorToken::WJB_VALUE => {
                        obj.insert(std::mem::take(&mut key), scalar(&v));
                    }
                    pg_sys::JsonbIteratorToken::WJB_ELEM => arr.push(scalar(&v)),
                    _ => {}
                }
            }
            if is_object {
                Value::Object(obj)
            } else if (*root).header & pg_sys::JB_FSCALAR != 0 {
                arr.pop().unwrap_or(Value::Null)
            } else {
                Value::Array(arr)
            }
        }
    }

    /// The root container, detoasted.
    unsafe fn root(self) -> *mut pg_sys::JsonbContainer {
        unsafe {
            let j = pg_sys::pg_detoast_datum(self.0.cast_mut_ptr()) as *mut pg_sys::Jsonb;
            &mut (*j).root as *mut pg_sys::JsonbContainer
        }
    }
}

/// The container of `v` if it is an object.
unsafe fn object_of(v: *mut pg_sys::JsonbValue) -> Option<*mut pg_sys::JsonbContainer> {
    unsafe {
        if (*v).type_ != pg_sys::jbvType::jbvBinary {
            return None;
        }
        let c = (*v).val.binary.data;
        ((*c).header & pg_sys::JB_FOBJECT != 0).then_some(c)
    }
}

fn kind_of(v: &pg_sys::JsonbValue) -> &'static str {
    match v.type_ {
        pg_sys::jbvType::jbvNull => "null",
        pg_sys::jbvType::jbvString => "string",
        pg_sys::jbvType::jbvNumeric => "number",
        pg_sys::jbvType::jbvBool => "boolean",
        _ => unsafe {
            if (*v.val.binary.data).header & pg_sys::JB_FOBJECT != 0 {
                "object"
            } else {
                "array"
            }
        },
    }
}

/// A scalar jsonb value as JSON (objects and arrays as empty ones: queen reads no nested
/// value, only names its type in an error). Numbers keep their text (serde_json's
/// arbitrary_precision), so one beyond f64 is still a number.
unsafe fn scalar(v: &pg_sys::JsonbValue) -> Value {
    unsafe {
        match v.type_ {
            pg_sys::jbvType::jbvNull => Value::Null,
            pg_sys::jbvType::jbvBool => Value::Bool(v.val.boolean),
            pg_sys::jbvType::jbvString => {
                let bytes = std::slice::from_raw_parts(v.val.string.val as *const u8, v.val.string.len as usize);
                Value::String(String::from_utf8_lossy(bytes).into_owned())
            }
            pg_sys::jbvType::jbvNumeric => {
                let text = pgrx::fcinfo::direct_function_call::<&std::ffi::CStr>(
                    pg_sys::numeric_out,
                    &[Some(pg_sys::Datum::from(v.val.numeric))],
                )
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_default();
                serde_json::from_str(&text).unwrap_or(Value::Null)
            }
            _ if kind_of(v) == "object" => Value::Object(serde_json::Map::new()),
            _ => Value::Array(Vec::new()),
        }
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
