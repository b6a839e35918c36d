// conformance is the AssemblyScript module of the conformance suite: the
// operator "conform" of tests/conformance/SPEC.md, a command interpreter
// whose every command exercises one part of the ABI through the
// AssemblyScript SDK. It answers exactly as examples/wasm/go/conformance.
// Build it with
//
//     node guest-sdk/assemblyscript/node_modules/assemblyscript/bin/asc.js \
//         examples/wasm/as/conformance/index.ts -O3 --runtime incremental \
//         --use abort=wstreamAbort -o conformance.wasm

import {
  Operator, Context, Record, Timer, ValueState, MapState, Bytes, register, quote, str, bytesEqual,
  parseDecimal, parseStatus, PARSE_OK, BAD_OUTPUT, LOG_INFO, PROCESSING_TIME, registerMigration, failMigration,
} from "../../../../guest-sdk/assemblyscript/assembly/index";
export * from "../../../../guest-sdk/assemblyscript/assembly/exports";

const EMPTY = new Uint8Array(0);
const NS = Uint8Array.wrap(String.UTF8.encode("t"));

// Sentinel results of number: not a non-negative int64.
const BAD_NUMBER: i64 = -1;

class Conform extends Operator {
  values: Map<string, ValueState> = new Map();
  maps: Map<string, MapState> = new Map();
  // The checkpoint ids last passed to each hook, -1 before the first.
  pre: i64 = -1;
  complete: i64 = -1;
  aborted: i64 = -1;
  reply: Bytes = new Bytes(64);
  val: Bytes = new Bytes(24);

  open(ctx: Context): void {
    // States can only be registered in open: a fixed set, in SPEC order.
    const values = ["a", "b", "n", "big"];
    for (let i = 0; i < values.length; i++) this.values.set(values[i], ctx.valueState(values[i]));
    const maps = ["m", "p"];
    for (let i = 0; i < maps.length; i++) this.maps.set(maps[i], ctx.mapState(maps[i]));
  }

  value(ctx: Context, name: Uint8Array): ValueState | null {
    const n = str(name);
    if (!this.values.has(n)) {
      ctx.fail("unknown state " + quote(name) + ": not a value state of this operator");
      return null;
    }
    return this.values.get(n);
  }

  mapState(ctx: Context, name: Uint8Array): MapState | null {
    const n = str(name);
    if (!this.maps.has(n)) {
      ctx.fail("unknown state " + quote(name) + ": not a map state of this operator");
      return null;
    }
    return this.maps.get(n);
  }

  process(ctx: Context, r: Record): void {
    const reply = this.run(ctx, r);
    if (reply === null || ctx.failed) return;
    ctx.emit(r.key, reply, r.timestamp);
  }

