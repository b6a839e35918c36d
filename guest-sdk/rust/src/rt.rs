//! The module's exports, for [`module!`](crate::module): the argument
//! arena, the operator slots, batch decoding, and the failure of callbacks
//! through the host's `fail`. Not for direct use.

use std::cell::{Cell, UnsafeCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::context::Context;
use crate::text::{abbreviate, quote};
use crate::{host, Operator, Record, Result, TimeDomain, Timer};

const BAD_POINTER: i32 = -2;
const BAD_HANDLE: i32 = -3;
const BAD_ARGUMENT: i32 = -5;
const UNKNOWN_OPERATOR: i32 = -10;
const GUEST_ERROR: i32 = -11;

/// Operator slots are numbered from 0 in chain order; more than this many
/// operators in one chain is a host bug.
const MAX_SLOTS: i32 = 4096;
/// Keys in messages are cut to this many bytes.
const ABBREV: usize = 64;
const BATCH_HEADER: usize = 4;
const RECORD_HEADER: usize = 20;

/// A named operator constructor, as `module!` lists them.
pub struct Factory {
    pub name: &'static str,
    pub open: fn(&mut Context) -> Result<Box<dyn Operator>>,
}

/// Boxes what an operator's constructor returned.
pub fn boxed<O: Operator + 'static>(r: Result<O>) -> Result<Box<dyn Operator>> {
    r.map(|o| Box::new(o) as Box<dyn Operator>)
}

/// The checkpoint hooks.
#[derive(Clone, Copy)]
pub enum Hook {
    PreBarrier,
    Complete,
    Aborted,
}

struct Slot {
    ctx: Context,
    op: Box<dyn Operator>,
}

/// Module state. The host calls an instance from one thread, one call at a
/// time, and never re-enters the guest from a host function, so an export
/// holds the only reference to each global while it runs. The arena and
/// the slots are separate globals so that a callback's slot and the batch
/// it reads never alias one borrow.
struct Global<T>(UnsafeCell<T>);

// SAFETY: wasm32 modules run single-threaded (see Global).
unsafe impl<T> Sync for Global<T> {}

/// The argument arena: what wstream_alloc returned last.
static ARENA: Global<Vec<u8>> = Global(UnsafeCell::new(Vec::new()));
/// The open operators, by slot.
static SLOTS: Global<Vec<Option<Slot>>> = Global(UnsafeCell::new(Vec::new()));

fn arena() -> &'static mut Vec<u8> {
    // SAFETY: see Global: exports take this reference once, and only
    // wstream_alloc, which runs outside callbacks, changes the arena.
    unsafe { &mut *ARENA.0.get() }
}

fn slots() -> &'static mut Vec<Option<Slot>> {
    // SAFETY: see Global: each export takes this reference once.
    unsafe { &mut *SLOTS.0.get() }
}

/// What the running callback is doing, for the panic hook, which cannot
/// reach the slot the callback borrows.
struct Current {
    name: Option<Rc<str>>,
    phase: &'static str,
    what: Where,
}

#[derive(Clone, Copy)]
enum Where {
    Nothing,
    Record { index: u32, count: u32, key: *const u8, key_len: usize },
    Timer { domain: TimeDomain, ts: i64, key: *const u8, key_len: usize },
    Checkpoint(i64),
}

static CURRENT: Global<Current> = Global(UnsafeCell::new(Current { name: None, phase: "", what: Where::Nothing }));

fn current() -> &'static mut Current {
    // SAFETY: single-threaded; the panic hook only reads it, after the
    // callback that set it stopped running.
    unsafe { &mut *CURRENT.0.get() }
}

static HOOK_SET: Global<Cell<bool>> = Global(UnsafeCell::new(Cell::new(false)));

/// Installs the panic hook once: a panic fails the current call through
/// the host's fail with the panic's message, then traps (panic=abort).
fn install_panic_hook() {
    // SAFETY: single-threaded, see Global.
    let set = unsafe { &*HOOK_SET.0.get() };
    if set.get() {
        return;
    }
    set.set(true);
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let msg = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "(a non-string panic payload)".to_string()
        };
        let mut text = format!("panic: {}", msg);
        if let Some(l) = info.location() {
            text = format!("{} (at {}:{}:{})", text, l.file(), l.line(), l.column());
        }
        let cur = current();
        let full = match &cur.name {
            Some(name) => describe(name, cur.phase, cur.what, &text),
            None => text,
        };
        host::fail(full.as_bytes());
    }));
}

