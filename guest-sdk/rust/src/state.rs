use std::rc::Rc;

use crate::cache::{Cached, MAX_KEY, MAX_VALUE};
use crate::context::Context;
use crate::text::quote;
use crate::{host, Error, Result, Status};

pub(crate) const VALUE: i32 = 1;
pub(crate) const MAP: i32 = 2;

const NOT_FOUND: i32 = -1;
const LIMIT: i32 = -9;

/// The first read buffer of a get, grown to the value's size when the host
/// reports a larger one.
const FIRST_GET: usize = 64;
/// The first page of a map iteration, doubled while one entry does not fit.
const FIRST_PAGE: usize = 4096;
/// The largest entry state_iter can return: its header, a namespace of at
/// most 64 KiB and a value of at most 16 MiB.
const MAX_PAGE: usize = 8 + (64 << 10) + (16 << 20);

pub(crate) fn kind_name(kind: i32) -> &'static str {
    if kind == VALUE {
        "value"
    } else {
        "map"
    }
}

/// A value state: one value per key (the current key) and namespace. Get it
/// from [`Context::value_state`] in the operator's constructor and keep it;
/// cloning is cheap.
#[derive(Debug, Clone)]
pub struct ValueState {
    h: i32,
    name: Rc<str>,
}

/// A value state at one namespace (for example a window): the same calls
/// as on [`ValueState`], which uses the empty namespace.
#[derive(Debug, Clone, Copy)]
pub struct Namespaced<'a> {
    h: i32,
    name: &'a str,
    ns: &'a [u8],
}

impl ValueState {
    pub(crate) fn new(h: i32, name: Rc<str>) -> ValueState {
        ValueState { h, name }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The state at namespace ns.
    pub fn ns<'a>(&'a self, ns: &'a [u8]) -> Namespaced<'a> {
        Namespaced { h: self.h, name: &self.name, ns }
    }

    /// The value of the current key, or None.
    pub fn get(&self, ctx: &Context) -> Result<Option<Vec<u8>>> {
        self.ns(&[]).get(ctx)
    }

    /// Reads the value into buf (replacing its content, keeping its
    /// capacity, so that a reused buf reads without allocating); false
    /// when there is none.
    pub fn get_into(&self, ctx: &Context, buf: &mut Vec<u8>) -> Result<bool> {
        self.ns(&[]).get_into(ctx, buf)
    }

    /// The value as an int64, 8 bytes little-endian; None when there is
    /// none, an error for a value of another size.
    pub fn get_i64(&self, ctx: &Context) -> Result<Option<i64>> {
        self.ns(&[]).get_i64(ctx)
    }

    /// Stores v (an empty value is a value, not a deletion).
    pub fn put(&self, ctx: &Context, v: &[u8]) -> Result<()> {
        self.ns(&[]).put(ctx, v)
    }

    /// Stores v as 8 bytes little-endian.
    pub fn put_i64(&self, ctx: &Context, v: i64) -> Result<()> {
        self.ns(&[]).put_i64(ctx, v)
    }

    /// Deletes the value; deleting an absent value is fine.
    pub fn delete(&self, ctx: &Context) -> Result<()> {
        self.ns(&[]).delete(ctx)
    }
}

impl Namespaced<'_> {
    pub fn get(&self, ctx: &Context) -> Result<Option<Vec<u8>>> {
        let mut v = Vec::new();
        Ok(if self.get_into(ctx, &mut v)? { Some(v) } else { None })
    }

    pub fn get_into(&self, ctx: &Context, buf: &mut Vec<u8>) -> Result<bool> {
        get_into(self.h, "value", self.name, ctx, self.ns, buf)
    }

    pub fn get_i64(&self, ctx: &Context) -> Result<Option<i64>> {
        get_i64(self.h, "value", self.name, ctx, self.ns)
    }

    pub fn put(&self, ctx: &Context, v: &[u8]) -> Result<()> {
        put(self.h, "value", self.name, ctx, self.ns, v)
    }

    pub fn put_i64(&self, ctx: &Context, v: i64) -> Result<()> {
        put(self.h, "value", self.name, ctx, self.ns, &v.to_le_bytes())
    }

    pub fn delete(&self, ctx: &Context) -> Result<()> {
        delete(self.h, "value", self.name, ctx, self.ns)
    }
}

