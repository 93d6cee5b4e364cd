//! The SQL types leaseq passes around, as Rust types.
//!
//! JSON documents travel as raw `jsonb` datums, never through `serde_json::Value`: a payload is
//! the user's data and must come back bit for bit (serde would round `0.1000000000000000055` or
//! `12345678901234567890` to an f64), and re-parsing it on every call would cost time for nothing.
use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::{Datum, DatumWithOid, FromDatum, IntoDatum};
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::prelude::*;
use pgrx::{PgMemoryContexts, impl_sql_translatable};

/// A `jsonb` value held as its datum.
#[derive(Clone, Copy)]
pub struct Jsonb(pg_sys::Datum);

/// A `jsonb[]` value held as its datum; see [`JsonbArray::elements`].
#[derive(Clone, Copy)]
pub struct JsonbArray(pg_sys::Datum);

impl_sql_translatable!(Jsonb, "jsonb");
impl_sql_translatable!(JsonbArray, "jsonb[]");

/// A `bigint[]`, `uuid[]` or `text[]` argument held as its datum: its size is read from its
/// header (`len`, `bytes`) before its elements are copied into a Rust vector (`elements`). A
/// `Vec` argument would be copied whatever its length, and a Rust allocation that fails aborts
/// the backend, and with it every session of the server (docs/security.md).
#[derive(Clone, Copy)]
pub struct IdArray(pg_sys::Datum);
#[derive(Clone, Copy)]
pub struct UuidArray(pg_sys::Datum);
#[derive(Clone, Copy)]
pub struct TextArray(pg_sys::Datum);

impl_sql_translatable!(IdArray, "bigint[]");
impl_sql_translatable!(UuidArray, "uuid[]");
impl_sql_translatable!(TextArray, "text[]");

impl Jsonb {
    pub fn datum(&self) -> pg_sys::Datum {
        self.0
    }

    /// The uncompressed size of the document in bytes (what `leaseq.max_payload_bytes` limits).
    pub fn size(&self) -> usize {
        // SAFETY: the datum is a valid jsonb varlena, possibly toasted; this reads its header only.
        unsafe { pg_sys::toast_raw_datum_size(self.0) }
    }

    /// How many elements the document has if it is an array (not a scalar), from its header.
    pub fn array_len(&self) -> Option<usize> {
        // jsonb.h: the root container's header holds its count and kind.
        const JB_CMASK: u32 = 0x0FFF_FFFF;
        const JB_FSCALAR: u32 = 0x1000_0000;
        const JB_FARRAY: u32 = 0x4000_0000;
        // SAFETY: the datum is a valid jsonb varlena, possibly toasted (detoasted into the
        // current memory context); the root header follows the varlena header.
        let header = unsafe {
            let jsonb = pg_sys::pg_detoast_datum(self.0.cast_mut_ptr()) as *const pg_sys::Jsonb;
            (*jsonb).root.header
        };
        (header & JB_FARRAY != 0 && header & JB_FSCALAR == 0)
            .then_some((header & JB_CMASK) as usize)
    }

    /// The document's text (`jsonb_out`), in the current memory context.
    pub fn to_text(self) -> String {
        // SAFETY: jsonb_out takes a valid jsonb datum and returns a palloc'd C string.
        let text = unsafe {
            pgrx::direct_function_call::<&core::ffi::CStr>(pg_sys::jsonb_out, &[Some(self.0)])
        };
        text.expect("jsonb_out returns text")
            .to_string_lossy()
            .into_owned()
    }

    /// `text` read by PostgreSQL's `jsonb` input (every digit of a number kept), in the current
    /// memory context. The text must be valid JSON (it came from a parsed document).
    pub fn from_text(text: &str) -> Jsonb {
        let text = std::ffi::CString::new(text).expect("JSON text has no NUL byte");
        // SAFETY: jsonb_in reads a C string and returns a palloc'd jsonb datum.
        let datum = unsafe {
            pgrx::direct_function_call_as_datum(
                pg_sys::jsonb_in,
                &[Some(pg_sys::Datum::from(text.as_ptr()))],
            )
        };
        Jsonb(datum.expect("jsonb_in returns a document"))
    }

