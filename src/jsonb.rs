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
pub enum Element<'a> {
    Object(Fields<'a>),
    Other(&'static str),
}

/// The fields of an object that queen reads, each named by its key in the list asked for, in
/// the object's order. Strings are borrowed from the jsonb they were read in.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Fields<'a>(pub Vec<(&'static str, Field<'a>)>);

impl<'a> Fields<'a> {
    /// The field named `key`, if the object has it.
    pub fn get(&self, key: &str) -> Option<&Field<'a>> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// A field's value: a scalar as it is (a number as its text, so that one beyond f64 stays a
/// number), a container as its kind only (queen reads no deeper, but names its type in an
/// error).
#[derive(Debug, Clone, PartialEq)]
pub enum Field<'a> {
    Null,
    Bool(bool),
    Str(std::borrow::Cow<'a, str>),
    Number(String),
    Object,
    Array,
}

impl Field<'_> {
    /// The value as JSON text (a container as an empty one), for an error's message.
    pub fn json(&self) -> String {
        match self {
            Field::Null => "null".into(),
            Field::Bool(b) => b.to_string(),
            Field::Str(s) => Value::String(s.to_string()).to_string(),
            Field::Number(n) => n.clone(),
            Field::Object => "{}".into(),
            Field::Array => "[]".into(),
        }
    }

    /// The JSON value (a container as an empty one).
    pub fn value(&self) -> Value {
        match self {
            Field::Null => Value::Null,
            Field::Bool(b) => Value::Bool(*b),
            Field::Str(s) => Value::String(s.to_string()),
            Field::Number(n) => serde_json::from_str(n).unwrap_or(Value::Null),
            Field::Object => Value::Object(serde_json::Map::new()),
            Field::Array => Value::Array(Vec::new()),
        }
    }

    #[cfg(any(test, feature = "pg_test"))]
    pub fn of(v: &Value) -> Field<'_> {
        match v {
            Value::Null => Field::Null,
            Value::Bool(b) => Field::Bool(*b),
            Value::String(s) => Field::Str(std::borrow::Cow::Borrowed(s)),
            Value::Number(n) => Field::Number(n.to_string()),
            Value::Object(_) => Field::Object,
            Value::Array(_) => Field::Array,
        }
    }
}

#[cfg(any(test, feature = "pg_test"))]
impl Element<'_> {
    /// The element `elements(keys)` reads from `v`.
    pub fn of<'a>(v: &'a Value, keys: &[&'static str]) -> Element<'a> {
        match v {
            Value::Object(m) => {
                let mut f: Vec<(&'static str, Field<'a>)> =
                    m.iter().filter_map(|(k, v)| keys.iter().find(|n| **n == k).map(|n| (*n, Field::of(v)))).collect();
                // In jsonb's order of keys: by length, then bytes.
                f.sort_by(|a, b| a.0.len().cmp(&b.0.len()).then_with(|| a.0.cmp(b.0)));
                Element::Object(Fields(f))
            }
            Value::Null => Element::Other("null"),
            Value::Bool(_) => Element::Other("boolean"),
            Value::Number(_) => Element::Other("number"),
            Value::String(_) => Element::Other("string"),
            Value::Array(_) => Element::Other("array"),
        }
    }
}

impl Jsonb {
    /// The elements of a JSON array read from the binary jsonb, each object holding only the
    /// fields named in `keys`: the fields queen reads of a batch (a push's items, an ack
    /// batch), so that payloads are never turned into text or parsed, and any valid jsonb is
    /// accepted as it is (semantics §10: nesting beyond serde_json's recursion limit, numbers
    /// beyond f64). Err is the JSON type of an argument that is not an array.
    ///
    /// The array and each object are walked in place, entry by entry ([`Container`]): a
    /// lookup of each key through PostgreSQL (`getKeyJsonValueFromContainer`, a call and a
    /// binary search a key) was 12 k instructions an element of an ack batch, 8% of a pop
    /// 100 + jsonb ack cycle (issue 23). Debug builds read every batch both ways and panic
    /// when the two differ.
    pub fn elements<'a>(&'a self, keys: &[&'static str]) -> Result<Vec<Element<'a>>, &'static str> {
        // SAFETY: `self.0` is a jsonb datum valid for this call (a Jsonb is only made by
        // `FromDatum` from a jsonb argument, or by `Row::transfer` of a jsonb column into the
        // call's memory), so `root` is a live container, which `Container` reads within.
        let out = unsafe {
            let root = Container(self.root());
            if !root.is_array() {
                return Err(if root.is_object() { "object" } else { "scalar" });
            }
            let n = root.count();
            let mut out = Vec::with_capacity(n);
            root.walk(n, |c| {
                out.push(match c.kind() {
                    "object" => Element::Object(c.container().fields(keys)),
                    kind => Element::Other(kind),
                });
            });
            out
        };
        if cfg!(debug_assertions) {
            assert_eq!(Ok(&out), self.elements_by_lookup(keys).as_ref(), "queen: a batch read in place otherwise");
        }
        Ok(out)
    }

    /// `elements` through PostgreSQL's own lookups: what debug builds check the walk by.
    fn elements_by_lookup(&self, keys: &[&'static str]) -> Result<Vec<Element<'_>>, &'static str> {
        // SAFETY: as in `elements`. The root is an array (checked first), and `i` stays below
        // its element count (JB_CMASK), so getIthJsonbValueFromContainer returns a non-null
        // palloc'd value; an object's container is read with key pointers and lengths (no NUL
        // needed) into the zeroed `res`, and `found` is non-null only when it points at a
        // filled value. Strings and numerics point into the live container.
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
                        let mut m = Vec::new();
                        for key in keys {
                            let mut res = std::mem::zeroed::<pg_sys::JsonbValue>();
                            if let Some(found) = lookup(obj, key, &mut res) {
                                m.push((*key, field(&*found)));
                            }
                        }
                        // (In the object's order, as the walk reads them: keys sort by length,
                        // then bytes.)
                        m.sort_by(|a, b| a.0.len().cmp(&b.0.len()).then_with(|| a.0.cmp(b.0)));
                        Element::Object(Fields(m))
                    }
                    None => Element::Other(kind_of(&*v)),
                });
            }
            Ok(out)
        }
    }

    /// The value of `key` in each element of an array, read in place: None where the element
    /// is not an object or has no such key (and an empty list for a value that is not an
    /// array). Each [`Member`] points into this datum, valid as long as it is.
    ///
    /// A batch push's payloads: each is copied out of the items argument once, as `->` would
    /// copy it ([`Member::to_jsonb`]), instead of a statement evaluating `$7 -> idx ->
    /// 'payload'` a row (issue 23). Debug builds compare each with `->`'s own.
    pub fn values_of(self, key: &str) -> Vec<Option<Member>> {
        // SAFETY: as in `elements`: a live container, walked within its bounds; an object
        // child's keys are strings, compared by their bytes.
        unsafe {
            let root = Container(self.root());
            if !root.is_array() {
                return Vec::new();
            }
            let n = root.count();
            let mut out = Vec::with_capacity(n);
            root.walk(n, |c| {
                out.push(match c.kind() {
                    "object" => c.container().value_of(key),
                    _ => None,
                });
            });
            if cfg!(debug_assertions) {
                for (i, m) in out.iter().enumerate() {
                    let by_lookup = by_operator(root.0, i as u32, key);
                    let ours = m.as_ref().map(|m| m.to_jsonb());
                    assert_eq!(
                        ours.map(|j| j.bytes().to_vec()),
                        by_lookup.map(|j| j.bytes().to_vec()),
                        "queen: element {i}'s {key} read in place otherwise"
                    );
                }
            }
            out
        }
    }

    /// The bytes of the datum, its varlena header among them.
    ///
    /// # Safety
    ///
    /// A plain (4-byte header, not toasted) jsonb datum, live.
    unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: the caller's.
        unsafe {
            let p = self.0.cast_mut_ptr::<u8>();
            std::slice::from_raw_parts(p, pgrx::varsize(p as *const pg_sys::varlena))
        }
    }

    /// JSON null as a jsonb datum of its own (palloc'd in the current memory context).
    pub fn null() -> Jsonb {
        scalar_jsonb(pg_sys::JENTRY_ISNULL, &[])
    }

    /// The value one level deep: a scalar as it is; an object or array with its scalar members,
    /// and nested containers as empty ones (queen reads no deeper: `queen_configure`'s options).
    pub fn shallow(self) -> Value {
        // SAFETY: as in `elements`, `root` is a live jsonb container for this call. The
        // iterator walks it with skipNested, so every value it yields is a scalar or a
        // jbvBinary pointing into that container, which is what `scalar` reads.
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

    /// Its size in bytes, stored form, uncompressed (what a bound on a stored value counts).
    pub fn size(self) -> usize {
        // SAFETY: `self.0` is a live varlena datum (see `elements`); toast_raw_datum_size reads
        // its header (and a TOAST pointer's, without fetching the value).
        unsafe { pg_sys::toast_raw_datum_size(self.0) }
    }

    /// The value as JSON text (Postgres's own output of it).
    pub fn to_text(self) -> String {
        // SAFETY: as in `elements`, `root` is a live jsonb container for this call;
        // JsonbToCString with no StringInfo allocates one in the current memory context and
        // returns its NUL-terminated data, which is copied out before it can be freed.
        unsafe {
            let root = self.root();
            let c = pg_sys::JsonbToCString(std::ptr::null_mut(), root, 0);
            std::ffi::CStr::from_ptr(c).to_string_lossy().into_owned()
        }
    }

    /// The root container, detoasted.
    ///
    /// # Safety
    ///
    /// `self.0` must be a non-null jsonb datum that is still valid (not freed, its memory
    /// context not reset). The container returned lives as long as that datum, or, when it was
    /// toasted or had a short header, in a copy in the current memory context.
    unsafe fn root(self) -> *mut pg_sys::JsonbContainer {
        // SAFETY: the caller gives a valid jsonb varlena; pg_detoast_datum returns it, or a
        // palloc'd plain 4-byte-header copy, either of which is an aligned `Jsonb` whose
        // `root` is its container.
        unsafe {
            let j = pg_sys::pg_detoast_datum(self.0.cast_mut_ptr()) as *mut pg_sys::Jsonb;
            &mut (*j).root as *mut pg_sys::JsonbContainer
        }
    }
}

