//! The host functions of the `wstream` import module (abi/ABI.md), as raw
//! calls. Every pointer/length pair is an offset into the module's memory;
//! every status is an ABI status code. The rest of the SDK wraps these.
//!
//! Off wasm32 the crate still compiles (so that host-side tools can build
//! and unit-test it), but there is no host: every call reports
//! NOT_IN_CALLBACK.

#[cfg(target_arch = "wasm32")]
mod imports {
    #[link(wasm_import_module = "wstream")]
    extern "C" {
        pub fn emit(port: i32, ts: i64, key: *const u8, key_len: i32, val: *const u8, val_len: i32) -> i32;
        pub fn emit_batch(ptr: *const u8, len: i32) -> i32;
        pub fn output_index(name: *const u8, name_len: i32) -> i32;
        pub fn state_register(name: *const u8, name_len: i32, kind: i32) -> i32;
        pub fn state_get(
            h: i32,
            key: *const u8,
            key_len: i32,
            ns: *const u8,
            ns_len: i32,
            out: *mut u8,
            out_cap: i32,
        ) -> i32;
        pub fn state_put(
            h: i32,
            key: *const u8,
            key_len: i32,
            ns: *const u8,
            ns_len: i32,
            val: *const u8,
            val_len: i32,
        ) -> i32;
        pub fn state_delete(h: i32, key: *const u8, key_len: i32, ns: *const u8, ns_len: i32) -> i32;
        #[allow(clippy::too_many_arguments)]
        pub fn state_iter(
            h: i32,
            key: *const u8,
            key_len: i32,
            prefix: *const u8,
            prefix_len: i32,
            after: *const u8,
            after_len: i32,
            out: *mut u8,
            out_cap: i32,
        ) -> i32;
        pub fn timer_register(domain: i32, key: *const u8, key_len: i32, ns: *const u8, ns_len: i32, ts: i64) -> i32;
        pub fn timer_delete(domain: i32, key: *const u8, key_len: i32, ns: *const u8, ns_len: i32, ts: i64) -> i32;
        pub fn state_get_many(h: i32, req: *const u8, req_len: i32, out: *mut u8, out_cap: i32) -> i32;
        pub fn state_write_batch(ptr: *const u8, len: i32) -> i32;
        pub fn current_watermark() -> i64;
        pub fn processing_time() -> i64;
        pub fn log(level: i32, ptr: *const u8, len: i32);
        pub fn fail(ptr: *const u8, len: i32);
        pub fn progress_at(ptr: *const u32) -> i32;
        pub fn commit(done: i32) -> i32;
    }
}

/// NOT_IN_CALLBACK: what every call returns without a host.
#[cfg(not(target_arch = "wasm32"))]
const NO_HOST: i32 = -12;

// Lengths: slices in the SDK never exceed the 4 GiB of wasm32 memory, and
// the host reads lengths as signed i32; a longer slice is refused by the
// host as BAD_POINTER, which is what the ABI asks for.
#[inline]
fn len(b: &[u8]) -> i32 {
    b.len() as i32
}

pub fn emit(port: u32, ts: i64, key: &[u8], value: &[u8]) -> i32 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::emit(port as i32, ts, key.as_ptr(), len(key), value.as_ptr(), len(value))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (port, ts, len(key), value);
        NO_HOST
    }
}

pub fn emit_batch(batch: &[u8]) -> i32 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::emit_batch(batch.as_ptr(), len(batch))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = len(batch);
        NO_HOST
    }
}

pub fn output_index(name: &[u8]) -> i32 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::output_index(name.as_ptr(), len(name))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = len(name);
        NO_HOST
    }
}

pub fn state_register(name: &[u8], kind: i32) -> i32 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::state_register(name.as_ptr(), len(name), kind)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (len(name), kind);
        NO_HOST
    }
}