/// A map state: a sorted map per key (the current key) whose keys are
/// state namespaces. Get it from [`Context::map_state`] in the operator's
/// constructor and keep it; cloning is cheap.
#[derive(Debug, Clone)]
pub struct MapState {
    h: i32,
    name: Rc<str>,
}

impl MapState {
    pub(crate) fn new(h: i32, name: Rc<str>) -> MapState {
        MapState { h, name }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The entry k of the current key's map, or None.
    pub fn get(&self, ctx: &Context, k: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut v = Vec::new();
        Ok(if self.get_into(ctx, k, &mut v)? { Some(v) } else { None })
    }

    /// Reads entry k into buf, like [`ValueState::get_into`].
    pub fn get_into(&self, ctx: &Context, k: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
        get_into(self.h, "map", &self.name, ctx, k, buf)
    }

    /// Entry k as an int64, 8 bytes little-endian.
    pub fn get_i64(&self, ctx: &Context, k: &[u8]) -> Result<Option<i64>> {
        get_i64(self.h, "map", &self.name, ctx, k)
    }

    pub fn put(&self, ctx: &Context, k: &[u8], v: &[u8]) -> Result<()> {
        put(self.h, "map", &self.name, ctx, k, v)
    }

    pub fn put_i64(&self, ctx: &Context, k: &[u8], v: i64) -> Result<()> {
        put(self.h, "map", &self.name, ctx, k, &v.to_le_bytes())
    }

    /// Deletes entry k; deleting an absent entry is fine.
    pub fn delete(&self, ctx: &Context, k: &[u8]) -> Result<()> {
        delete(self.h, "map", &self.name, ctx, k)
    }

    /// A cursor over the entries of the current key whose map key starts
    /// with prefix (every entry for an empty prefix), in map-key byte order:
    ///
    /// ```ignore
    /// let mut it = self.m.iter(b"user-");
    /// while let Some((k, v)) = it.next(ctx)? {
    ///     ctx.emit(k, v, 0);
    /// }
    /// ```
    ///
    /// It pages through the host's state_iter; the entries borrow the
    /// cursor, so the context stays free for emitting and for other state
    /// calls (cursors nest).
    pub fn iter(&self, prefix: &[u8]) -> MapIter {
        MapIter {
            h: self.h,
            name: self.name.clone(),
            prefix: prefix.to_vec(),
            page: Vec::new(),
            pos: 0,
            last: None,
            after: Vec::new(),
            started: false,
            done: false,
        }
    }

    /// Calls f with every entry iter(prefix) yields, stopping at the first
    /// error.
    pub fn for_each<F>(&self, ctx: &mut Context, prefix: &[u8], mut f: F) -> Result<()>
    where
        F: FnMut(&mut Context, &[u8], &[u8]) -> Result<()>,
    {
        let mut it = self.iter(prefix);
        while let Some((k, v)) = it.next(ctx)? {
            f(ctx, k, v)?;
        }
        Ok(())
    }
}

/// A cursor over map entries; see [`MapState::iter`].
pub struct MapIter {
    h: i32,
    name: Rc<str>,
    prefix: Vec<u8>,
    page: Vec<u8>,
    pos: usize,
    last: Option<(usize, usize)>, // the last namespace returned, in page
    after: Vec<u8>,
    started: bool, // after holds the namespace to continue after
    done: bool,
}

impl MapIter {
    /// The next entry (map key, value), or None after the last one.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self, ctx: &Context) -> Result<Option<(&[u8], &[u8])>> {
        while self.pos >= self.page.len() {
            if self.done {
                return Ok(None);
            }
            // The host iterates its own state: hand it the cached writes
            // first.
            ctx.flush_state()?;
            self.fetch(ctx.raw_key())?;
        }
        let p = &self.page[self.pos..];
        let bad = |what: &str| {
            Err(Error::with_status(
                Status::StateError,
                format!("iterate map state {}: {}: {}", quote(self.name.as_bytes()), what, Status::StateError.text()),
            ))
        };
        if p.len() < 8 {
            return bad("truncated entry header");
        }
        let nl = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize;
        let vl = u32::from_le_bytes([p[4], p[5], p[6], p[7]]) as usize;
        if nl > p.len() - 8 || vl > p.len() - 8 - nl {
            return bad(&format!("entry of {}+{} bytes overruns the page", nl, vl));
        }
        let start = self.pos + 8;
        self.last = Some((start, nl));
        self.pos = start + nl + vl;
        Ok(Some((&self.page[start..start + nl], &self.page[start + nl..start + nl + vl])))
    }