/// A jsonb container read in place, as jsonb.h lays it out (the on-disk format, kept across
/// PostgreSQL versions for pg_upgrade): a header (JB_CMASK the count, the JB_F* flags), a
/// JEntry per child (an object's keys first, then its values), then the children's data. A
/// JEntry holds its child's type and either its length or, every JB_OFFSET_STRIDE children,
/// its end offset (JENTRY_HAS_OFF); numerics and containers start INTALIGNed.
struct Container(*mut pg_sys::JsonbContainer);

impl Container {
    /// # Safety (every method)
    ///
    /// The container must be live and valid jsonb (read from a detoasted datum).
    unsafe fn header(&self) -> u32 {
        // SAFETY: a live container (the caller's).
        unsafe { (*self.0).header }
    }

    unsafe fn count(&self) -> usize {
        // SAFETY: as `header`.
        unsafe { (self.header() & pg_sys::JB_CMASK) as usize }
    }

    unsafe fn is_array(&self) -> bool {
        // SAFETY: as `header`.
        unsafe { self.header() & pg_sys::JB_FARRAY != 0 && self.header() & pg_sys::JB_FSCALAR == 0 }
    }

    unsafe fn is_object(&self) -> bool {
        // SAFETY: as `header`.
        unsafe { self.header() & pg_sys::JB_FOBJECT != 0 }
    }

