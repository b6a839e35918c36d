//! wordcount is a WebAssembly operator module that counts words: the
//! operator "split" turns lines into words and the operator "count" keeps a
//! count per word and emits every word's final count at the end of a
//! bounded input. It is the Rust twin of examples/wasm/go/wordcount, with
//! the same plan and the same output. Build it with (see guest-sdk/rust)
//!
//!     rustc --edition 2021 --target wasm32-unknown-unknown --crate-type cdylib \
//!         -O -C panic=abort --extern wstream=libwstream.rlib \
//!         -o wordcount.wasm examples/wasm/rust/wordcount/main.rs

use wstream::{Context, Operator, Record, Result, Timer, ValueState};

const PLAN: &str = r#"{"name":"wordcount","maxParallelism":128,"parallelism":2,
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":100000,"keys":1000,"words":4,"seed":1}},
  {"id":"split","kind":"operator","operator":"split"},
  {"id":"count","kind":"operator","operator":"count"},
  {"id":"sink","kind":"sink","connector":"stdout","parallelism":1}],
 "edges":[
  {"from":"source","to":"split","partition":"rebalance"},
  {"from":"split","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}"#;

wstream::module! {
    operators: {
        "split" => |_| Ok(Split),
        "count" => Count::open,
    },
    plan: PLAN,
}

/// space_len returns the length of the white-space character at the start
/// of s, or 0 when s does not start with one. White space is Go's
/// unicode.IsSpace: ASCII \t \n \v \f \r and space, U+0085, U+00A0, U+1680,
/// U+2000..U+200A, U+2028, U+2029, U+202F, U+205F and U+3000, in UTF-8.
/// Matching the exact encodings is enough to split like Go: they start with
/// lead bytes, which never occur inside another character's encoding, and
/// bytes that are not valid UTF-8 are never space.
#[inline]
fn space_len(s: &[u8]) -> usize {
    match *s {
        [b' ' | b'\t'..=b'\r', ..] => 1,
        [0xc2, 0x85 | 0xa0, ..] => 2,
        [0xe1, 0x9a, 0x80, ..] => 3,                             // U+1680
        [0xe2, 0x80, 0x80..=0x8a | 0xa8 | 0xa9 | 0xaf, ..] => 3, // U+2000..U+200A, U+2028, U+2029, U+202F
        [0xe2, 0x81, 0x9f, ..] => 3,                             // U+205F
        [0xe3, 0x80, 0x80, ..] => 3,                             // U+3000
        _ => 0,
    }
}

/// split emits one record per white-space-separated word of a line: key =
/// the word, empty value, the line's timestamp.
struct Split;

impl Operator for Split {
    fn process(&mut self, ctx: &mut Context, r: &Record) -> Result<()> {
        let line = r.value;
        let mut start: Option<usize> = None;
        let mut i = 0;
        while i < line.len() {
            let sp = space_len(&line[i..]);
            if sp > 0 {
                if let Some(s) = start.take() {
                    ctx.emit(&line[s..i], &[], r.timestamp);
                }
                i += sp;
            } else {
                start.get_or_insert(i);
                i += 1;
            }
        }
        if let Some(s) = start {
            ctx.emit(&line[s..], &[], r.timestamp);
        }
        Ok(())
    }
}

/// count keeps value state "count" per word (an int64, 8 bytes
/// little-endian) and emits key = word, value = the decimal count when the
/// input ends: an event-time timer at i64::MAX.
struct Count {
    n: ValueState,
    buf: Vec<u8>,
}

impl Count {
    fn open(ctx: &mut Context) -> Result<Count> {
        Ok(Count { n: ctx.value_state("count")?, buf: Vec::with_capacity(wstream::text::I64_DIGITS) })
    }
}

impl Operator for Count {
    fn process(&mut self, ctx: &mut Context, _r: &Record) -> Result<()> {
        let n = match self.n.get_i64(ctx)? {
            Some(n) => n,
            None => {
                // Timers are keyed state: one registration per word is enough.
                ctx.register_event_timer(i64::MAX, &[])?;
                0
            }
        };
        self.n.put_i64(ctx, n + 1)
    }

    fn on_timer(&mut self, ctx: &mut Context, t: &Timer) -> Result<()> {
        let n = match self.n.get_i64(ctx)? {
            Some(n) => n,
            None => return Ok(()),
        };
        self.buf.clear();
        wstream::text::append_i64(&mut self.buf, n);
        ctx.emit(t.key, &self.buf, t.timestamp);
        self.n.delete(ctx)
    }
}