  // run executes one command and returns its reply, or null when it failed.
  run(ctx: Context, r: Record): Bytes | null {
    const cmd = r.value;
    const name = str(cmd.subarray(0, cut(cmd)));
    const reply = this.reply.reset();
    const ok = "ok";
    if (name == "put") {
      const t = args(ctx, cmd, 3);
      if (t === null) return null;
      const s = this.value(ctx, t[1]);
      if (s === null) return null;
      s.put(t[2]);
      return reply.string(ok);
    }
    if (name == "get" || name == "del") {
      const t = args(ctx, cmd, 2);
      if (t === null) return null;
      const s = this.value(ctx, t[1]);
      if (s === null) return null;
      if (name == "del") {
        s.delete();
        return reply.string(ok);
      }
      return found(reply, s.get());
    }
    if (name == "inc") {
      const t = args(ctx, cmd, 2);
      if (t === null) return null;
      const s = this.value(ctx, t[1]);
      if (s === null) return null;
      let n = s.getI64();
      if (ctx.failed) return null;
      n++;
      if (!s.putI64(n)) return null;
      return reply.byte(0x3d).i64(n);
    }
    if (name == "tinc") {
      const t = args(ctx, cmd, 3);
      if (t === null) return null;
      if (this.value(ctx, t[1]) === null) return null;
      const ts = number(ctx, t[2]);
      if (ts == BAD_NUMBER) return null;
      ctx.registerEventTimer(ts, this.val.reset().string("inc:").bytes(t[1]));
      return reply.string(ok);
    }
    if (name == "big") {
      const t = args(ctx, cmd, 3);
      if (t === null) return null;
      const s = this.value(ctx, t[1]);
      if (s === null) return null;
      const n = number(ctx, t[2]);
      if (n == BAD_NUMBER) return null;
      if (n > <i64>i32.MAX_VALUE) {
        ctx.fail("big: " + n.toString() + " bytes do not fit in memory");
        return null;
      }
      const v = new Uint8Array(<i32>n);
      for (let i = 0; i < <i32>n; i++) v[i] = <u8>(0x61 + i % 26);
      if (!s.put(v)) return null;
      const got = s.get();
      if (ctx.failed) return null;
      if (got === null || !bytesEqual(got, v)) return reply.string("mismatch");
      return reply.string("ok ").i64(n);
    }
    if (name == "mput") {
      const t = args(ctx, cmd, 4);
      if (t === null) return null;
      const m = this.mapState(ctx, t[1]);
      if (m === null) return null;
      m.put(t[2], t[3]);
      return reply.string(ok);
    }
    if (name == "mget" || name == "mdel") {
      const t = args(ctx, cmd, 3);
      if (t === null) return null;
      const m = this.mapState(ctx, t[1]);
      if (m === null) return null;
      if (name == "mdel") {
        m.delete(t[2]);
        return reply.string(ok);
      }
      return found(reply, m.get(t[2]));
    }
    if (name == "mfill") {
      const t = args(ctx, cmd, 3);
      if (t === null) return null;
      const m = this.mapState(ctx, t[1]);
      if (m === null) return null;
      const n = number(ctx, t[2]);
      if (n == BAD_NUMBER) return null;
      if (n > 10000) {
        ctx.fail("mfill: " + n.toString() + " entries, at most 10000");
        return null;
      }
      const k = new Uint8Array(5);
      k[0] = 0x6b; // "k", then the index in 4 digits
      for (let i = 0; i < <i32>n; i++) {
        k[1] = <u8>(0x30 + i / 1000);
        k[2] = <u8>(0x30 + (i / 100) % 10);
        k[3] = <u8>(0x30 + (i / 10) % 10);
        k[4] = <u8>(0x30 + i % 10);
        if (!m.put(k, this.val.reset().byte(0x76).i64(i))) return null;
      }
      return reply.string(ok);
    }
    if (name == "mscan") {
      const t = args(ctx, cmd, 3);
      if (t === null) return null;
      const m = this.mapState(ctx, t[1]);
      if (m === null) return null;
      const prefix = str(t[2]) == "-" ? EMPTY : t[2];
      let n: i64 = 0;
      let first: Uint8Array = EMPTY;
      const last = new Bytes(16);
      const it = m.iter(prefix);
      while (it.next()) {
        if (n == 0) first = it.key;
        last.reset().raw(it.keyPtr, it.keyLength);
        n++;
      }
      if (ctx.failed) return null;
      if (n == 0) return reply.string("n=0");
      return reply.string("n=").i64(n).string(" first=").bytes(first).string(" last=").raw(last.dataStart, last.length);
    }
    if (name == "emit") {
      const t = args(ctx, cmd, 3);
      if (t === null) return null;
      const out = ctx.output(str(t[1]));
      if (out == BAD_OUTPUT) return reply.string("bad output ").bytes(t[1]);
      if (out < 0) {
        ctx.fail("output " + quote(t[1]) + ": status " + out.toString());
        return null;
      }
      ctx.emitTo(out, r.key, t[2], r.timestamp);
      return reply.string(ok);
    }
    if (name == "batch") {
      const t = args(ctx, cmd, 2);
      if (t === null) return null;
      const n = number(ctx, t[1]);
      if (n == BAD_NUMBER) return null;
      const key = r.key;
      for (let i: i64 = 0; i < n; i++) ctx.emit(key, this.val.reset().byte(0x72).i64(i), r.timestamp);
      return reply.string(ok);
    }
    if (name == "timer" || name == "untimer") {
      const t = args(ctx, cmd, 3);
      if (t === null) return null;
      const d = str(t[1]);
      if (d != "event" && d != "proc") {
        ctx.fail("unknown time domain " + quote(t[1]));
        return null;
      }
      const ts = number(ctx, t[2]);
      if (ts == BAD_NUMBER) return null;
      if (name == "timer" && d == "event") ctx.registerEventTimer(ts, NS);
      else if (name == "timer") ctx.registerProcessingTimer(ts, NS);
      else if (d == "event") ctx.deleteEventTimer(ts, NS);
      else ctx.deleteProcessingTimer(ts, NS);
      return reply.string(ok);
    }
    if (name == "wm") return reply.string("wm=").i64(ctx.watermark);
    if (name == "ptime") return reply.string(ctx.processingTime > 0 ? "ptime ok" : "ptime bad");
    if (name == "log") {
      const t = args(ctx, cmd, 2);
      if (t === null) return null;
      ctx.log(LOG_INFO, t[1]);
      return reply.string(ok);
    }
    if (name == "config") return reply.string("config=").bytes(ctx.config);
    if (name == "hooks") {
      return reply.string("pre=").i64(this.pre).string(" complete=").i64(this.complete)
        .string(" aborted=").i64(this.aborted);
    }
    if (name == "fail") {
      const t = args(ctx, cmd, 2);
      if (t === null) return null;
      ctx.fail("conform: fail " + str(t[1]));
      return null;
    }
    ctx.fail("unknown command " + quote(cmd));
    return null;
  }

