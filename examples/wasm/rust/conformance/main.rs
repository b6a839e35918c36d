//! conformance is the Rust module of the conformance suite: the operator
//! "conform" of tests/conformance/SPEC.md, a command interpreter whose every
//! command exercises one part of the ABI through the Rust SDK. The same
//! operator exists in every guest language (examples/wasm/go/conformance is
//! the reference); the suite requires them all to answer alike.

use wstream::text::{append_i64, parse_i64, quote};
use wstream::{error, Context, Error, Level, MapState, Operator, Record, Result, Status, TimeDomain, Timer, ValueState};

wstream::module! {
    operators: { "conform" => Conform::open },
}

// SPEC.md, "State migration".
wstream::migrate!(migrate);

fn migrate(op: &str, state: &str, version: i32, key: &[u8], ns: &[u8], value: &[u8]) -> Result<Vec<u8>> {
    match (op, state) {
        ("conform", "m") => {
            let mut out = format!("m|{}|", version).into_bytes();
            out.extend_from_slice(key);
            out.push(b'|');
            out.extend_from_slice(ns);
            out.push(b'|');
            out.extend_from_slice(value);
            Ok(out)
        }
        ("conform", "fail") => Err(Error::new("migration refused")),
        _ => Err(Error::new(format!("no migration for state {:?} of operator {:?}", state, op))),
    }
}

