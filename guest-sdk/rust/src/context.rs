use std::cell::{Cell, RefCell};
use std::rc::Rc;

use crate::cache::StateCache;
use crate::json::Json;
use crate::state::{self, MapState, ValueState};
use crate::text::{abbreviate, quote};
use crate::{host, Error, Level, Result, Status, TimeDomain};

/// Buffered output goes to the host once it passes this size.
const FLUSH_AT: usize = 64 << 10;

/// A record header in a batch: port u32, ts i64, klen u32, vlen u32.
const RECORD_HEADER: usize = 20;

/// The index of one of the operator's outputs, as [`Context::output`]
/// returns it. `Output::MAIN` (0) is the first output, the one `emit` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Output(pub u32);

impl Output {
    pub const MAIN: Output = Output(0);
}

pub(crate) struct StateInfo {
    pub name: Rc<str>,
    pub kind: i32,
    pub handle: i32,
}

/// An operator's view of the host, passed to its constructor and to every
/// callback: its name and configuration, the current key, output, keyed
/// state and timers, time and logging.
pub struct Context {
    pub(crate) name: Rc<str>,
    config: Vec<u8>,
    pub(crate) opening: bool,
    // The current key lies in the host's batch (the argument arena), which
    // stays put during a callback.
    key_ptr: *const u8,
    key_len: usize,
    watermark: Cell<Option<i64>>,
    pub(crate) states: Vec<StateInfo>,
    out: Vec<u8>,
    out_count: u32,
    emit_err: Option<Error>,
    /// State cached for the callback in progress (cache.rs).
    pub(crate) cache: RefCell<StateCache>,
}

impl Context {
    pub(crate) fn new(name: &str, config: &[u8]) -> Context {
        let mut out = Vec::with_capacity(4096);
        out.extend_from_slice(&[0; 4]);
        Context {
            name: Rc::from(name),
            config: config.to_vec(),
            opening: false,
            key_ptr: [].as_ptr(),
            key_len: 0,
            watermark: Cell::new(None),
            states: Vec::new(),
            out,
            out_count: 0,
            emit_err: None,
            cache: RefCell::new(StateCache::default()),
        }
    }

    /// Hands the cached state writes to the host.
    pub(crate) fn flush_state(&self) -> Result<()> {
        let res = self.cache.borrow_mut().flush();
        res.map_err(|(st, h)| self.write_back_error(st, h))
    }

    /// Marks a commit point before record (or timer) i: the cached state
    /// writes and the buffered output of the records before it go to the
    /// host, which keeps them should the callback fail later (dead-letter
    /// mode then runs again only the records after it). Returns the index
    /// of the next point the host asks for, u32::MAX for none.
    pub(crate) fn commit_point(&mut self, i: u32) -> Result<u32> {
        self.flush_state()?;
        let err = self.cache.borrow().err;
        if let Some((st, h)) = err {
            return Err(self.write_back_error(st, h));
        }
        self.flush();
        if let Some(e) = self.emit_err.take() {
            return Err(e);
        }
        let st = host::commit(i);
        if st < 0 {
            return Err(Error::host(st, format_args!("commit point before record {}", i)));
        }
        Ok(if st == 0 { u32::MAX } else { i + st as u32 })
    }

    /// Writes the cached state writes back and empties the cache, at the
    /// end of a callback.
    pub(crate) fn end_state(&self) -> Result<()> {
        let mut res = self.flush_state();
        let mut cache = self.cache.borrow_mut();
        if let (Ok(()), Some((st, h))) = (&res, cache.err) {
            res = Err(self.write_back_error(st, h));
        }
        cache.reset();
        res
    }

    fn write_back_error(&self, st: i32, h: Option<i32>) -> Error {
        match h.and_then(|h| self.states.iter().find(|s| s.handle == h)) {
            Some(s) => Error::host(st, format_args!("write back state {}", quote(s.name.as_bytes()))),
            None => Error::host(st, format_args!("write back state")),
        }
    }

    /// Prepares a callback: no key, a fresh watermark, an empty output.
    pub(crate) fn begin(&mut self) {
        self.set_key(&[]);
        self.watermark.set(None);
        self.emit_err = None;
        self.drop_output();
    }

    pub(crate) fn set_key(&mut self, key: &[u8]) {
        self.key_ptr = key.as_ptr();
        self.key_len = key.len();
    }

    /// Drops what the callback buffered (it failed).
    pub(crate) fn drop_output(&mut self) {
        self.out.truncate(4);
        self.out_count = 0;
    }