/// "operator "NAME": PHASE: [the record or timer: ]msg", the message of
/// every failed callback.
fn describe(name: &str, phase: &str, what: Where, msg: &str) -> String {
    let place = match what {
        Where::Nothing => String::new(),
        Where::Record { index, count, key, key_len } => {
            // SAFETY: the key lies in the batch of the running call.
            let key = unsafe { std::slice::from_raw_parts(key, key_len) };
            format!("record {} of {} (key {}): ", index, count, abbreviate(key, ABBREV))
        }
        Where::Timer { domain, ts, key, key_len } => {
            // SAFETY: as for a record.
            let key = unsafe { std::slice::from_raw_parts(key, key_len) };
            format!("{} timer at {} (key {}): ", domain, ts, abbreviate(key, ABBREV))
        }
        Where::Checkpoint(id) => format!("checkpoint {}: ", id),
    };
    format!("operator {}: {}: {}{}", quote(name.as_bytes()), phase, place, msg)
}

fn enter(ctx: &mut Context, phase: &'static str) {
    ctx.begin();
    let cur = current();
    cur.name = Some(ctx.name.clone());
    cur.phase = phase;
    cur.what = Where::Nothing;
}

/// end finishes a callback: it reports an error, or else hands the
/// buffered output to the host and reports an output error.
fn end(ctx: &mut Context, phase: &'static str, res: Result<()>, what: Where) -> i32 {
    // The cached state writes reach the host whether the callback succeeds
    // or fails, as the unbatched calls would have.
    let state = ctx.end_state();
    let res = match (res, state) {
        (Err(e), _) => {
            ctx.drop_output();
            Err((e, what))
        }
        (Ok(()), Err(e)) => {
            ctx.drop_output();
            Err((e, Where::Nothing))
        }
        (Ok(()), Ok(())) => ctx.finish_output().map_err(|e| (e, Where::Nothing)),
    };
    ctx.set_key(&[]);
    let cur = current();
    cur.name = None;
    cur.what = Where::Nothing;
    match res {
        Ok(()) => 0,
        Err((e, what)) => {
            host::fail(describe(&ctx.name, phase, what, e.message()).as_bytes());
            GUEST_ERROR
        }
    }
}

fn host_fail(msg: &str) {
    host::fail(msg.as_bytes());
}

/// The wstream_alloc export: one arena that grows geometrically.
pub fn alloc(size: i32) -> i32 {
    install_panic_hook();
    if size < 0 {
        return 0;
    }
    let arena = arena();
    let size = size as usize;
    if size > arena.len() || arena.is_empty() {
        // Grow geometrically so that a host growing batches step by step
        // does not reallocate on every step.
        let want = size.max(arena.len() * 2).max(64 << 10);
        let mut a = Vec::new();
        if a.try_reserve_exact(want).is_ok() {
            a.resize(want, 0);
        } else if a.try_reserve_exact(size.max(1)).is_ok() {
            a.resize(size.max(1), 0);
        } else {
            return 0;
        }
        *arena = a;
    }
    arena.as_ptr() as usize as i32
}

/// region resolves a (ptr, len) pair the host passed: it must lie inside
/// the arena wstream_alloc returned.
fn region(export: &str, ptr: i32, len: i32) -> Option<&'static [u8]> {
    let arena = &*arena();
    if len == 0 {
        return Some(&[]);
    }
    let base = arena.as_ptr() as usize;
    let p = ptr as u32 as usize;
    if len < 0 || arena.is_empty() || p < base || p - base + len as usize > arena.len() {
        host_fail(&format!(
            "{}: region [{:#x}, +{}) lies outside the {}-byte argument arena returned by wstream_alloc",
            export,
            p,
            len,
            arena.len()
        ));
        return None;
    }
    // SAFETY: the range lies inside the arena, which no one else touches
    // during the call.
    Some(unsafe { std::slice::from_raw_parts(p as *const u8, len as usize) })
}

fn slot(op: i32) -> Option<&'static mut Slot> {
    if op < 0 {
        return None;
    }
    slots().get_mut(op as usize).and_then(|s| s.as_mut())
}