struct Conform {
    values: Vec<(&'static str, ValueState)>,
    maps: Vec<(&'static str, MapState)>,
    // The checkpoint ids last passed to each hook, -1 before the first.
    pre: i64,
    complete: i64,
    aborted: i64,
    reply: Vec<u8>,
}

impl Conform {
    fn open(ctx: &mut Context) -> Result<Conform> {
        // States can only be registered in open: a fixed set, in SPEC order.
        let mut values = Vec::new();
        for n in ["a", "b", "n", "big"] {
            values.push((n, ctx.value_state(n)?));
        }
        let mut maps = Vec::new();
        for n in ["m", "p"] {
            maps.push((n, ctx.map_state(n)?));
        }
        Ok(Conform { values, maps, pre: -1, complete: -1, aborted: -1, reply: Vec::with_capacity(64) })
    }

    fn value(&self, name: &[u8]) -> Result<&ValueState> {
        self.values
            .iter()
            .find(|(n, _)| n.as_bytes() == name)
            .map(|(_, s)| s)
            .ok_or_else(|| error!("unknown state {}: not a value state of this operator", quote(name)))
    }

    fn map(&self, name: &[u8]) -> Result<&MapState> {
        self.maps
            .iter()
            .find(|(n, _)| n.as_bytes() == name)
            .map(|(_, s)| s)
            .ok_or_else(|| error!("unknown state {}: not a map state of this operator", quote(name)))
    }

    /// Executes one command, writing its reply into self.reply.
    fn run(&mut self, ctx: &mut Context, r: &Record) -> Result<()> {
        let cmd = r.value;
        let name = cmd.split(|&c| c == b' ').next().unwrap_or_default();
        let mut reply = std::mem::take(&mut self.reply);
        reply.clear();
        let res = self.command(ctx, r, name, cmd, &mut reply);
        self.reply = reply;
        res
    }

    fn command(&self, ctx: &mut Context, r: &Record, name: &[u8], cmd: &[u8], reply: &mut Vec<u8>) -> Result<()> {
        const OK: &[u8] = b"ok";
        match name {
            b"put" => {
                let t = args(cmd, 3)?;
                self.value(t[1])?.put(ctx, t[2])?;
                reply.extend_from_slice(OK);
            }
            b"get" => {
                let t = args(cmd, 2)?;
                found(reply, self.value(t[1])?.get(ctx)?);
            }
            b"del" => {
                let t = args(cmd, 2)?;
                self.value(t[1])?.delete(ctx)?;
                reply.extend_from_slice(OK);
            }
            b"inc" => {
                let t = args(cmd, 2)?;
                let s = self.value(t[1])?;
                let n = s.get_i64(ctx)?.unwrap_or(0).wrapping_add(1);
                s.put_i64(ctx, n)?;
                reply.push(b'=');
                append_i64(reply, n);
            }
            b"tinc" => {
                let t = args(cmd, 3)?;
                self.value(t[1])?;
                let ts = number(t[2])?;
                let mut ns = b"inc:".to_vec();
                ns.extend_from_slice(t[1]);
                ctx.register_event_timer(ts, &ns)?;
                reply.extend_from_slice(OK);
            }
            b"big" => {
                let t = args(cmd, 3)?;
                let s = self.value(t[1])?;
                let n = number(t[2])?;
                let v: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
                s.put(ctx, &v)?;
                if s.get(ctx)?.as_deref() == Some(&v[..]) {
                    reply.extend_from_slice(b"ok ");
                    append_i64(reply, n);
                } else {
                    reply.extend_from_slice(b"mismatch");
                }
            }
            b"mput" => {
                let t = args(cmd, 4)?;
                self.map(t[1])?.put(ctx, t[2], t[3])?;
                reply.extend_from_slice(OK);
            }
            b"mget" => {
                let t = args(cmd, 3)?;
                found(reply, self.map(t[1])?.get(ctx, t[2])?);
            }
            b"mdel" => {
                let t = args(cmd, 3)?;
                self.map(t[1])?.delete(ctx, t[2])?;
                reply.extend_from_slice(OK);
            }
            b"mfill" => {
                let t = args(cmd, 3)?;
                let m = self.map(t[1])?;
                let n = number(t[2])?;
                if n > 10000 {
                    return Err(error!("mfill: {} entries, at most 10000", n));
                }
                let mut v = Vec::with_capacity(8);
                for i in 0..n {
                    let k = format!("k{:04}", i);
                    v.clear();
                    v.push(b'v');
                    append_i64(&mut v, i);
                    m.put(ctx, k.as_bytes(), &v)?;
                }
                reply.extend_from_slice(OK);
            }
            b"mscan" => {
                let t = args(cmd, 3)?;
                let m = self.map(t[1])?;
                let prefix: &[u8] = if t[2] == b"-" { b"" } else { t[2] };
                let (mut n, mut first, mut last) = (0i64, Vec::new(), Vec::new());
                let mut it = m.iter(prefix);
                while let Some((k, _)) = it.next(ctx)? {
                    if n == 0 {
                        first.extend_from_slice(k);
                    }
                    last.clear();
                    last.extend_from_slice(k);
                    n += 1;
                }
                if n == 0 {
                    reply.extend_from_slice(b"n=0");
                } else {
                    reply.extend_from_slice(b"n=");
                    append_i64(reply, n);
                    reply.extend_from_slice(b" first=");
                    reply.extend_from_slice(&first);
                    reply.extend_from_slice(b" last=");
                    reply.extend_from_slice(&last);
                }
            }
            b"emit" => {
                let t = args(cmd, 3)?;
                // Output names are tokens of an ASCII command; anything else
                // cannot name an output.
                let out = match std::str::from_utf8(t[1]) {
                    Ok(o) => ctx.output(o),
                    Err(_) => Err(wstream::Error::with_status(Status::BadOutput, "output name is not UTF-8")),
                };
                match out {
                    Ok(o) => {
                        ctx.emit_to(o, r.key, t[2], r.timestamp);
                        reply.extend_from_slice(OK);
                    }
                    Err(e) if e.status() == Status::BadOutput => {
                        reply.extend_from_slice(b"bad output ");
                        reply.extend_from_slice(t[1]);
                    }
                    Err(e) => return Err(e),
                }
            }
            b"batch" => {
                let t = args(cmd, 2)?;
                let n = number(t[1])?;
                let mut v = Vec::with_capacity(24);
                for i in 0..n {
                    v.clear();
                    v.push(b'r');
                    append_i64(&mut v, i);
                    ctx.emit(r.key, &v, r.timestamp);
                }
                reply.extend_from_slice(OK);
            }
            b"timer" | b"untimer" => {
                let t = args(cmd, 3)?;
                let d = match t[1] {
                    b"event" => TimeDomain::Event,
                    b"proc" => TimeDomain::Processing,
                    other => return Err(error!("unknown time domain {}", quote(other))),
                };
                let ts = number(t[2])?;
                if name == b"timer" {
                    ctx.register_timer(d, ts, b"t")?;
                } else {
                    ctx.delete_timer(d, ts, b"t")?;
                }
                reply.extend_from_slice(OK);
            }
            b"wm" => {
                reply.extend_from_slice(b"wm=");
                append_i64(reply, ctx.watermark());
            }
            b"ptime" => {
                reply.extend_from_slice(if ctx.processing_time() > 0 { b"ptime ok" } else { b"ptime bad" });
            }
            b"log" => {
                let t = args(cmd, 2)?;
                ctx.log(Level::Info, &String::from_utf8_lossy(t[1]));
                reply.extend_from_slice(OK);
            }
            b"config" => {
                reply.extend_from_slice(b"config=");
                reply.extend_from_slice(ctx.config());
            }
            b"hooks" => {
                reply.extend_from_slice(b"pre=");
                append_i64(reply, self.pre);
                reply.extend_from_slice(b" complete=");
                append_i64(reply, self.complete);
                reply.extend_from_slice(b" aborted=");
                append_i64(reply, self.aborted);
            }
            b"fail" => {
                let t = args(cmd, 2)?;
                return Err(error!("conform: fail {}", String::from_utf8_lossy(t[1])));
            }
            _ => return Err(error!("unknown command {}", quote(cmd))),
        }
        Ok(())
    }
}

/// args splits a command into its tokens (separated by one space) and
/// checks their number.
fn args(cmd: &[u8], n: usize) -> Result<Vec<&[u8]>> {
    let toks: Vec<&[u8]> = cmd.split(|&c| c == b' ').collect();
    if toks.len() != n {
        return Err(error!("command {}: want {} tokens, got {}", quote(cmd), n, toks.len()));
    }
    Ok(toks)
}

fn number(tok: &[u8]) -> Result<i64> {
    match parse_i64(tok) {
        Ok(n) if n >= 0 => Ok(n),
        _ => Err(error!("{} is not a non-negative decimal integer", quote(tok))),
    }
}

/// found turns a state lookup into its reply.
fn found(reply: &mut Vec<u8>, v: Option<Vec<u8>>) {
    match v {
        Some(v) => {
            reply.push(b'=');
            reply.extend_from_slice(&v);
        }
        None => reply.extend_from_slice(b"missing"),
    }
}

impl Operator for Conform {
    fn process(&mut self, ctx: &mut Context, r: &Record) -> Result<()> {
        self.run(ctx, r)?;
        ctx.emit(r.key, &self.reply, r.timestamp);
        Ok(())
    }

    fn on_timer(&mut self, ctx: &mut Context, t: &Timer) -> Result<()> {
        let mut v = Vec::with_capacity(32 + t.namespace.len());
        v.extend_from_slice(if t.domain == TimeDomain::Event { b"fired event " } else { b"fired proc " });
        append_i64(&mut v, t.timestamp);
        v.extend_from_slice(b" ns=");
        v.extend_from_slice(t.namespace);
        // A timer of tinc counts in its value state.
        if let Some(name) = t.namespace.strip_prefix(b"inc:") {
            let s = self.value(name)?;
            let n = s.get_i64(ctx)?.unwrap_or(0).wrapping_add(1);
            s.put_i64(ctx, n)?;
            v.extend_from_slice(b" =");
            append_i64(&mut v, n);
        }
        ctx.emit(t.key, &v, t.timestamp);
        Ok(())
    }

    fn pre_barrier(&mut self, ctx: &mut Context, id: i64) -> Result<()> {
        self.pre = id;
        let mut v = b"pre ".to_vec();
        append_i64(&mut v, id);
        ctx.emit(&[], &v, 0);
        Ok(())
    }

    fn checkpoint_complete(&mut self, _ctx: &mut Context, id: i64) -> Result<()> {
        self.complete = id;
        Ok(())
    }

    fn checkpoint_aborted(&mut self, _ctx: &mut Context, id: i64) -> Result<()> {
        self.aborted = id;
        Ok(())
    }

    fn close(&mut self, ctx: &mut Context) -> Result<()> {
        ctx.emit(&[], b"close", 0);
        Ok(())
    }
}
