//! The per-callback state cache (abi/ABI.md, "How the SDKs use them").
//!
//! Two host calls per record add up, so state does not cross the ABI per
//! get and put. In `process` and `on_timer`, the first
//! access to a state at a namespace reads it for the keys of the next
//! records from the current one on, in one `state_get_many` whose requests
//! point at the keys in the batch; the host's results are the cache, which
//! later accesses index by record, without hashing or comparing keys.
//! Writes change the results and mark them dirty; dirty entries go back in
//! `state_write_batch` calls before a map iteration and when the callback
//! ends, whether it succeeds or fails.

use crate::host;

/// Records a group reads ahead. The host reads them all, then writes back
/// those written: a few at a time, its state lookups stay in its caches.
const CHUNK: u32 = 256;
/// Entries of one state_write_batch.
const MAX_LIST: usize = 1 << 16;
const MAX_GROUPS: usize = 8;
const FIRST_BLOCK: usize = 16 << 10;
/// A larger block is freed after the callback.
const KEEP_BLOCK: usize = 1 << 20;
const FIRST_ROOM: usize = 16;
const MAX_ROOM: usize = 4096;
const REQUEST: usize = 16;
const RESULT: usize = 12;
const WRITE: usize = 28;
const DIRTY: u32 = 1 << 31;
const RECORD_HEADER: usize = 20;
/// The ABI's key and namespace limit and value limit.
pub(crate) const MAX_KEY: usize = 64 << 10;
pub(crate) const MAX_VALUE: usize = 16 << 20;
const NOT_FOUND: i32 = -1;

/// A group caches state h at namespace ns for the keys of records
/// [start, start + n) of the callback's batch: req holds the
/// state_get_many requests, one per record, res the host's results (and the
/// values after them). The result of record i's request names the request
/// of the first record with the same key, whose result is that key's
/// entry: the cache rewrites it on put and delete, with DIRTY in its first
/// field and the address of the value written.
struct Group {
    h: i32,
    ns: *const u8,
    ns_len: usize,
    start: u32,
    n: u32,
    req: *mut u8,
    res: *mut u8,
    /// Reading it failed: (h, ns) goes to the host at once.
    slow: bool,
}

/// What the cache knows of the current record's entry.
pub(crate) enum Cached {
    /// Its value (valid until the callback returns).
    Value(*const u8, usize),
    Absent,
    /// Nothing: state_get must read it (a value the results had no room
    /// for, or a status).
    Unknown,
}

pub(crate) struct StateCache {
    groups: Vec<Group>,
    /// The group of the last access, + 1; 0 for none.
    last: usize,
    /// group << 17 | request index, in the order first written.
    dirty: Vec<u32>,
    /// Memory for what the cache hands the host: blocks that never move
    /// during a callback; the last one is current.
    blocks: Vec<Box<[u8]>>,
    used: usize,
    list: Vec<u8>,
    room: usize,
    /// A write-back that failed before the end of the callback: its
    /// status, and the handle when it wrote one state.
    pub(crate) err: Option<(i32, Option<i32>)>,
    // The batch from the current record (or timer) on, the records left
    // and the record's index: what a group reads ahead. bp is null outside
    // process and on_timer.
    bp: *const u8,
    be: *const u8,
    left: u32,
    rec: u32,
}

impl Default for Group {
    fn default() -> Group {
        Group {
            h: -1,
            ns: core::ptr::null(),
            ns_len: 0,
            start: 0,
            n: 0,
            req: core::ptr::null_mut(),
            res: core::ptr::null_mut(),
            slow: true,
        }
    }
}

impl Default for StateCache {
    fn default() -> StateCache {
        StateCache {
            groups: Vec::new(),
            last: 0,
            dirty: Vec::new(),
            blocks: Vec::new(),
            used: 0,
            list: Vec::new(),
            room: 0,
            err: None,
            bp: core::ptr::null(),
            be: core::ptr::null(),
            left: 0,
            rec: 0,
        }
    }
}

#[inline]
fn le32(p: *const u8) -> u32 {
    // SAFETY: callers pass pointers to 4 readable bytes of the cache's
    // memory or the batch.
    unsafe { u32::from_le_bytes(*(p as *const [u8; 4])) }
}

#[inline]
fn put32(p: *mut u8, v: u32) {
    // SAFETY: callers pass pointers to 4 writable bytes of the cache's memory.
    unsafe { *(p as *mut [u8; 4]) = v.to_le_bytes() }
}

impl StateCache {
    /// Sets the record of the callback in progress: rest is the batch from
    /// it on, with left records, rec its index.
    #[inline]
    pub(crate) fn set_record(&mut self, rest: &[u8], left: u32, rec: u32) {
        self.bp = rest.as_ptr();
        // SAFETY: one past the end of rest.
        self.be = unsafe { rest.as_ptr().add(rest.len()) };
        self.left = left;
        self.rec = rec;
    }