fn no_slot(export: &str, op: i32) -> i32 {
    host_fail(&format!("{}: operator slot {} is not open", export, op));
    BAD_HANDLE
}

/// The wstream_open export.
/// The index, in the running wstream_process or wstream_on_timer call's
/// batch, of the record or timer being processed (NO_PROGRESS between
/// records). Its address goes to the host at the first open (progress_at):
/// in dead-letter mode the host reads it when a callback fails, a panic
/// included, and takes that record out instead of searching the batch. An
/// atomic, so that each store is a store to memory the host can read.
static PROGRESS: AtomicU32 = AtomicU32::new(NO_PROGRESS);
static PROGRESS_NAMED: AtomicBool = AtomicBool::new(false);
const NO_PROGRESS: u32 = u32::MAX;

pub fn open(factories: &[Factory], op: i32, name_ptr: i32, name_len: i32, cfg_ptr: i32, cfg_len: i32) -> i32 {
    install_panic_hook();
    if !PROGRESS_NAMED.swap(true, Ordering::Relaxed) {
        host::progress_at(&PROGRESS);
    }
    let (name, cfg) = match (region("wstream_open", name_ptr, name_len), region("wstream_open", cfg_ptr, cfg_len)) {
        (Some(n), Some(c)) => (n, c),
        _ => return BAD_POINTER,
    };
    if !(0..MAX_SLOTS).contains(&op) {
        host_fail(&format!("wstream_open: operator slot {} is outside [0, {})", op, MAX_SLOTS));
        return BAD_HANDLE;
    }
    if let Some(s) = slot(op) {
        host_fail(&format!(
            "wstream_open: operator slot {} is already open (operator {})",
            op,
            quote(s.ctx.name.as_bytes())
        ));
        return BAD_HANDLE;
    }
    let f = match factories.iter().find(|f| f.name.as_bytes() == name) {
        Some(f) => f,
        None => {
            let have: Vec<String> = factories.iter().map(|f| quote(f.name.as_bytes())).collect();
            host_fail(&format!(
                "wstream_open: the module has no operator {}; it has [{}]",
                abbreviate(name, 256),
                have.join(" ")
            ));
            return UNKNOWN_OPERATOR;
        }
    };
    let mut ctx = Context::new(f.name, cfg);
    enter(&mut ctx, "open");
    ctx.opening = true;
    let made = (f.open)(&mut ctx);
    ctx.opening = false;
    let (res, op_box) = match made {
        Ok(o) => (Ok(()), Some(o)),
        Err(e) => (Err(e), None),
    };
    let st = end(&mut ctx, "open", res, Where::Nothing);
    if st != 0 {
        return st;
    }
    let slots = slots();
    let i = op as usize;
    if slots.len() <= i {
        slots.resize_with(i + 1, || None);
    }
    slots[i] = Some(Slot { ctx, op: op_box.expect("an operator after a successful open") });
    0
}

fn bad_batch(ctx: &mut Context, kind: &str, problem: &str) -> i32 {
    let _ = ctx.end_state();
    ctx.drop_output();
    ctx.set_key(&[]);
    current().name = None;
    host_fail(&format!(
        "operator {}: {} batch from the host: malformed batch: {}",
        quote(ctx.name.as_bytes()),
        kind,
        problem
    ));
    BAD_ARGUMENT
}

/// One entry of a batch: port, timestamp, key, value.
type Entry<'a> = (u32, i64, &'a [u8], &'a [u8]);

/// Decodes the record at b[*off..], advancing off; Err names the problem.
#[inline]
fn next_entry<'a>(b: &'a [u8], off: &mut usize, index: u32) -> std::result::Result<Entry<'a>, String> {
    let p = &b[*off..];
    if p.len() < RECORD_HEADER {
        return Err(format!("record {} at offset {}: header truncated", index, *off));
    }
    let port = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
    let ts = i64::from_le_bytes([p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]]);
    let kl = u32::from_le_bytes([p[12], p[13], p[14], p[15]]) as usize;
    let vl = u32::from_le_bytes([p[16], p[17], p[18], p[19]]) as usize;
    let left = p.len() - RECORD_HEADER;
    if kl > left || vl > left - kl {
        return Err(format!("record {} at offset {}: key and value overrun the batch", index, *off));
    }
    let key = &p[RECORD_HEADER..RECORD_HEADER + kl];
    let value = &p[RECORD_HEADER + kl..RECORD_HEADER + kl + vl];
    *off += RECORD_HEADER + kl + vl;
    Ok((port, ts, key, value))
}