    pub fn arg(value: Option<Jsonb>) -> DatumWithOid<'static> {
        match value {
            // SAFETY: the datum is a jsonb, as the oid says.
            Some(v) => unsafe { DatumWithOid::new(v, pg_sys::JSONBOID) },
            None => DatumWithOid::null_oid(pg_sys::JSONBOID),
        }
    }
}

/// The number of elements of an array datum (0 for an empty array of any dimension), from its
/// header.
///
/// # Safety
/// `datum` is an array, possibly toasted (detoasted into the current memory context).
unsafe fn array_len(datum: pg_sys::Datum) -> usize {
    // SAFETY: per the contract; the dimensions follow the fixed header (ARR_DIMS).
    unsafe {
        let array = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        let dims = (array as *mut u8).add(std::mem::size_of::<pg_sys::ArrayType>()) as *mut i32;
        pg_sys::ArrayGetNItems((*array).ndim, dims) as usize
    }
}

macro_rules! bounded_array {
    ($ty:ident, $element:ty, $oid:expr) => {
        impl $ty {
            /// How many elements, read from the header alone.
            pub fn len(&self) -> usize {
                // SAFETY: the datum is of the declared argument type, an array.
                unsafe { array_len(self.0) }
            }

            /// The elements, `None` for a NULL one, copied: check `len` and `bytes` first.
            pub fn elements(self) -> Vec<Option<$element>> {
                // SAFETY: the datum is an array of the element type, as the declared type says.
                unsafe { Vec::<Option<$element>>::from_polymorphic_datum(self.0, false, $oid) }
                    .unwrap_or_default()
            }
        }

        raw_datum_type!($ty, $oid);
    };
}

impl TextArray {
    /// Its size in bytes, uncompressed, read from the header alone.
    pub fn bytes(&self) -> usize {
        // SAFETY: a valid varlena datum, possibly toasted; reads its header only.
        unsafe { pg_sys::toast_raw_datum_size(self.0) }
    }
}

impl JsonbArray {
    /// How many elements, read from the header alone.
    pub fn len(&self) -> usize {
        // SAFETY: the datum is a jsonb[], the declared argument type.
        unsafe { array_len(self.0) }
    }

    /// A new `jsonb[]` of `docs` (NULL elements for `None`), as a statement's argument.
    pub fn arg_of(docs: &[Option<Jsonb>]) -> DatumWithOid<'static> {
        // SAFETY: construct_md_array copies the given jsonb datums into a new array in the
        // current memory context; the element type attributes are jsonb's (varlena, int
        // alignment).
        unsafe {
            let mut values: Vec<pg_sys::Datum> = docs
                .iter()
                .map(|d| d.map(|d| d.datum()).unwrap_or(pg_sys::Datum::from(0)))
                .collect();
            let mut nulls: Vec<bool> = docs.iter().map(|d| d.is_none()).collect();
            let mut dims = [docs.len() as i32];
            let mut lbs = [1i32];
            let array = pg_sys::construct_md_array(
                values.as_mut_ptr(),
                nulls.as_mut_ptr(),
                1,
                dims.as_mut_ptr(),
                lbs.as_mut_ptr(),
                pg_sys::JSONBOID,
                -1,
                false,
                pg_sys::TYPALIGN_INT as std::ffi::c_char,
            );
            DatumWithOid::new(
                JsonbArray(pg_sys::Datum::from(array)),
                pg_sys::JSONBARRAYOID,
            )
        }
    }

    /// The elements, `None` for a NULL element. Empty for an empty array of any dimension.
    pub fn elements(&self) -> Vec<Option<Jsonb>> {
        let mut values: *mut pg_sys::Datum = std::ptr::null_mut();
        let mut nulls: *mut bool = std::ptr::null_mut();
        let mut count: i32 = 0;
        // SAFETY: the datum is a jsonb[] (the function's declared argument type); detoasting
        // copies it into the current memory context when needed, and deconstruct_array reads
        // jsonb's own type attributes (varlena, int alignment).
        unsafe {
            let array = pg_sys::pg_detoast_datum(self.0.cast_mut_ptr()) as *mut pg_sys::ArrayType;
            pg_sys::deconstruct_array(
                array,
                pg_sys::JSONBOID,
                -1,
                false,
                pg_sys::TYPALIGN_INT as std::ffi::c_char,
                &mut values,
                &mut nulls,
                &mut count,
            );
            (0..count as usize)
                .map(|i| (!*nulls.add(i)).then(|| Jsonb(*values.add(i))))
                .collect()
        }
    }

    pub fn arg(&self) -> DatumWithOid<'static> {
        // SAFETY: the datum is a jsonb[], as the oid says.
        unsafe { DatumWithOid::new(*self, pg_sys::JSONBARRAYOID) }
    }
}

