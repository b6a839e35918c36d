//! wstream Rust guest SDK: write wstream stream operators in Rust and build
//! them into one WebAssembly module (`--target wasm32-unknown-unknown`).
//!
//! The SDK implements every export of the host↔guest ABI (abi/ABI.md) and
//! wraps every host import, so that operators see records, keyed state and
//! timers rather than pointers and batches. The module imports nothing but
//! the `wstream` host functions: no WASI.
//!
//! An operator is a type implementing [`Operator`], made by a constructor
//! that runs in `wstream_open` (the only place states can be registered).
//! [`module!`] lists the operators of a module by name and, optionally, its
//! job plan, and defines the module's exports:
//!
//! ```ignore
//! use wstream::{Context, Operator, Record, Result, ValueState};
//!
//! struct Count { n: ValueState }
//!
//! impl Count {
//!     fn open(ctx: &mut Context) -> Result<Count> {
//!         Ok(Count { n: ctx.value_state("count")? })
//!     }
//! }
//!
//! impl Operator for Count {
//!     fn process(&mut self, ctx: &mut Context, r: &Record) -> Result<()> {
//!         let n = self.n.get_i64(ctx)?.unwrap_or(0) + 1; // state of r.key
//!         self.n.put_i64(ctx, n)
//!     }
//! }
//!
//! wstream::module! {
//!     operators: { "count" => Count::open },
//! }
//! ```
//!
//! # Calls and lifetimes
//!
//! The host calls a module instance from one thread, one call at a time:
//! the constructor in `wstream_open`, then [`Operator::process`] once per
//! input record (the SDK decodes each batch in place), [`Operator::on_timer`]
//! once per fired timer, the checkpoint hooks, and [`Operator::close`] after
//! the input ended. [`Record`] and [`Timer`] borrow the host's batch: they
//! are valid during the call only.
//!
//! # Output
//!
//! [`Context::emit`] and [`Context::emit_to`] copy records into one reusable
//! buffer that goes to the host in a single `emit_batch` call when the
//! callback returns, or earlier once it passed 64 KiB. An output error fails
//! the callback when it returns.
//!
//! # Errors
//!
//! Every fallible call returns [`Result`]; its [`Error`] carries the ABI
//! [`Status`] and a message that says what failed, naming the state, output
//! or timer (`get value state "count": key group not owned by this
//! subtask`). A callback that returns an error fails: the SDK calls the
//! host's `fail` with `operator "NAME": PHASE: message` (with the record or
//! timer in `process` and `on_timer`), drops the callback's buffered output
//! and returns GUEST_ERROR. A panic calls `fail` the same way from a panic
//! hook, with the panic's message and location, then traps (modules are
//! built with `panic=abort`).
//!
//! # Keyed state and timers
//!
//! [`ValueState`] and [`MapState`] act on the current key: the record's key
//! in `process`, the timer's in `on_timer`. `ValueState::ns` addresses one
//! value per namespace (for example a window). Timers are keyed too:
//! [`Context::register_event_timer`] fires `on_timer` once the watermark
//! reaches its time, with the same key and namespace. Integers in state are
//! 8 bytes little-endian ([`ValueState::get_i64`]), like every other SDK's,
//! so that savepoints move between languages.
//!
//! State is cached for the duration of a callback: in `process` and
//! `on_timer` it is read for a batch's keys in one host call and written
//! back in another when the callback ends, or before a map cursor fetches a
//! page (abi/ABI.md, "How the SDKs use them"). A write the host refuses
//! there fails the callback.

mod cache;
mod context;
mod host;
pub mod json;
#[doc(hidden)]
pub mod rt;
mod state;
pub mod text;

pub use context::{Context, Output};
pub use json::Json;
pub use state::{MapIter, MapState, Namespaced, ValueState};

use std::fmt;

/// The ABI version this SDK implements (the `wstream_abi_version` export).
pub const ABI_VERSION: i32 = 1;

/// The watermark before the first one arrived.
pub const MIN_WATERMARK: i64 = i64::MIN;
/// The watermark once the input ended: every event-time timer fires then.
pub const MAX_WATERMARK: i64 = i64::MAX;

/// An ABI status code (abi/ABI.md, "Status codes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// No state entry for that key and namespace.
    NotFound,
    /// A pointer/length pair lies outside guest memory.
    BadPointer,
    /// Unknown state handle or operator slot.
    BadHandle,
    /// Unknown output index or output name.
    BadOutput,
    /// Malformed batch, bad state kind or time domain, empty name.
    BadArgument,
    /// The key belongs to a key group this subtask does not own.
    KeyGroup,
    /// Keyed state or timers without a key-partitioned input.
    NoKeyedState,
    /// The state backend or the host's output path failed.
    StateError,
    /// A size limit was exceeded.
    Limit,
    UnknownOperator,
    /// The guest failed; the default status of [`Error::new`].
    GuestError,
    /// A host call outside a callback.
    NotInCallback,
    /// A code this SDK does not know.
    Unknown(i32),
}