    /// Each of the first `n` children in order (n: the count for an array, twice it for an
    /// object).
    unsafe fn walk(&self, n: usize, mut each: impl FnMut(Child)) {
        // SAFETY: a valid container has n JEntries (callers pass the count, or twice it for an
        // object), followed by the data; each child's end is the sum of the lengths up to it,
        // or the end offset a JEntry with JENTRY_HAS_OFF gives (getJsonbOffset's and
        // getJsonbLength's rule), so every child lies within the container's data.
        unsafe {
            let entries = (*self.0).children.as_ptr();
            let data = entries.add(n) as *const u8;
            let mut off = 0usize;
            for i in 0..n {
                let e = *entries.add(i);
                let field = (e & pg_sys::JENTRY_OFFLENMASK) as usize;
                let len = if e & pg_sys::JENTRY_HAS_OFF != 0 { field - off } else { field };
                each(Child { i, e, data, off, len });
                off += len;
            }
        }
    }

    /// An object's fields named in `keys` (each once: an object's keys are unique), as
    /// `field` reads a value.
    unsafe fn fields<'a>(&self, keys: &[&'static str]) -> Fields<'a> {
        let mut m = Vec::with_capacity(keys.len().min(self.count()));
        // SAFETY: the caller's (a live object).
        unsafe { self.each_named(keys, |name, c| m.push((name, c.field()))) };
        Fields(m)
    }

    /// The value of `key` in an object.
    ///
    /// # Safety
    ///
    /// As every method: a live object.
    unsafe fn value_of(&self, key: &str) -> Option<Member> {
        let mut found = None;
        // SAFETY: the caller's (a live object).
        unsafe { self.each_named(&[key], |_, c| found = Some(c.member())) };
        found
    }

    /// `each` of the values of an object whose keys are among `keys`, in the object's order,
    /// with the name matched.
    ///
    /// # Safety
    ///
    /// As every method: a live object.
    unsafe fn each_named<'k>(&self, keys: &[&'k str], mut each: impl FnMut(&'k str, &Child)) {
        // SAFETY: an object of `count` pairs: keys 0..count (strings), then values
        // count..2 * count, in the same order.
        unsafe {
            let count = self.count();
            let mut wanted: Vec<(usize, &'k str)> = Vec::with_capacity(keys.len().min(count));
            self.walk(2 * count, |c| {
                if c.i < count {
                    if let Some(name) = keys.iter().find(|n| n.as_bytes() == c.bytes()) {
                        wanted.push((c.i, name));
                    }
                } else if let Some(&(_, name)) = wanted.iter().find(|(k, _)| *k == c.i - count) {
                    each(name, &c);
                }
            });
        }
    }
}