/// Function arguments of `$ty` are read with its `FromDatum`.
macro_rules! arg_abi_from_datum {
    ($ty:ident) => {
        unsafe impl<'fcx> ArgAbi<'fcx> for $ty {
            unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
                let index = arg.index();
                // SAFETY: pgrx calls this with the declared argument type.
                unsafe { arg.unbox_arg_using_from_datum() }
                    .unwrap_or_else(|| panic!("argument {index} must not be null"))
            }
        }
    };
}

macro_rules! raw_datum_type {
    ($ty:ident, $oid:expr) => {
        impl FromDatum for $ty {
            unsafe fn from_polymorphic_datum(
                datum: pg_sys::Datum,
                is_null: bool,
                _typoid: pg_sys::Oid,
            ) -> Option<Self> {
                (!is_null).then_some($ty(datum))
            }

            /// Copies the value, so that it outlives the SPI call that read it.
            unsafe fn from_datum_in_memory_context(
                mut memory_context: PgMemoryContexts,
                datum: pg_sys::Datum,
                is_null: bool,
                _typoid: pg_sys::Oid,
            ) -> Option<Self> {
                if is_null {
                    return None;
                }
                // SAFETY: a varlena datum of this type, detoasted into a copy in the given context.
                unsafe {
                    memory_context.switch_to(|_| {
                        let copy = pg_sys::pg_detoast_datum_copy(datum.cast_mut_ptr());
                        Some($ty(pg_sys::Datum::from(copy)))
                    })
                }
            }
        }

        impl IntoDatum for $ty {
            fn into_datum(self) -> Option<pg_sys::Datum> {
                Some(self.0)
            }

            fn type_oid() -> pg_sys::Oid {
                $oid
            }
        }

        arg_abi_from_datum!($ty);

        unsafe impl BoxRet for $ty {
            unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
                // SAFETY: the datum is of the declared return type and lives in a memory context
                // that outlasts the call (the caller's, or SPI's upper context after a copy).
                unsafe { fcinfo.return_raw_datum(self.0) }
            }
        }
    };
}

raw_datum_type!(Jsonb, pg_sys::JSONBOID);
raw_datum_type!(JsonbArray, pg_sys::JSONBARRAYOID);
bounded_array!(IdArray, i64, pg_sys::INT8ARRAYOID);
bounded_array!(UuidArray, pgrx::Uuid, pg_sys::UUIDARRAYOID);
bounded_array!(TextArray, String, pg_sys::TEXTARRAYOID);