    fn fetch(&mut self, key: &[u8]) -> Result<()> {
        // Continue after the last namespace returned; copy it out first,
        // since the page is about to be overwritten or reallocated.
        if let Some((s, n)) = self.last.take() {
            self.after.clear();
            self.after.extend_from_slice(&self.page[s..s + n]);
            self.started = true;
        }
        self.page.clear();
        self.pos = 0;
        if self.page.capacity() < FIRST_PAGE {
            self.page.reserve_exact(FIRST_PAGE);
        }
        loop {
            let cap = self.page.capacity();
            let after = if self.started { Some(&self.after[..]) } else { None };
            // The host writes at most cap bytes into the spare capacity and
            // returns how many it wrote; only those become part of the page.
            let n = host::state_iter(self.h, key, &self.prefix, after, self.page.as_mut_ptr(), cap);
            if n == LIMIT && cap < MAX_PAGE {
                // Not even the first entry fits: grow the page and retry.
                let want = (cap * 2).min(MAX_PAGE);
                if self.page.try_reserve_exact(want).is_err() {
                    return Err(Error::with_status(
                        Status::Limit,
                        format!(
                            "iterate map state {}: out of memory for a {}-byte page",
                            quote(self.name.as_bytes()),
                            want
                        ),
                    ));
                }
                continue;
            }
            if n < 0 {
                return Err(Error::host(n, format_args!("iterate map state {}", quote(self.name.as_bytes()))));
            }
            let n = n as usize;
            if n > cap {
                return Err(Error::with_status(
                    Status::StateError,
                    format!(
                        "iterate map state {}: host wrote {} bytes into a {}-byte buffer: {}",
                        quote(self.name.as_bytes()),
                        n,
                        cap,
                        Status::StateError.text()
                    ),
                ));
            }
            // SAFETY: the host initialized the first n bytes.
            unsafe { self.page.set_len(n) };
            if n == 0 {
                self.done = true;
            }
            return Ok(());
        }
    }
}

/// cached looks (h, current key, ns) up in the state cache: Some(found)
/// when it answered into buf, None when state_get must read it; found
/// values are then kept with keep.
fn cached(ctx: &Context, h: i32, ns: &[u8], buf: &mut Vec<u8>) -> core::result::Result<bool, Option<usize>> {
    if ctx.raw_key().len() > MAX_KEY || ns.len() > MAX_KEY {
        return Err(None);
    }
    match ctx.cache.borrow_mut().get(h, ns) {
        Some((Cached::Value(p, n), _)) => {
            buf.clear();
            // SAFETY: the cache's value lies in memory it keeps until the
            // callback returns.
            buf.extend_from_slice(unsafe { std::slice::from_raw_parts(p, n) });
            Ok(true)
        }
        Some((Cached::Absent, _)) => {
            buf.clear();
            Ok(false)
        }
        Some((Cached::Unknown, j)) => Err(Some(j)),
        None => Err(None),
    }
}

fn get_into(h: i32, kind: &str, name: &str, ctx: &Context, ns: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
    match cached(ctx, h, ns, buf) {
        Ok(found) => Ok(found),
        Err(group) => {
            let found = get_direct(h, kind, name, ctx.raw_key(), ns, buf)?;
            if let (true, Some(j)) = (found, group) {
                ctx.cache.borrow_mut().keep(j, buf);
            }
            Ok(found)
        }
    }
}

/// get_direct reads (key, ns) of h with state_get into buf.
fn get_direct(h: i32, kind: &str, name: &str, key: &[u8], ns: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
    buf.clear();
    if buf.capacity() < FIRST_GET {
        buf.reserve_exact(FIRST_GET);
    }
    let mut grown = false;
    loop {
        let cap = buf.capacity();
        // As in MapIter::fetch: the host writes into the spare capacity and
        // only what it wrote becomes part of the vector.
        let n = host::state_get(h, key, ns, buf.as_mut_ptr(), cap);
        if n == NOT_FOUND {
            return Ok(false);
        }
        if n < 0 {
            return Err(Error::host(n, format_args!("get {} state {}", kind, quote(name.as_bytes()))));
        }
        let n = n as usize;
        if n <= cap {
            // SAFETY: the host copied the n-byte value.
            unsafe { buf.set_len(n) };
            return Ok(true);
        }
        // Too small: nothing was copied. The value cannot change within the
        // callback, so one retry with n bytes is enough.
        if grown {
            return Err(Error::with_status(
                Status::StateError,
                format!(
                    "get {} state {}: host reported {} bytes after {}: {}",
                    kind,
                    quote(name.as_bytes()),
                    n,
                    cap,
                    Status::StateError.text()
                ),
            ));
        }
        if buf.try_reserve_exact(n).is_err() {
            return Err(Error::with_status(
                Status::Limit,
                format!("get {} state {}: out of memory for a {}-byte value", kind, quote(name.as_bytes()), n),
            ));
        }
        grown = true;
    }
}