/// A value inside a live jsonb datum ([`Jsonb::values_of`]): its JEntry's type and its data
/// (a numeric's or a container's past its alignment padding).
#[derive(Debug, Clone, Copy)]
pub struct Member {
    kind: u32,
    data: *const u8,
    len: usize,
}

impl Member {
    /// The value as a jsonb datum of its own, palloc'd in the current memory context, as `->`
    /// makes it (JsonbValueToJsonb): a container's bytes copied under a varlena header (its
    /// children's padding stays right: a container starts INTALIGNed in both); a scalar as
    /// the one-element array jsonb stores a scalar as.
    pub fn to_jsonb(self) -> Jsonb {
        // SAFETY: `data` and `len` lie within the live datum `values_of` read.
        let bytes = unsafe { std::slice::from_raw_parts(self.data, self.len) };
        if self.kind == pg_sys::JENTRY_ISCONTAINER {
            // SAFETY: a fresh allocation of header + bytes, int-aligned (palloc MAXALIGNs).
            unsafe {
                let size = pg_sys::VARHDRSZ + bytes.len();
                let p = pg_sys::palloc(size) as *mut u8;
                set_varsize(p, size);
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(pg_sys::VARHDRSZ), bytes.len());
                Jsonb(pg_sys::Datum::from(p))
            }
        } else {
            scalar_jsonb(self.kind, bytes)
        }
    }
}