/// Asks the host where the batch callback starting marks its first commit
/// point (the import commit): a record's index, u32::MAX for none.
fn first_commit() -> u32 {
    let st = host::commit(0);
    if st > 0 {
        st as u32
    } else {
        u32::MAX
    }
}

/// The wstream_process export.
pub fn process(op: i32, ptr: i32, len: i32) -> i32 {
    let s = match slot(op) {
        Some(s) => s,
        None => return no_slot("wstream_process", op),
    };
    let b = match region("wstream_process", ptr, len) {
        Some(b) => b,
        None => return BAD_POINTER,
    };
    if b.len() < BATCH_HEADER {
        return bad_batch(&mut s.ctx, "input", &format!("{} bytes is shorter than the 4-byte header", b.len()));
    }
    enter(&mut s.ctx, "process");
    let count = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let mut off = BATCH_HEADER;
    // The records run in stretches between commit points (one stretch when
    // the host asks for none), so that the record loop checks nothing more
    // per record.
    let (mut i, mut next) = (0, first_commit());
    loop {
        let stop = next.min(count);
        while i < stop {
            let at = off;
            let (input, timestamp, key, value) = match next_entry(b, &mut off, i) {
                Ok(e) => e,
                Err(problem) => return bad_batch(&mut s.ctx, "input", &problem),
            };
            s.ctx.set_key(key);
            s.ctx.cache.get_mut().set_record(&b[at..], count - i, i);
            let what = Where::Record { index: i, count, key: key.as_ptr(), key_len: key.len() };
            current().what = what;
            let r = Record { key, value, timestamp, input };
            PROGRESS.store(i, Ordering::Relaxed);
            if let Err(e) = s.op.process(&mut s.ctx, &r) {
                return end(&mut s.ctx, "process", Err(e), what);
            }
            i += 1;
        }
        if i >= count {
            break;
        }
        PROGRESS.store(NO_PROGRESS, Ordering::Relaxed); // a failure in here is no record's
        current().what = Where::Nothing;
        match s.ctx.commit_point(i) {
            Ok(n) => next = n,
            Err(e) => return end(&mut s.ctx, "process", Err(e), Where::Nothing),
        }
    }
    // A failure from here on is no record's.
    PROGRESS.store(NO_PROGRESS, Ordering::Relaxed);
    if off != b.len() {
        return bad_batch(&mut s.ctx, "input", &format!("{} trailing bytes after {} records", b.len() - off, count));
    }
    end(&mut s.ctx, "process", Ok(()), Where::Nothing)
}

/// The wstream_on_timer export.
pub fn on_timer(op: i32, ptr: i32, len: i32) -> i32 {
    let s = match slot(op) {
        Some(s) => s,
        None => return no_slot("wstream_on_timer", op),
    };
    let b = match region("wstream_on_timer", ptr, len) {
        Some(b) => b,
        None => return BAD_POINTER,
    };
    if b.len() < BATCH_HEADER {
        return bad_batch(&mut s.ctx, "timer", &format!("{} bytes is shorter than the 4-byte header", b.len()));
    }
    enter(&mut s.ctx, "on_timer");
    let count = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let mut off = BATCH_HEADER;
    let mut next = first_commit();
    for i in 0..count {
        if i == next {
            PROGRESS.store(NO_PROGRESS, Ordering::Relaxed);
            current().what = Where::Nothing;
            match s.ctx.commit_point(i) {
                Ok(n) => next = n,
                Err(e) => return end(&mut s.ctx, "on_timer", Err(e), Where::Nothing),
            }
        }
        let at = off;
        let (port, timestamp, key, namespace) = match next_entry(b, &mut off, i) {
            Ok(e) => e,
            Err(problem) => return bad_batch(&mut s.ctx, "timer", &problem),
        };
        let domain = match TimeDomain::from_code(port) {
            Some(d) => d,
            None => {
                return bad_batch(&mut s.ctx, "timer", &format!("record {} at offset {}: time domain {}", i, at, port))
            }
        };
        s.ctx.set_key(key);
        s.ctx.cache.get_mut().set_record(&b[at..], count - i, i);
        let what = Where::Timer { domain, ts: timestamp, key: key.as_ptr(), key_len: key.len() };
        current().what = what;
        let t = Timer { domain, timestamp, key, namespace };
        PROGRESS.store(i, Ordering::Relaxed);
        if let Err(e) = s.op.on_timer(&mut s.ctx, &t) {
            return end(&mut s.ctx, "on_timer", Err(e), what);
        }
    }
    PROGRESS.store(NO_PROGRESS, Ordering::Relaxed);
    if off != b.len() {
        return bad_batch(&mut s.ctx, "timer", &format!("{} trailing bytes after {} records", b.len() - off, count));
    }
    end(&mut s.ctx, "on_timer", Ok(()), Where::Nothing)
}

