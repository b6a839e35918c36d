//! window is a WebAssembly operator module with an event-time
//! tumbling-window sum: the operator "window" sums the decimal values of
//! each key per window of config "size" milliseconds and emits one record
//! per key and window when the watermark passes the window's end. Records
//! for windows the watermark already passed go unchanged to the second
//! output, "late". It is the Rust twin of examples/wasm/go/window, with the
//! same plan, state layout and output.

use wstream::text::{append_i64, parse_i64, quote, ParseIntError};
use wstream::{error, Context, Operator, Output, Record, Result, Timer, ValueState};

const PLAN: &str = r#"{"name":"window","maxParallelism":128,"parallelism":2,
 "vertices":[
  {"id":"source","kind":"source","connector":"file","parallelism":1,
   "config":{"path":"input.tsv","format":"tsv","watermarkDelay":2000}},
  {"id":"window","kind":"operator","operator":"window","config":{"size":1000},"outputs":["main","late"]},
  {"id":"sink","kind":"sink","connector":"stdout","parallelism":1},
  {"id":"late","kind":"sink","connector":"stdout","parallelism":1}],
 "edges":[
  {"from":"source","to":"window","partition":"key"},
  {"from":"window","to":"sink","partition":"rebalance"},
  {"from":"window","to":"late","partition":"rebalance","output":"late"}]}"#;

wstream::module! {
    operators: { "window" => Window::open },
    plan: PLAN,
}

struct Window {
    size: i64,
    late: Output,
    /// One sum per key and window; the namespace is the window's end,
    /// 8 bytes big-endian (non-negative ends sort by time).
    sum: ValueState,
    buf: Vec<u8>,
}

impl Window {
    fn open(ctx: &mut Context) -> Result<Window> {
        let size = ctx.config_i64("size")?.unwrap_or(1000);
        if size <= 0 {
            return Err(error!("config size must be a positive number of milliseconds, got {}", size));
        }
        let late =
            ctx.output("late").map_err(|e| error!("the window vertex needs outputs [\"main\",\"late\"]: {}", e))?;
        Ok(Window { size, late, sum: ctx.value_state("sum")?, buf: Vec::with_capacity(64) })
    }
}

/// bounds returns the window [start, end) holding ts: start is ts rounded
/// down (towards minus infinity) to a multiple of size. Bounds beyond the
/// int64 range are clamped to it.
fn bounds(ts: i64, size: i64) -> (i64, i64) {
    let rem = ts % size;
    if rem < 0 {
        // ts is negative: the boundary above it is ts-rem.
        let end = ts - rem;
        if end < i64::MIN + size {
            return (i64::MIN, end);
        }
        return (end - size, end);
    }
    let start = ts - rem;
    if start > i64::MAX - size {
        return (start, i64::MAX);
    }
    (start, start + size)
}

/// parse parses a decimal int64 value, as strconv.ParseInt does.
fn parse(v: &[u8]) -> Result<i64> {
    parse_i64(v).map_err(|e| match e {
        ParseIntError::Invalid => error!("value {} is not a decimal integer", quote(v)),
        ParseIntError::Overflow => error!("value {} overflows int64", quote(v)),
    })
}

impl Operator for Window {
    fn process(&mut self, ctx: &mut Context, r: &Record) -> Result<()> {
        let (_, end) = bounds(r.timestamp, self.size);
        if end.wrapping_sub(1) <= ctx.watermark() {
            ctx.emit_to(self.late, r.key, r.value, r.timestamp);
            return Ok(());
        }
        let v = parse(r.value)?;
        let ns = end.to_be_bytes();
        let sum = self.sum.ns(&ns);
        let s = sum.get_i64(ctx)?.unwrap_or(0);
        sum.put_i64(ctx, s.wrapping_add(v))?;
        ctx.register_event_timer(end - 1, &ns)
    }

    fn on_timer(&mut self, ctx: &mut Context, t: &Timer) -> Result<()> {
        let ns: [u8; 8] = t
            .namespace
            .try_into()
            .map_err(|_| error!("timer namespace has {} bytes, want an 8-byte window end", t.namespace.len()))?;
        let end = i64::from_be_bytes(ns);
        let sum = self.sum.ns(&ns);
        let s = match sum.get_i64(ctx)? {
            Some(s) => s,
            None => return Ok(()),
        };
        let b = &mut self.buf;
        b.clear();
        append_i64(b, end.wrapping_sub(self.size));
        b.push(b',');
        append_i64(b, end);
        b.push(b',');
        append_i64(b, s);
        ctx.emit(t.key, b, t.timestamp);
        sum.delete(ctx)
    }
}
