//! testops holds operators that exercise the parts of the Rust SDK the
//! example and conformance modules leave out, for the tests of
//! examples/wasm/rust. It carries no plan.
//!
//!   identity  emits every record unchanged (output buffering and flushes)
//!   route     value "side:..." goes to output "side", "direct:..." through
//!             the unbuffered emit, anything else to output 0
//!   badport   emits to output 5, which no vertex has
//!   config    reads config members "n" (int64), "s" (string) and "b"
//!             (bool) when opened and emits them on close
//!   states    "lookup NAME" looks a state up by name after open; "clash"
//!             asks for value state "v" as a map state
//!   notimer   registers an event timer per record, without on_timer
//!   panic     panics on a record whose value is "panic"; "unwrap" unwraps
//!             a None

use wstream::text::{append_i64, quote};
use wstream::{error, Context, Operator, Output, Record, Result, ValueState};

wstream::module! {
    operators: {
        "identity" => |_| Ok(Identity),
        "route" => Route::open,
        "badport" => |_| Ok(BadPort),
        "config" => Config::open,
        "states" => States::open,
        "notimer" => |_| Ok(NoTimer),
        "panic" => |_| Ok(Panic),
    },
}

struct Identity;

impl Operator for Identity {
    fn process(&mut self, ctx: &mut Context, r: &Record) -> Result<()> {
        ctx.emit(r.key, r.value, r.timestamp);
        Ok(())
    }
}

struct Route {
    side: Output,
}

impl Route {
    fn open(ctx: &mut Context) -> Result<Route> {
        Ok(Route { side: ctx.output("side")? })
    }
}

impl Operator for Route {
    fn process(&mut self, ctx: &mut Context, r: &Record) -> Result<()> {
        if r.value.starts_with(b"side:") {
            ctx.emit_to(self.side, r.key, r.value, r.timestamp);
        } else if r.value.starts_with(b"direct:") {
            ctx.emit_unbuffered(Output::MAIN, r.key, r.value, r.timestamp)?;
        } else {
            ctx.emit(r.key, r.value, r.timestamp);
        }
        Ok(())
    }
}

struct BadPort;

impl Operator for BadPort {
    fn process(&mut self, ctx: &mut Context, r: &Record) -> Result<()> {
        ctx.emit_to(Output(5), r.key, r.value, r.timestamp);
        Ok(())
    }
}

struct Config {
    summary: Vec<u8>,
}

impl Config {
    fn open(ctx: &mut Context) -> Result<Config> {
        let mut s = b"n=".to_vec();
        match ctx.config_i64("n")? {
            Some(n) => append_i64(&mut s, n),
            None => s.push(b'-'),
        }
        s.extend_from_slice(b" s=");
        match ctx.config_str("s")? {
            Some(v) => s.extend_from_slice(v.as_bytes()),
            None => s.push(b'-'),
        }
        s.extend_from_slice(b" b=");
        s.extend_from_slice(match ctx.config_bool("b")? {
            Some(true) => b"true",
            Some(false) => b"false",
            None => b"-",
        });
        Ok(Config { summary: s })
    }
}

impl Operator for Config {
    fn process(&mut self, _ctx: &mut Context, _r: &Record) -> Result<()> {
        Ok(())
    }

    fn close(&mut self, ctx: &mut Context) -> Result<()> {
        let cfg = ctx.config().to_vec();
        ctx.emit(&cfg, &self.summary, 0);
        Ok(())
    }
}

struct States {
    v: ValueState,
}

impl States {
    fn open(ctx: &mut Context) -> Result<States> {
        let v = ctx.value_state("v")?;
        // The same name again is the same state.
        let again = ctx.value_state("v")?;
        if again.name() != v.name() {
            return Err(error!("value state \"v\" twice gave two states"));
        }
        Ok(States { v })
    }
}

impl Operator for States {
    fn process(&mut self, ctx: &mut Context, r: &Record) -> Result<()> {
        match r.value {
            b"clash" => {
                ctx.map_state("v")?;
            }
            v if v.starts_with(b"lookup ") => {
                let name = String::from_utf8_lossy(&v[7..]).into_owned();
                let s = ctx.value_state(&name)?;
                let n = s.get_i64(ctx)?.unwrap_or(0) + 1;
                s.put_i64(ctx, n)?;
                let mut out = Vec::new();
                append_i64(&mut out, n);
                ctx.emit(r.key, &out, r.timestamp);
            }
            v => {
                self.v.put(ctx, v)?;
                let got = self.v.get(ctx)?.unwrap_or_default();
                ctx.emit(r.key, &got, r.timestamp);
            }
        }
        Ok(())
    }
}

struct NoTimer;

impl Operator for NoTimer {
    fn process(&mut self, ctx: &mut Context, r: &Record) -> Result<()> {
        ctx.register_event_timer(r.timestamp, &[])
    }
}

struct Panic;

impl Operator for Panic {
    fn process(&mut self, ctx: &mut Context, r: &Record) -> Result<()> {
        match r.value {
            b"panic" => panic!("testops panic on record value {}", quote(r.value)),
            b"unwrap" => {
                let none: Option<u8> = r.value.iter().copied().find(|&c| c == 0);
                ctx.emit(r.key, &[none.unwrap()], r.timestamp);
            }
            v => ctx.emit(r.key, v, r.timestamp),
        }
        Ok(())
    }
}