/// The wstream_close export. The slot is gone whatever close does: the
/// host never calls it again.
pub fn close(op: i32) -> i32 {
    let taken = if op < 0 { None } else { slots().get_mut(op as usize).and_then(|s| s.take()) };
    let mut s = match taken {
        Some(s) => s,
        None => return no_slot("wstream_close", op),
    };
    enter(&mut s.ctx, "close");
    let res = s.op.close(&mut s.ctx);
    end(&mut s.ctx, "close", res, Where::Nothing)
}

/// The checkpoint hook exports.
pub fn hook(which: Hook, op: i32, id: i64) -> i32 {
    let (export, phase) = match which {
        Hook::PreBarrier => ("wstream_pre_barrier", "pre_barrier"),
        Hook::Complete => ("wstream_checkpoint_complete", "checkpoint_complete"),
        Hook::Aborted => ("wstream_checkpoint_aborted", "checkpoint_aborted"),
    };
    let s = match slot(op) {
        Some(s) => s,
        None => return no_slot(export, op),
    };
    enter(&mut s.ctx, phase);
    let what = Where::Checkpoint(id);
    current().what = what;
    let res = match which {
        Hook::PreBarrier => s.op.pre_barrier(&mut s.ctx, id),
        Hook::Complete => s.op.checkpoint_complete(&mut s.ctx, id),
        Hook::Aborted => s.op.checkpoint_aborted(&mut s.ctx, id),
    };
    end(&mut s.ctx, phase, res, what)
}

/// The wstream_plan export: (pointer << 32) | length of the plan.
pub fn plan(json: &'static str) -> i64 {
    if json.is_empty() {
        return 0;
    }
    (((json.as_ptr() as usize as u64) << 32) | json.len() as u64) as i64
}

/// The value the last migration returned, kept until the host copied it.
static MIGRATED: Global<Vec<u8>> = Global(UnsafeCell::new(Vec::new()));

/// A migration (wstream::migrate!): the operator's name, the state's name,
/// the layout version the value was written with, the key, the namespace
/// and the old value; it returns the value in the current layout.
pub type MigrateFn = fn(&str, &str, i32, &[u8], &[u8], &[u8]) -> crate::Result<Vec<u8>>;

/// The wstream_migrate export: runs f on the arguments the host wrote into
/// the arena and returns (pointer << 32) | length of the new value, or a
/// status after fail.
#[allow(clippy::too_many_arguments)]
pub fn migrate(
    f: MigrateFn,
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
    install_panic_hook();
    let e = "wstream_migrate";
    let args = (
        region(e, op_ptr, op_len),
        region(e, state_ptr, state_len),
        region(e, key_ptr, key_len),
        region(e, ns_ptr, ns_len),
        region(e, val_ptr, val_len),
    );
    let (op, state, key, ns, val) = match args {
        (Some(a), Some(b), Some(c), Some(d), Some(v)) => (a, b, c, d, v),
        _ => return BAD_POINTER as i64,
    };
    let op = std::str::from_utf8(op).unwrap_or("");
    let state = std::str::from_utf8(state).unwrap_or("");
    match f(op, state, version, key, ns, val) {
        Ok(v) => {
            // SAFETY: see Global: only this export touches MIGRATED.
            let out = unsafe { &mut *MIGRATED.0.get() };
            *out = v;
            if out.is_empty() {
                return 0;
            }
            (((out.as_ptr() as usize as u64) << 32) | out.len() as u64) as i64
        }
        Err(err) => {
            host_fail(&format!(
                "migrating state {:?} of operator {:?} from version {}: {}",
                state,
                op,
                version,
                err.message()
            ));
            BAD_ARGUMENT as i64
        }
    }
}