/// A raw scalar jsonb, as convertToJsonb lays one out: a header (one child, JB_FARRAY |
/// JB_FSCALAR), the child's JEntry (its type, and as child 0 of a stride its end offset,
/// JENTRY_HAS_OFF), then its data (a numeric needs no padding: it starts at byte 12).
fn scalar_jsonb(kind: u32, data: &[u8]) -> Jsonb {
    let size = pg_sys::VARHDRSZ + 8 + data.len();
    // SAFETY: a fresh allocation of `size` bytes, written whole.
    unsafe {
        let p = pg_sys::palloc(size) as *mut u8;
        set_varsize(p, size);
        let header: u32 = 1 | pg_sys::JB_FARRAY | pg_sys::JB_FSCALAR;
        let entry: u32 = kind | data.len() as u32 | pg_sys::JENTRY_HAS_OFF;
        std::ptr::write_unaligned(p.add(4) as *mut u32, header);
        std::ptr::write_unaligned(p.add(8) as *mut u32, entry);
        std::ptr::copy_nonoverlapping(data.as_ptr(), p.add(12), data.len());
        Jsonb(pg_sys::Datum::from(p))
    }
}

/// SET_VARSIZE: a 4-byte varlena header of `size` bytes.
///
/// # Safety
///
/// `p` points at 4 writable, int-aligned bytes.
unsafe fn set_varsize(p: *mut u8, size: usize) {
    // SAFETY: the caller's.
    unsafe { pgrx::set_varsize_4b(p as *mut pg_sys::varlena, size as i32) }
}

/// `element -> key` through PostgreSQL, as the statement computed a payload: what debug
/// builds check `values_of` by. None when the element is not an object or lacks the key.
///
/// # Safety
///
/// `root` a live array container, `i` below its count.
unsafe fn by_operator(root: *mut pg_sys::JsonbContainer, i: u32, key: &str) -> Option<Jsonb> {
    // SAFETY: as `elements_by_lookup`.
    unsafe {
        let v = pg_sys::getIthJsonbValueFromContainer(root, i);
        let obj = object_of(v)?;
        let mut res = std::mem::zeroed::<pg_sys::JsonbValue>();
        let found = lookup(obj, key, &mut res)?;
        Some(Jsonb(pg_sys::Datum::from(pg_sys::JsonbValueToJsonb(found))))
    }
}

/// The value of `key` in the object `obj`, through PostgreSQL's lookup, filled into `res`.
///
/// # Safety
///
/// `obj` a live object container; the key is read by pointer and length (no NUL needed).
unsafe fn lookup(
    obj: *mut pg_sys::JsonbContainer,
    key: &str,
    res: &mut pg_sys::JsonbValue,
) -> Option<*mut pg_sys::JsonbValue> {
    // SAFETY: the caller's; `found` is non-null only when it points at `res`, filled.
    unsafe {
        let found = pg_sys::getKeyJsonValueFromContainer(
            obj,
            key.as_ptr() as *const std::os::raw::c_char,
            key.len() as i32,
            res,
        );
        (!found.is_null()).then_some(found)
    }
}

/// A child of a [`Container`] being walked: its index, JEntry, and where its data lies (the
/// container's data, the offset into it and the length).
struct Child {
    i: usize,
    e: u32,
    data: *const u8,
    off: usize,
    len: usize,
}