    /// n bytes of stable memory, or None when memory runs out.
    fn alloc(&mut self, n: usize) -> Option<*mut u8> {
        let fits = match self.blocks.last() {
            Some(b) => b.len() - self.used >= n,
            None => false,
        };
        if !fits {
            let size = n.max(FIRST_BLOCK).max(2 * self.blocks.last().map_or(0, |b| b.len()));
            let mut v = Vec::new();
            v.try_reserve_exact(size).ok()?;
            v.resize(size, 0u8);
            self.blocks.push(v.into_boxed_slice());
            self.used = 0;
        }
        let b = self.blocks.last_mut()?;
        // SAFETY: used + n <= b.len().
        let p = unsafe { b.as_mut_ptr().add(self.used) };
        self.used += n;
        Some(p)
    }

    /// Empties the cache after a callback, keeping its memory for the next
    /// one (but not a block over KEEP_BLOCK).
    pub(crate) fn reset(&mut self) {
        self.groups.clear();
        self.last = 0;
        self.dirty.clear();
        self.err = None;
        self.bp = core::ptr::null();
        if let Some(b) = self.blocks.pop() {
            self.blocks.clear();
            if b.len() <= KEEP_BLOCK {
                self.blocks.push(b);
            }
        }
        self.used = 0;
        if self.list.capacity() > KEEP_BLOCK {
            self.list = Vec::new();
        }
    }

    /// The group that caches (h, ns) for the current record, created when
    /// there is room; None when the access must go to the host at once.
    fn group_for(&mut self, h: i32, ns: &[u8]) -> Option<usize> {
        if self.last != 0 {
            let g = &self.groups[self.last - 1];
            if g.h == h && self.rec.wrapping_sub(g.start) < g.n && same_ns(g, ns) {
                return Some(self.last - 1);
            }
        }
        if self.bp.is_null() {
            return None;
        }
        for j in 0..self.groups.len() {
            let g = &self.groups[j];
            if g.h != h || !same_ns(g, ns) {
                continue;
            }
            if g.slow {
                return None;
            }
            if self.rec.wrapping_sub(g.start) >= g.n {
                // Past its records: the group moves on to the next ones. Its
                // writes go back first, so that the host's answers include
                // them.
                if let Err(e) = self.flush() {
                    self.err.get_or_insert(e);
                }
                self.open(j, h, ns);
                if self.groups[j].slow {
                    self.last = 0;
                    return None;
                }
            }
            self.last = j + 1;
            return Some(j);
        }
        if self.groups.len() == MAX_GROUPS {
            return None;
        }
        self.groups.push(Group::default());
        let j = self.groups.len() - 1;
        self.open(j, h, ns);
        if self.groups[j].slow {
            return None;
        }
        self.last = j + 1;
        Some(j)
    }

    /// Makes group j the group of (h, ns) for the next CHUNK records from
    /// the current one on, read with one state_get_many. A group that
    /// cannot be read is slow.
    fn open(&mut self, j: usize, h: i32, ns: &[u8]) {
        self.groups[j] = Group { h, start: self.rec, ..Group::default() };
        let n = self.left.min(CHUNK) as usize;
        let nsc = match self.alloc(ns.len()) {
            Some(p) => p,
            None => return,
        };
        // SAFETY: nsc holds ns.len() bytes.
        unsafe { core::ptr::copy_nonoverlapping(ns.as_ptr(), nsc, ns.len()) };
        // A group that turns out slow still matches (h, ns): its accesses go
        // to the host at once rather than try again.
        self.groups[j].ns = nsc;
        self.groups[j].ns_len = ns.len();
        let req = match self.alloc(REQUEST * n) {
            Some(p) => p,
            None => return,
        };
        let mut p = self.bp;
        let mut k = 0;
        while k < n {
            // Records past the current one are not checked yet: stop at a
            // malformed one, which the callback reports when it gets there.
            let left = self.be as usize - p as usize;
            if left < RECORD_HEADER {
                break;
            }
            // SAFETY: the record's header lies in the batch.
            let (kl, vl) = unsafe { (le32(p.add(12)) as usize, le32(p.add(16)) as usize) };
            if kl > left - RECORD_HEADER || vl > left - RECORD_HEADER - kl {
                break;
            }
            // SAFETY: request k lies in req.
            let r = unsafe { req.add(REQUEST * k) };
            put32(r, (p as usize + RECORD_HEADER) as u32);
            put32(unsafe { r.add(4) }, kl as u32);
            put32(unsafe { r.add(8) }, nsc as usize as u32);
            put32(unsafe { r.add(12) }, ns.len() as u32);
            // SAFETY: within the batch, checked above.
            p = unsafe { p.add(RECORD_HEADER + kl + vl) };
            k += 1;
        }
        if self.room == 0 {
            self.room = FIRST_ROOM;
        }
        let cap = k * (RESULT + self.room);
        let res = match self.alloc(cap) {
            Some(p) => p,
            None => return,
        };
        let need = host::state_get_many(h, req, REQUEST * k, res, cap);
        if need < 0 {
            return;
        }
        if need as usize > cap && k > 0 {
            // Values were left out, to be read one by one: leave more room
            // next time.
            self.room = ((need as usize - RESULT * k) / k + 1).min(MAX_ROOM);
        }
        let g = &mut self.groups[j];
        g.n = k as u32;
        g.req = req;
        g.res = res;
        g.slow = false;
    }