impl Status {
    /// The status of an ABI code.
    pub fn from_code(code: i32) -> Status {
        match code {
            0 => Status::Ok,
            -1 => Status::NotFound,
            -2 => Status::BadPointer,
            -3 => Status::BadHandle,
            -4 => Status::BadOutput,
            -5 => Status::BadArgument,
            -6 => Status::KeyGroup,
            -7 => Status::NoKeyedState,
            -8 => Status::StateError,
            -9 => Status::Limit,
            -10 => Status::UnknownOperator,
            -11 => Status::GuestError,
            -12 => Status::NotInCallback,
            c => Status::Unknown(c),
        }
    }

    /// The ABI code of the status.
    pub fn code(self) -> i32 {
        match self {
            Status::Ok => 0,
            Status::NotFound => -1,
            Status::BadPointer => -2,
            Status::BadHandle => -3,
            Status::BadOutput => -4,
            Status::BadArgument => -5,
            Status::KeyGroup => -6,
            Status::NoKeyedState => -7,
            Status::StateError => -8,
            Status::Limit => -9,
            Status::UnknownOperator => -10,
            Status::GuestError => -11,
            Status::NotInCallback => -12,
            Status::Unknown(c) => c,
        }
    }

    /// What the status means, in the words of the other SDKs' messages.
    pub fn text(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::NotFound => "not found",
            Status::BadPointer => "pointer out of bounds",
            Status::BadHandle => "bad handle",
            Status::BadOutput => "bad output",
            Status::BadArgument => "bad argument",
            Status::KeyGroup => "key group not owned by this subtask",
            Status::NoKeyedState => "keyed state outside a keyed context",
            Status::StateError => "state backend error",
            Status::Limit => "limit exceeded",
            Status::UnknownOperator => "unknown operator",
            Status::GuestError => "guest error",
            Status::NotInCallback => "host call outside a callback",
            Status::Unknown(_) => "unknown status",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

/// An error of an SDK call or of an operator: an ABI status and a message
/// that says what failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

/// The result of SDK calls and operator callbacks.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An operator's own error, with status GUEST_ERROR.
    pub fn new(message: impl Into<String>) -> Error {
        Error { status: Status::GuestError, message: message.into() }
    }

    /// An error with the given status.
    pub fn with_status(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    /// The error of a host call: "WHAT: STATUS TEXT".
    pub(crate) fn host(code: i32, what: fmt::Arguments<'_>) -> Error {
        let status = Status::from_code(code);
        Error { status, message: format!("{}: {}", what, status.text()) }
    }

    pub fn status(&self) -> Status {
        self.status
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(message: String) -> Error {
        Error::new(message)
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Error {
        Error::new(message)
    }
}

/// `error!("fmt", args...)` is `Error::new(format!(...))`, for
/// `return Err(wstream::error!(...))`.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => {
        $crate::Error::new(::std::format!($($arg)*))
    };
}

/// One input record. It borrows the host's input batch: valid during the
/// `process` call only.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    /// Event time, milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// The index of the input edge, in plan order; 0 for one input.
    pub input: u32,
}

/// A timer's time domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeDomain {
    /// Fires when the watermark reaches the timer's time.
    Event,
    /// Fires when the host's wall clock reaches it.
    Processing,
}

impl TimeDomain {
    pub fn code(self) -> i32 {
        match self {
            TimeDomain::Event => 0,
            TimeDomain::Processing => 1,
        }
    }

    pub fn from_code(code: u32) -> Option<TimeDomain> {
        match code {
            0 => Some(TimeDomain::Event),
            1 => Some(TimeDomain::Processing),
            _ => None,
        }
    }
}

impl fmt::Display for TimeDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeDomain::Event => "event time",
            TimeDomain::Processing => "processing time",
        })
    }
}

/// A fired timer. It borrows the host's timer batch: valid during the
/// `on_timer` call only.
#[derive(Debug, Clone, Copy)]
pub struct Timer<'a> {
    pub domain: TimeDomain,
    pub timestamp: i64,
    /// The key the timer was registered under: the current key of the call.
    pub key: &'a [u8],
    /// The namespace it was registered with.
    pub namespace: &'a [u8],
}

/// Log levels of [`Context::log`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Debug = 0,
    Info = 1,
    Warn = 2,
    Error = 3,
}