/// state_get into the cap bytes at out (which may be uninitialized: the
/// host only writes there); returns the value's length or a status.
pub fn state_get(h: i32, key: &[u8], ns: &[u8], out: *mut u8, cap: usize) -> i32 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::state_get(h, key.as_ptr(), len(key), ns.as_ptr(), len(ns), out, cap as i32)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (h, len(key), len(ns), out, cap);
        NO_HOST
    }
}

pub fn state_put(h: i32, key: &[u8], ns: &[u8], value: &[u8]) -> i32 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::state_put(h, key.as_ptr(), len(key), ns.as_ptr(), len(ns), value.as_ptr(), len(value))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (h, len(key), len(ns), value);
        NO_HOST
    }
}

pub fn state_delete(h: i32, key: &[u8], ns: &[u8]) -> i32 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::state_delete(h, key.as_ptr(), len(key), ns.as_ptr(), len(ns))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (h, len(key), len(ns));
        NO_HOST
    }
}

/// state_iter into the cap bytes at out, like state_get; after None starts
/// at the first entry.
pub fn state_iter(h: i32, key: &[u8], prefix: &[u8], after: Option<&[u8]>, out: *mut u8, cap: usize) -> i32 {
    let (after_ptr, after_len) = match after {
        Some(a) => (a.as_ptr(), len(a)),
        None => (core::ptr::null(), -1),
    };
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::state_iter(
            h,
            key.as_ptr(),
            len(key),
            prefix.as_ptr(),
            len(prefix),
            after_ptr,
            after_len,
            out,
            cap as i32,
        )
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (h, len(key), len(prefix), after_ptr, after_len, out, cap);
        NO_HOST
    }
}

/// state_get_many over the req_len bytes of requests at req, into the cap
/// bytes at out.
pub fn state_get_many(h: i32, req: *const u8, req_len: usize, out: *mut u8, cap: usize) -> i32 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::state_get_many(h, req, req_len as i32, out, cap as i32)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (h, req, req_len, out, cap);
        NO_HOST
    }
}

pub fn state_write_batch(writes: &[u8]) -> i32 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::state_write_batch(writes.as_ptr(), len(writes))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = len(writes);
        NO_HOST
    }
}

pub fn timer_register(domain: i32, key: &[u8], ns: &[u8], ts: i64) -> i32 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::timer_register(domain, key.as_ptr(), len(key), ns.as_ptr(), len(ns), ts)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (domain, len(key), len(ns), ts);
        NO_HOST
    }
}

pub fn timer_delete(domain: i32, key: &[u8], ns: &[u8], ts: i64) -> i32 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::timer_delete(domain, key.as_ptr(), len(key), ns.as_ptr(), len(ns), ts)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (domain, len(key), len(ns), ts);
        NO_HOST
    }
}

pub fn current_watermark() -> i64 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::current_watermark()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        i64::MIN
    }
}

pub fn processing_time() -> i64 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::processing_time()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        0
    }
}

pub fn log(level: i32, msg: &[u8]) {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::log(level, msg.as_ptr(), len(msg))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (level, len(msg));
    }
}

pub fn fail(msg: &[u8]) {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::fail(msg.as_ptr(), len(msg))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = len(msg);
    }
}

/// Names the word where the module keeps the index of the record or timer
/// its running callback is at (the optional import `progress_at`).
pub fn progress_at(word: &'static std::sync::atomic::AtomicU32) -> i32 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        // AtomicU32 has the in-memory representation of a u32.
        imports::progress_at(word as *const std::sync::atomic::AtomicU32 as *const u32)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = word;
        NO_HOST
    }
}

/// Says that the first `done` records (or timers) of the running batch
/// callback are done (the optional import `commit`) and returns how many
/// records the host wants before the next commit point, 0 for none.
pub fn commit(done: u32) -> i32 {
    #[cfg(target_arch = "wasm32")]
    unsafe {
        imports::commit(done as i32)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = done;
        NO_HOST
    }
}