/// A Rust enum for one of leaseq's SQL enums, passed as that type in and out of functions.
macro_rules! sql_enum {
    ($(#[$doc:meta])* $ty:ident, $sql:literal, { $($variant:ident => $label:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $ty {
            $($variant),*
        }

        impl $ty {
            /// Every value, in the SQL enum's order (`schema::tests` checks it): what lists
            /// of statuses iterate, so that none is left out.
            #[allow(dead_code)]
            pub const ALL: &[$ty] = &[$($ty::$variant),*];

            pub fn label(self) -> &'static str {
                match self {
                    $($ty::$variant => $label),*
                }
            }

            pub fn from_label(label: &str) -> Option<$ty> {
                match label {
                    $($label => Some($ty::$variant),)*
                    _ => None,
                }
            }
        }

        unsafe impl SqlTranslatable for $ty {
            const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!($ty);
            const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
            const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> =
                Ok(SqlMappingRef::literal($sql));
            const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
                Ok(ReturnsRef::One(SqlMappingRef::literal($sql)));
        }

        impl FromDatum for $ty {
            unsafe fn from_polymorphic_datum(
                datum: pg_sys::Datum,
                is_null: bool,
                _typoid: pg_sys::Oid,
            ) -> Option<Self> {
                if is_null {
                    return None;
                }
                // SAFETY: an enum datum is its label's oid, passed by value.
                let oid = unsafe { pg_sys::Oid::from_datum(datum, false)? };
                let (label, _, _) = pgrx::lookup_enum_by_oid(oid);
                Some($ty::from_label(&label).expect(concat!($sql, " has only known labels")))
            }
        }

        impl IntoDatum for $ty {
            fn into_datum(self) -> Option<pg_sys::Datum> {
                Some(pgrx::lookup_enum_by_label($sql, self.label()))
            }

            fn type_oid() -> pg_sys::Oid {
                pgrx::regtypein($sql)
            }
        }

        arg_abi_from_datum!($ty);

        unsafe impl BoxRet for $ty {
            unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
                match self.into_datum() {
                    // SAFETY: an enum value is an oid, passed by value.
                    Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
                    None => fcinfo.return_null(),
                }
            }
        }
    };
}

sql_enum!(
    /// `leaseq.job_status`.
    JobStatus, "leaseq.job_status", {
        Pending => "pending",
        Running => "running",
        Succeeded => "succeeded",
        Dead => "dead",
        Cancelled => "cancelled",
        Waiting => "waiting",
        Blocked => "blocked",
    }
);

sql_enum!(
    /// `leaseq.parent_failure`: what a blocked job does when a parent fails (lifecycle/depend.rs).
    ParentFailure, "leaseq.parent_failure", {
        Cancel => "cancel",
        Dead => "dead",
        Run => "run",
    }
);

sql_enum!(
    /// `leaseq.attempt_outcome`.
    AttemptOutcome, "leaseq.attempt_outcome", {
        Running => "running",
        Succeeded => "succeeded",
        Failed => "failed",
        LeaseExpired => "lease_expired",
        Cancelled => "cancelled",
        Snoozed => "snoozed",
        HandedBack => "handed_back",
    }
);

sql_enum!(
    /// `leaseq.queue_privilege`: what a per-queue grant allows (core/access.rs).
    QueuePrivilege, "leaseq.queue_privilege", {
        Produce => "produce",
        Work => "work",
        Observe => "observe",
        Admin => "admin",
    }
);

/// A `regrole` value: a role, by OID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Role(pub pg_sys::Oid);

impl_sql_translatable!(Role, "regrole");

impl FromDatum for Role {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _typoid: pg_sys::Oid,
    ) -> Option<Self> {
        // SAFETY: a regrole is an oid, passed by value.
        unsafe { pg_sys::Oid::from_datum(datum, is_null) }.map(Role)
    }
}

impl IntoDatum for Role {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(pg_sys::Datum::from(self.0))
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::REGROLEOID
    }
}

arg_abi_from_datum!(Role);

unsafe impl BoxRet for Role {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        // SAFETY: a regrole is an oid, passed by value.
        unsafe { fcinfo.return_raw_datum(pg_sys::Datum::from(self.0)) }
    }
}