    /// Hands the buffered output to the host, then reports the first output
    /// error of the callback, if any.
    pub(crate) fn finish_output(&mut self) -> Result<()> {
        self.flush();
        match self.emit_err.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn flush(&mut self) {
        if self.out_count == 0 {
            return;
        }
        let n = self.out_count;
        self.out[..4].copy_from_slice(&n.to_le_bytes());
        let st = host::emit_batch(&self.out);
        if st < 0 && self.emit_err.is_none() {
            self.emit_err = Some(Error::host(st, format_args!("emitting {} records", n)));
        }
        self.drop_output();
        // A single huge record should not pin its memory for ever.
        if self.out.capacity() > 4 * FLUSH_AT {
            self.out.shrink_to(FLUSH_AT);
        }
    }

    /// The name the operator was opened under.
    pub fn operator(&self) -> &str {
        &self.name
    }

    /// The vertex's configuration from the job plan (JSON in canonical form:
    /// compact, keys sorted), empty when the plan gives none.
    pub fn config(&self) -> &[u8] {
        &self.config
    }

    /// The configuration parsed as JSON; None when it is empty.
    pub fn config_json(&self) -> Result<Option<Json>> {
        if self.config.is_empty() {
            return Ok(None);
        }
        match Json::parse(&self.config) {
            Ok(v) => Ok(Some(v)),
            Err(e) => Err(Error::with_status(
                Status::BadArgument,
                format!("config {}: not a JSON object: {}", abbreviate(&self.config, 64), e),
            )),
        }
    }

    // member returns a top-level member of the configuration, None when the
    // configuration is empty, lacks it or it is null.
    fn member(&self, name: &str) -> Result<Option<Json>> {
        let v = match self.config_json()? {
            None => return Ok(None),
            Some(v) => v,
        };
        if !matches!(v, Json::Object(_)) {
            return Err(Error::with_status(
                Status::BadArgument,
                format!("config {}: not a JSON object: it is {}", abbreviate(&self.config, 64), v.kind()),
            ));
        }
        match v.get(name) {
            None | Some(Json::Null) => Ok(None),
            Some(m) => Ok(Some(m.clone())),
        }
    }

    fn wrong_type(name: &str, m: &Json, want: &str) -> Error {
        Error::with_status(
            Status::BadArgument,
            format!("config member {} is {}, not {}", quote(name.as_bytes()), m.kind(), want),
        )
    }

    /// A top-level integer member of the JSON object configuration: None
    /// when the configuration is empty or lacks it (or it is null); an error
    /// naming the member when it is not an integer that fits in 64 bits.
    pub fn config_i64(&self, name: &str) -> Result<Option<i64>> {
        match self.member(name)? {
            None => Ok(None),
            Some(m @ Json::Number(_)) => m.as_i64().map(Some).map_err(|e| {
                Error::with_status(Status::BadArgument, format!("config member {}: {}", quote(name.as_bytes()), e))
            }),
            Some(m) => Err(Self::wrong_type(name, &m, "an integer")),
        }
    }

    /// A top-level string member, like config_i64.
    pub fn config_str(&self, name: &str) -> Result<Option<String>> {
        match self.member(name)? {
            None => Ok(None),
            Some(Json::String(s)) => Ok(Some(s)),
            Some(m) => Err(Self::wrong_type(name, &m, "a string")),
        }
    }

    /// A top-level boolean member, like config_i64.
    pub fn config_bool(&self, name: &str) -> Result<Option<bool>> {
        match self.member(name)? {
            None => Ok(None),
            Some(Json::Bool(b)) => Ok(Some(b)),
            Some(m) => Err(Self::wrong_type(name, &m, "a boolean")),
        }
    }

    /// The current key: the record's in `process`, the timer's in
    /// `on_timer`, empty elsewhere. Keyed state and timers act on it.
    pub fn key(&self) -> &[u8] {
        // SAFETY: key_ptr/key_len name the current record's key inside the
        // host's batch, which the host leaves alone until the callback
        // returns, or an empty slice.
        unsafe { std::slice::from_raw_parts(self.key_ptr, self.key_len) }
    }

    /// The key with a lifetime not tied to self, for the state calls that
    /// also borrow their handle's buffers.
    pub(crate) fn raw_key<'a>(&self) -> &'a [u8] {
        // SAFETY: as in key; the slice is used only during the callback.
        unsafe { std::slice::from_raw_parts(self.key_ptr, self.key_len) }
    }

    /// Sends a record to the main output (index 0). The SDK copies it into
    /// its output buffer; see the crate documentation.
    pub fn emit(&mut self, key: &[u8], value: &[u8], ts: i64) {
        self.emit_to(Output::MAIN, key, value, ts)
    }

    /// Sends a record to output `output` (see [`Context::output`]).
    pub fn emit_to(&mut self, output: Output, key: &[u8], value: &[u8], ts: i64) {
        let out = &mut self.out;
        out.reserve(RECORD_HEADER + key.len() + value.len());
        out.extend_from_slice(&output.0.to_le_bytes());
        out.extend_from_slice(&ts.to_le_bytes());
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(value);
        self.out_count += 1;
        if self.out.len() > FLUSH_AT {
            self.flush();
        }
    }

    /// One `emit` host call for one record, after handing the buffered
    /// output to the host so that records keep their order; the host's
    /// verdict comes back at once. The slow path.
    pub fn emit_unbuffered(&mut self, output: Output, key: &[u8], value: &[u8], ts: i64) -> Result<()> {
        self.flush();
        let st = host::emit(output.0, ts, key, value);
        if st < 0 {
            return Err(Error::host(st, format_args!("emit to output {}", output.0)));
        }
        Ok(())
    }

    /// The index of the named output of the operator's vertex (its
    /// position in the plan's "outputs", default ["main"]). Look outputs up
    /// in the constructor and keep them.
    pub fn output(&self, name: &str) -> Result<Output> {
        let st = host::output_index(name.as_bytes());
        if st < 0 {
            return Err(Error::host(st, format_args!("output {}", quote(name.as_bytes()))));
        }
        Ok(Output(st as u32))
    }

    /// The event-time watermark, fetched once per callback:
    /// [`MIN_WATERMARK`](crate::MIN_WATERMARK) before the first one,
    /// [`MAX_WATERMARK`](crate::MAX_WATERMARK) once the input ended.
    pub fn watermark(&self) -> i64 {
        match self.watermark.get() {
            Some(w) => w,
            None => {
                let w = host::current_watermark();
                self.watermark.set(Some(w));
                w
            }
        }
    }

    /// The host's wall clock, in milliseconds since the Unix epoch.
    pub fn processing_time(&self) -> i64 {
        host::processing_time()
    }

    /// Writes to the worker's log, tagged with the operator and subtask.
    pub fn log(&self, level: Level, msg: &str) {
        host::log(level as i32, msg.as_bytes())
    }

    /// The value state called name: registered in the constructor (the only
    /// place the host accepts new states), looked up later. The same name
    /// again is the same state.
    pub fn value_state(&mut self, name: &str) -> Result<ValueState> {
        let (h, name) = self.state(name, state::VALUE)?;
        Ok(ValueState::new(h, name))
    }

    /// The map state called name, like value_state.
    pub fn map_state(&mut self, name: &str) -> Result<MapState> {
        let (h, name) = self.state(name, state::MAP)?;
        Ok(MapState::new(h, name))
    }

    fn state(&mut self, name: &str, kind: i32) -> Result<(i32, Rc<str>)> {
        if let Some(s) = self.states.iter().find(|s| &*s.name == name) {
            if s.kind != kind {
                return Err(Error::with_status(
                    Status::BadArgument,
                    format!(
                        "state {} is a {} state, not a {} state",
                        quote(name.as_bytes()),
                        state::kind_name(s.kind),
                        state::kind_name(kind)
                    ),
                ));
            }
            return Ok((s.handle, s.name.clone()));
        }
        let method = if kind == state::VALUE { "value_state" } else { "map_state" };
        if !self.opening {
            return Err(Error::with_status(
                Status::BadHandle,
                format!(
                    "{} state {q} was not registered: call ctx.{}({q}) in the operator's constructor",
                    state::kind_name(kind),
                    method,
                    q = quote(name.as_bytes())
                ),
            ));
        }
        let h = host::state_register(name.as_bytes(), kind);
        if h < 0 {
            return Err(Error::host(
                h,
                format_args!("registering {} state {}", state::kind_name(kind), quote(name.as_bytes())),
            ));
        }
        let name: Rc<str> = Rc::from(name);
        self.states.push(StateInfo { name: name.clone(), kind, handle: h });
        Ok((h, name))
    }

    /// Registers a timer of the current key: it fires `on_timer` once when
    /// the watermark (event time) or the wall clock (processing time)
    /// reaches ts, with this key and namespace ns. The same (domain, key,
    /// ns, ts) twice is one timer.
    pub fn register_timer(&self, domain: TimeDomain, ts: i64, ns: &[u8]) -> Result<()> {
        let st = host::timer_register(domain.code(), self.key(), ns, ts);
        if st < 0 {
            return Err(Error::host(st, format_args!("register {} timer at {}", domain, ts)));
        }
        Ok(())
    }

    /// Deletes a timer of the current key; deleting an absent one is fine.
    pub fn delete_timer(&self, domain: TimeDomain, ts: i64, ns: &[u8]) -> Result<()> {
        let st = host::timer_delete(domain.code(), self.key(), ns, ts);
        if st < 0 {
            return Err(Error::host(st, format_args!("delete {} timer at {}", domain, ts)));
        }
        Ok(())
    }

    pub fn register_event_timer(&self, ts: i64, ns: &[u8]) -> Result<()> {
        self.register_timer(TimeDomain::Event, ts, ns)
    }

    pub fn register_processing_timer(&self, ts: i64, ns: &[u8]) -> Result<()> {
        self.register_timer(TimeDomain::Processing, ts, ns)
    }

    pub fn delete_event_timer(&self, ts: i64, ns: &[u8]) -> Result<()> {
        self.delete_timer(TimeDomain::Event, ts, ns)
    }

    pub fn delete_processing_timer(&self, ts: i64, ns: &[u8]) -> Result<()> {
        self.delete_timer(TimeDomain::Processing, ts, ns)
    }
}