impl Child {
    /// Its bytes (a string's).
    unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: within the live container's data (`walk`).
        unsafe { std::slice::from_raw_parts(self.data.add(self.off), self.len) }
    }

    /// Where a numeric's or a container's data starts: INTALIGN of its offset, as
    /// fillJsonbValue reads it.
    unsafe fn aligned(&self) -> *const u8 {
        // SAFETY: within the live container's data (`walk`): the padding is part of the child.
        unsafe { self.data.add(self.off + self.padding()) }
    }

    /// The bytes of padding before a numeric's or a container's data.
    fn padding(&self) -> usize {
        ((self.off + 3) & !3) - self.off
    }

    /// Its JSON type, as `kind_of` names it.
    unsafe fn kind(&self) -> &'static str {
        // SAFETY: a container child's data is a container header (`aligned`).
        unsafe {
            match self.e & pg_sys::JENTRY_TYPEMASK {
                pg_sys::JENTRY_ISSTRING => "string",
                pg_sys::JENTRY_ISNUMERIC => "number",
                pg_sys::JENTRY_ISNULL => "null",
                pg_sys::JENTRY_ISCONTAINER => {
                    if self.container().is_object() {
                        "object"
                    } else {
                        "array"
                    }
                }
                _ => "boolean",
            }
        }
    }

    unsafe fn container(&self) -> Container {
        // SAFETY: as `aligned`, for a child of type JENTRY_ISCONTAINER.
        unsafe { Container(self.aligned() as *mut pg_sys::JsonbContainer) }
    }

    /// It as a [`Member`]: a numeric's or a container's data past its padding.
    unsafe fn member(&self) -> Member {
        let kind = self.e & pg_sys::JENTRY_TYPEMASK;
        match kind {
            pg_sys::JENTRY_ISNUMERIC | pg_sys::JENTRY_ISCONTAINER => {
                // SAFETY: as `aligned`.
                Member { kind, data: unsafe { self.aligned() }, len: self.len - self.padding() }
            }
            // SAFETY: as `bytes` (empty for a boolean or null).
            _ => Member { kind, data: unsafe { self.data.add(self.off) }, len: self.len },
        }
    }

    /// Its value, as `field` reads it.
    unsafe fn field<'a>(&self) -> Field<'a> {
        // SAFETY: the JEntry's type says what the data is: a string's bytes, a numeric
        // (INTALIGNed, as fillJsonbValue hands it over), a container header.
        unsafe {
            match self.e & pg_sys::JENTRY_TYPEMASK {
                pg_sys::JENTRY_ISNULL => Field::Null,
                pg_sys::JENTRY_ISBOOL_FALSE => Field::Bool(false),
                pg_sys::JENTRY_ISBOOL_TRUE => Field::Bool(true),
                pg_sys::JENTRY_ISSTRING => Field::Str(text(self.bytes())),
                pg_sys::JENTRY_ISNUMERIC => Field::Number(numeric_text(self.aligned() as pg_sys::Numeric)),
                _ if self.container().is_object() => Field::Object,
                _ => Field::Array,
            }
        }
    }
}