    /// The current record's entry in group j and its request index.
    #[inline]
    fn entry(&self, j: usize) -> (*mut u8, u32) {
        let g = &self.groups[j];
        // SAFETY: rec - start < n: its result lies in res, and so does its
        // first's.
        unsafe {
            let f = le32(g.res.add(RESULT * (self.rec - g.start) as usize)) & !DIRTY;
            (g.res.add(RESULT * f as usize), f)
        }
    }

    /// What the cache holds for (h, current key, ns): None when the access
    /// must go to the host at once.
    pub(crate) fn get(&mut self, h: i32, ns: &[u8]) -> Option<(Cached, usize)> {
        let j = self.group_for(h, ns)?;
        let (r, _) = self.entry(j);
        let vlen = le32(unsafe { r.add(4) }) as i32;
        let vptr = le32(unsafe { r.add(8) });
        let c = if vlen >= 0 && vptr != 0 {
            Cached::Value(vptr as usize as *const u8, vlen as usize)
        } else if vlen == NOT_FOUND {
            Cached::Absent
        } else {
            Cached::Unknown
        };
        Some((c, j))
    }

    /// Keeps v, read with state_get, as the value of the current record's
    /// entry in group j.
    pub(crate) fn keep(&mut self, j: usize, v: &[u8]) {
        if let Some(p) = self.alloc(v.len()) {
            // SAFETY: p holds v.len() bytes.
            unsafe { core::ptr::copy_nonoverlapping(v.as_ptr(), p, v.len()) };
            let (r, _) = self.entry(j);
            put32(unsafe { r.add(4) }, v.len() as u32);
            put32(unsafe { r.add(8) }, p as usize as u32);
        }
    }

    /// Records a write of (h, current key, ns): v, or a deletion when v is
    /// None. False when the cache does not hold the entry (the write must
    /// go to the host at once); Err when memory runs out.
    pub(crate) fn put(&mut self, h: i32, ns: &[u8], v: Option<&[u8]>) -> core::result::Result<bool, ()> {
        let j = match self.group_for(h, ns) {
            Some(j) => j,
            None => return Ok(false),
        };
        let p = match v {
            Some(v) => {
                let p = self.alloc(v.len()).ok_or(())?;
                // SAFETY: p holds v.len() bytes.
                unsafe { core::ptr::copy_nonoverlapping(v.as_ptr(), p, v.len()) };
                p
            }
            None => core::ptr::null_mut(),
        };
        let (r, f) = self.entry(j);
        let first = le32(r);
        if first & DIRTY == 0 {
            put32(r, first | DIRTY);
            self.dirty.push((j as u32) << 17 | f);
        }
        match v {
            Some(v) => {
                put32(unsafe { r.add(4) }, v.len() as u32);
                put32(unsafe { r.add(8) }, p as usize as u32);
            }
            None => {
                put32(unsafe { r.add(4) }, NOT_FOUND as u32);
                put32(unsafe { r.add(8) }, 0);
            }
        }
        Ok(true)
    }

    /// Writes the dirty entries back to the host, in state_write_batch
    /// calls of at most MAX_LIST writes. Err is the failing status and, when
    /// every write was of one state, its handle.
    pub(crate) fn flush(&mut self) -> core::result::Result<(), (i32, Option<i32>)> {
        if self.dirty.is_empty() {
            return Ok(());
        }
        let dirty = core::mem::take(&mut self.dirty);
        let h = self.groups[(dirty[0] >> 17) as usize].h;
        let one = dirty.iter().all(|&e| self.groups[(e >> 17) as usize].h == h);
        let mut res = Ok(());
        for part in dirty.chunks(MAX_LIST) {
            self.list.clear();
            self.list.reserve(WRITE * part.len());
            for &e in part {
                let g = &self.groups[(e >> 17) as usize];
                let f = (e & 0x1ffff) as usize;
                // SAFETY: f is a request of g: its request and result exist.
                let (r, q) = unsafe { (g.res.add(RESULT * f), g.req.add(REQUEST * f)) };
                put32(r, f as u32); // clean again
                self.list.extend_from_slice(&g.h.to_le_bytes());
                // SAFETY: the request's 16 bytes, and the result's vptr and vlen.
                unsafe {
                    self.list.extend_from_slice(core::slice::from_raw_parts(q, REQUEST));
                    self.list.extend_from_slice(core::slice::from_raw_parts(r.add(8), 4));
                    self.list.extend_from_slice(core::slice::from_raw_parts(r.add(4), 4));
                }
            }
            let st = host::state_write_batch(&self.list);
            if st < 0 {
                res = Err((st, if one { Some(h) } else { None }));
                break;
            }
        }
        let mut dirty = dirty;
        dirty.clear();
        self.dirty = dirty;
        res
    }
}

#[inline]
fn same_ns(g: &Group, ns: &[u8]) -> bool {
    // SAFETY: g.ns holds g.ns_len bytes of the cache's memory.
    g.ns_len == ns.len() && (ns.is_empty() || unsafe { core::slice::from_raw_parts(g.ns, g.ns_len) } == ns)
}