fn get_i64(h: i32, kind: &str, name: &str, ctx: &Context, ns: &[u8]) -> Result<Option<i64>> {
    if ctx.raw_key().len() <= MAX_KEY && ns.len() <= MAX_KEY {
        let got = ctx.cache.borrow_mut().get(h, ns);
        match got {
            // SAFETY: the cache's value lies in memory it keeps until the
            // callback returns.
            Some((Cached::Value(p, 8), _)) => return Ok(Some(i64::from_le_bytes(unsafe { *(p as *const [u8; 8]) }))),
            Some((Cached::Value(_, n), _)) => return Err(not_i64(kind, name, n as i32)),
            Some((Cached::Absent, _)) => return Ok(None),
            Some((Cached::Unknown, j)) => {
                let v = get_i64_direct(h, kind, name, ctx.raw_key(), ns)?;
                if let Some(v) = v {
                    ctx.cache.borrow_mut().keep(j, &v.to_le_bytes());
                }
                return Ok(v);
            }
            None => {}
        }
    }
    get_i64_direct(h, kind, name, ctx.raw_key(), ns)
}

fn not_i64(kind: &str, name: &str, n: i32) -> Error {
    Error::with_status(
        Status::BadArgument,
        format!(
            "{} state {} holds {} bytes, not an 8-byte int64: {}",
            kind,
            quote(name.as_bytes()),
            n,
            Status::BadArgument.text()
        ),
    )
}

fn get_i64_direct(h: i32, kind: &str, name: &str, key: &[u8], ns: &[u8]) -> Result<Option<i64>> {
    let mut b = [0u8; 8];
    let n = host::state_get(h, key, ns, b.as_mut_ptr(), b.len());
    match n {
        NOT_FOUND => Ok(None),
        8 => Ok(Some(i64::from_le_bytes(b))),
        n if n < 0 => Err(Error::host(n, format_args!("get {} state {}", kind, quote(name.as_bytes())))),
        n => Err(not_i64(kind, name, n)),
    }
}

/// write records a put (Some) or a delete (None) in the state cache; false
/// when the cache does not hold the entry and the write must go to the
/// host at once.
fn write(h: i32, kind: &str, verb: &str, name: &str, ctx: &Context, ns: &[u8], v: Option<&[u8]>) -> Result<bool> {
    if ctx.raw_key().len() > MAX_KEY || ns.len() > MAX_KEY || v.map_or(false, |v| v.len() > MAX_VALUE) {
        return Err(Error::host(LIMIT, format_args!("{} {} state {}", verb, kind, quote(name.as_bytes()))));
    }
    let res = ctx.cache.borrow_mut().put(h, ns, v);
    res.map_err(|()| {
        Error::with_status(Status::Limit, format!("{} {} state {}: out of memory", verb, kind, quote(name.as_bytes())))
    })
}

fn put(h: i32, kind: &str, name: &str, ctx: &Context, ns: &[u8], v: &[u8]) -> Result<()> {
    if write(h, kind, "put", name, ctx, ns, Some(v))? {
        return Ok(());
    }
    let st = host::state_put(h, ctx.raw_key(), ns, v);
    if st < 0 {
        return Err(Error::host(st, format_args!("put {} state {}", kind, quote(name.as_bytes()))));
    }
    Ok(())
}

fn delete(h: i32, kind: &str, name: &str, ctx: &Context, ns: &[u8]) -> Result<()> {
    if write(h, kind, "delete", name, ctx, ns, None)? {
        return Ok(());
    }
    let st = host::state_delete(h, ctx.raw_key(), ns);
    if st < 0 {
        return Err(Error::host(st, format_args!("delete {} state {}", kind, quote(name.as_bytes()))));
    }
    Ok(())
}