/// A jsonb string's bytes as text: borrowed when they are UTF-8 (always, on a UTF-8 server).
///
/// # Safety
///
/// The bytes stay valid for `'a` (a live container's).
unsafe fn text<'a>(bytes: &[u8]) -> std::borrow::Cow<'a, str> {
    // SAFETY: the caller's: the bytes outlive 'a.
    let bytes: &'a [u8] = unsafe { std::slice::from_raw_parts(bytes.as_ptr(), bytes.len()) };
    // (from_utf8 first: quicker than from_utf8_lossy's chunks where the text is valid.)
    match std::str::from_utf8(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// A numeric's text (numeric_out), as a JSON number keeps it.
///
/// # Safety
///
/// `n` points at a valid numeric.
unsafe fn numeric_text(n: pg_sys::Numeric) -> String {
    pgrx::fcinfo::direct_function_call::<&std::ffi::CStr>(pg_sys::numeric_out, &[Some(pg_sys::Datum::from(n))])
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The container of `v` if it is an object.
///
/// # Safety
///
/// `v` must point to a valid JsonbValue read from a jsonb container that is still live (as
/// getIthJsonbValueFromContainer returns one): if it is jbvBinary, its `data` must point into
/// that container.
unsafe fn object_of(v: *mut pg_sys::JsonbValue) -> Option<*mut pg_sys::JsonbContainer> {
    // SAFETY: `v` is valid (caller); `val.binary` is the active union member once `type_` is
    // jbvBinary, and its `data` is a live container header.
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
        // SAFETY: every value here comes from a stored jsonb container (an element, or a
        // value the iterator yields with skipNested), where any non-scalar is jbvBinary with
        // `data` pointing into that live container; so `val.binary` is the active member.
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
///
/// # Safety
///
/// As `field`.
unsafe fn scalar(v: &pg_sys::JsonbValue) -> Value {
    // SAFETY: the caller's.
    unsafe { field(v).value() }
}

/// A jsonb value as a [`Field`], its string borrowed for `'a`.
///
/// # Safety
///
/// `v` must come from a jsonb container that stays live for `'a` (an element, a key lookup's
/// result, or a value the iterator yields with skipNested): its string bytes and numeric point
/// into that container, and a non-scalar is jbvBinary.
unsafe fn field<'a>(v: &pg_sys::JsonbValue) -> Field<'a> {
    // SAFETY: `type_` says which union member is active; a string's `val`/`len` and a
    // numeric's pointer point into the live container (caller), and numeric_out reads a valid
    // aligned Numeric (jsonb stores numerics INTALIGNed).
    unsafe {
        match v.type_ {
            pg_sys::jbvType::jbvNull => Field::Null,
            pg_sys::jbvType::jbvBool => Field::Bool(v.val.boolean),
            pg_sys::jbvType::jbvString => {
                Field::Str(text(std::slice::from_raw_parts(v.val.string.val as *const u8, v.val.string.len as usize)))
            }
            pg_sys::jbvType::jbvNumeric => Field::Number(numeric_text(v.val.numeric)),
            _ if kind_of(v) == "object" => Field::Object,
            _ => Field::Array,
        }
    }
}

impl FromDatum for Jsonb {
    /// # Safety
    ///
    /// Unless `is_null`, `datum` must be a jsonb datum that stays valid for as long as the
    /// `Jsonb` is used (the methods above read it). Nothing is read here: it is only wrapped.
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

// SAFETY: a Jsonb argument is declared `jsonb` in SQL (SqlTranslatable below), so the datum
// unboxed is a jsonb datum of the caller's, valid for the whole call; NULL is reported, never
// wrapped.
unsafe impl<'fcx> ArgAbi<'fcx> for Jsonb {
    /// # Safety
    ///
    /// `arg` must be an argument of the function call now running, of SQL type jsonb.
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        // SAFETY: the argument is a jsonb datum (caller), which is what `FromDatum for Jsonb`
        // takes; a NULL one panics (an SQL error) instead of being wrapped.
        unsafe { arg.unbox_arg_using_from_datum().unwrap_or_else(|| panic!("argument {index} must not be null")) }
    }
}

// SAFETY: a function returning Jsonb is declared `RETURNS jsonb` (SqlTranslatable below), and
// the datum handed back is a non-null jsonb varlena.
unsafe impl BoxRet for Jsonb {
    /// # Safety
    ///
    /// The datum returned must be the result of the call `fcinfo` belongs to, a function
    /// declared to return jsonb.
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        // SAFETY: `self.0` is a non-null jsonb datum in memory that outlives the call's return:
        // the caller's own argument, or a payload `Row::transfer` copied into the memory
        // context current before SPI connected (the call's).
        unsafe { fcinfo.return_raw_datum(self.0) }
    }
}

// SAFETY: Jsonb is a jsonb datum both ways: it is declared `jsonb` as an argument and as a
// result, FromDatum only wraps the datum, and IntoDatum reports JSONBOID.
unsafe impl SqlTranslatable for Jsonb {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(Jsonb);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("jsonb"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> = Ok(ReturnsRef::One(SqlMappingRef::literal("jsonb")));
}