  onTimer(ctx: Context, t: Timer): void {
    const v = this.reply.reset().string("fired ").string(t.domain == PROCESSING_TIME ? "proc" : "event")
      .byte(0x20).i64(t.timestamp).string(" ns=").raw(t.namespacePtr, t.namespaceLength);
    // A timer of tinc counts in its value state.
    const ns = t.namespace;
    if (ns.byteLength >= 4 && str(ns.subarray(0, 4)) == "inc:") {
      const s = this.value(ctx, ns.subarray(4));
      if (s === null) return;
      let n = s.getI64();
      if (ctx.failed) return;
      n++;
      if (!s.putI64(n)) return;
      v.string(" =").i64(n);
    }
    ctx.emit(t.key, v, t.timestamp);
  }

  preBarrier(ctx: Context, checkpoint: i64): void {
    this.pre = checkpoint;
    ctx.emit(EMPTY, this.reply.reset().string("pre ").i64(checkpoint), 0);
  }

  checkpointComplete(ctx: Context, checkpoint: i64): void {
    this.complete = checkpoint;
  }

  checkpointAborted(ctx: Context, checkpoint: i64): void {
    this.aborted = checkpoint;
  }

  close(ctx: Context): void {
    ctx.emit(EMPTY, "close", 0);
  }
}

// cut returns the length of the command's first token.
function cut(cmd: Uint8Array): i32 {
  const i = cmd.indexOf(0x20);
  return i < 0 ? cmd.length : i;
}

// args splits a command into its tokens (separated by one space) and checks
// their number; null after failing the call.
function args(ctx: Context, cmd: Uint8Array, n: i32): Array<Uint8Array> | null {
  const toks = new Array<Uint8Array>();
  let start = 0;
  for (let i = 0; i < cmd.length; i++) {
    if (cmd[i] == 0x20) {
      toks.push(cmd.subarray(start, i));
      start = i + 1;
    }
  }
  toks.push(cmd.subarray(start, cmd.length));
  if (toks.length != n) {
    ctx.fail("command " + quote(cmd) + ": want " + n.toString() + " tokens, got " + toks.length.toString());
    return null;
  }
  return toks;
}

// number parses a non-negative decimal int64, or fails the call and
// returns BAD_NUMBER.
function number(ctx: Context, tok: Uint8Array): i64 {
  const n = parseDecimal(tok.dataStart, tok.length);
  if (parseStatus != PARSE_OK || n < 0) {
    ctx.fail(quote(tok) + " is not a non-negative decimal integer");
    return BAD_NUMBER;
  }
  return n;
}

// found turns a state lookup into its reply.
function found(reply: Bytes, v: Uint8Array | null): Bytes | null {
  if (v === null) return reply.string("missing");
  return reply.byte(0x3d).bytes(v);
}

register("conform", (): Operator => new Conform());

// SPEC.md, "State migration".
registerMigration("conform", "m", (version: i32, key: Uint8Array, ns: Uint8Array, value: Uint8Array): Uint8Array | null => {
  const head = Uint8Array.wrap(String.UTF8.encode("m|" + version.toString() + "|"));
  const out = new Uint8Array(head.length + key.length + 1 + ns.length + 1 + value.length);
  let at = 0;
  out.set(head, at);
  at += head.length;
  out.set(key, at);
  at += key.length;
  out[at++] = 0x7c;
  out.set(ns, at);
  at += ns.length;
  out[at++] = 0x7c;
  out.set(value, at);
  return out;
});
registerMigration("conform", "fail", (version: i32, key: Uint8Array, ns: Uint8Array, value: Uint8Array): Uint8Array | null => {
  failMigration("migration refused");
  return null;
});