/// A stream operator. The SDK makes one per opened slot with the
/// constructor given to [`module!`] and calls it until the slot closes. Only
/// `process` is required; the other callbacks default to doing nothing,
/// except `on_timer`, which fails: timers fire only for operators that
/// register them.
pub trait Operator {
    /// Handles one input record; the current key is `record.key`.
    fn process(&mut self, ctx: &mut Context, record: &Record<'_>) -> Result<()>;

    /// Handles one fired timer; the current key is `timer.key`.
    fn on_timer(&mut self, ctx: &mut Context, timer: &Timer<'_>) -> Result<()> {
        let _ = (ctx, timer);
        Err(Error::new("the operator does not implement on_timer"))
    }

    /// Runs once after the input ended and every event-time timer fired;
    /// it may still emit.
    fn close(&mut self, ctx: &mut Context) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// Runs before a checkpoint barrier is forwarded: flush buffered
    /// output here (it may emit).
    fn pre_barrier(&mut self, ctx: &mut Context, checkpoint: i64) -> Result<()> {
        let _ = (ctx, checkpoint);
        Ok(())
    }

    /// The checkpoint completed (it may not emit), e.g. commit a transaction.
    fn checkpoint_complete(&mut self, ctx: &mut Context, checkpoint: i64) -> Result<()> {
        let _ = (ctx, checkpoint);
        Ok(())
    }

    /// The checkpoint was aborted (it may not emit).
    fn checkpoint_aborted(&mut self, ctx: &mut Context, checkpoint: i64) -> Result<()> {
        let _ = (ctx, checkpoint);
        Ok(())
    }
}

/// Defines the optional `wstream_migrate` export (abi/ABI.md): `$f`, a
/// [`rt::MigrateFn`], converts one value of a state whose layout version
/// the plan raised — given the operator's and the state's names, the
/// version the value was written with, its key, namespace and old value —
/// into the current layout. An `Err` fails the restore (an upgrade rolls
/// back). Use it once, next to [`module!`].
///
/// ```ignore
/// wstream::migrate!(|op, state, version, key, ns, value| {
///     Ok(format!("{}", i64::from_le_bytes(value.try_into()?)).into_bytes())
/// });
/// ```
#[macro_export]
macro_rules! migrate {
    ($f:expr $(,)?) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub extern "C" fn wstream_migrate(
            op_ptr: i32,
            op_len: i32,
            state_ptr: i32,
            state_len: i32,
            version: i32,
            key_ptr: i32,
            key_len: i32,
            ns_ptr: i32,
            ns_len: i32,
            val_ptr: i32,
            val_len: i32,
        ) -> i64 {
            $crate::rt::migrate(
                $f, op_ptr, op_len, state_ptr, state_len, version, key_ptr, key_len, ns_ptr, ns_len, val_ptr, val_len,
            )
        }
    };
}

/// Defines the module's exports: its operators, each a name and a
/// constructor `fn(&mut Context) -> Result<impl Operator>` run by
/// `wstream_open`, and optionally its job plan (JSON, the `wstream_plan`
/// export; flags and plan files given to `wstream deploy` override it). Use
/// it once, at the root of the module's crate.
///
/// ```ignore
/// wstream::module! {
///     operators: {
///         "split" => |_| Ok(Split),
///         "count" => Count::open,
///     },
///     plan: PLAN,
/// }
/// ```
#[macro_export]
macro_rules! module {
    (operators: { $($name:literal => $open:expr),+ $(,)? } $(, plan: $plan:expr)? $(,)?) => {
        #[no_mangle]
        pub extern "C" fn wstream_abi_version() -> i32 {
            $crate::ABI_VERSION
        }

        #[no_mangle]
        pub extern "C" fn wstream_alloc(size: i32) -> i32 {
            $crate::rt::alloc(size)
        }

        #[no_mangle]
        pub extern "C" fn wstream_open(op: i32, name_ptr: i32, name_len: i32, cfg_ptr: i32, cfg_len: i32) -> i32 {
            $crate::rt::open(
                &[$($crate::rt::Factory {
                    name: $name,
                    open: |ctx: &mut $crate::Context| $crate::rt::boxed(($open)(ctx)),
                }),+],
                op, name_ptr, name_len, cfg_ptr, cfg_len,
            )
        }

        #[no_mangle]
        pub extern "C" fn wstream_process(op: i32, ptr: i32, len: i32) -> i32 {
            $crate::rt::process(op, ptr, len)
        }

        #[no_mangle]
        pub extern "C" fn wstream_on_timer(op: i32, ptr: i32, len: i32) -> i32 {
            $crate::rt::on_timer(op, ptr, len)
        }

        #[no_mangle]
        pub extern "C" fn wstream_close(op: i32) -> i32 {
            $crate::rt::close(op)
        }

        #[no_mangle]
        pub extern "C" fn wstream_pre_barrier(op: i32, checkpoint: i64) -> i32 {
            $crate::rt::hook($crate::rt::Hook::PreBarrier, op, checkpoint)
        }

        #[no_mangle]
        pub extern "C" fn wstream_checkpoint_complete(op: i32, checkpoint: i64) -> i32 {
            $crate::rt::hook($crate::rt::Hook::Complete, op, checkpoint)
        }

        #[no_mangle]
        pub extern "C" fn wstream_checkpoint_aborted(op: i32, checkpoint: i64) -> i32 {
            $crate::rt::hook($crate::rt::Hook::Aborted, op, checkpoint)
        }

        $(
            #[no_mangle]
            pub extern "C" fn wstream_plan() -> i64 {
                $crate::rt::plan($plan)
            }
        )?
    };
}
