// window is a WebAssembly operator module with an event-time
// tumbling-window sum: the operator "window" sums the decimal values of each
// key per window of config "size" milliseconds and emits one record per key
// and window when the watermark passes the window's end. Records for windows
// the watermark already passed go unchanged to the second output, "late".
// It is the AssemblyScript twin of examples/wasm/go/window and emits the
// same records. Build it with
//
//     node guest-sdk/assemblyscript/node_modules/assemblyscript/bin/asc.js \
//         examples/wasm/as/window/index.ts -O3 --runtime incremental \
//         --use abort=wstreamAbort -o window.wasm

import {
  Operator, Context, Record, Timer, ValueState, Bytes, register, setPlan, quote,
  parseDecimal, parseStatus, PARSE_OK, PARSE_RANGE,
} from "../../../../guest-sdk/assemblyscript/assembly/index";
export * from "../../../../guest-sdk/assemblyscript/assembly/exports";

// The job plan: the same bytes as the Go example's.
const PLAN =
  "{\"name\":\"window\",\"maxParallelism\":128,\"parallelism\":2,\n" +
  " \"vertices\":[\n" +
  "  {\"id\":\"source\",\"kind\":\"source\",\"connector\":\"file\",\"parallelism\":1,\n" +
  "   \"config\":{\"path\":\"input.tsv\",\"format\":\"tsv\",\"watermarkDelay\":2000}},\n" +
  "  {\"id\":\"window\",\"kind\":\"operator\",\"operator\":\"window\",\"config\":{\"size\":1000},\"outputs\":[\"main\",\"late\"]},\n" +
  "  {\"id\":\"sink\",\"kind\":\"sink\",\"connector\":\"stdout\",\"parallelism\":1},\n" +
  "  {\"id\":\"late\",\"kind\":\"sink\",\"connector\":\"stdout\",\"parallelism\":1}],\n" +
  " \"edges\":[\n" +
  "  {\"from\":\"source\",\"to\":\"window\",\"partition\":\"key\"},\n" +
  "  {\"from\":\"window\",\"to\":\"sink\",\"partition\":\"rebalance\"},\n" +
  "  {\"from\":\"window\",\"to\":\"late\",\"partition\":\"rebalance\",\"output\":\"late\"}]}";
setPlan(PLAN);

class Window extends Operator {
  size: i64 = 1000;
  late: i32 = 0;
  sum!: ValueState;
  // The window's end, big-endian (non-negative ends sort by time).
  ns: Uint8Array = new Uint8Array(8);
  buf: Bytes = new Bytes(64);

  open(ctx: Context): void {
    const size = ctx.configInt("size", 1000);
    if (ctx.failed) return;
    if (size <= 0) {
      ctx.fail("config size must be a positive number of milliseconds, got " + size.toString());
      return;
    }
    const late = ctx.output("late");
    if (late < 0) {
      ctx.fail('the window vertex needs outputs ["main","late"]: bad output');
      return;
    }
    this.size = size;
    this.late = late;
    this.sum = ctx.valueState("sum");
  }

  process(ctx: Context, r: Record): void {
    const end = windowEnd(r.timestamp, this.size);
    if (end - 1 <= ctx.watermark) {
      ctx.emitTo(this.late, r.key, r.value, r.timestamp);
      return;
    }
    const v = parseDecimal(r.valuePtr, r.valueLength);
    if (parseStatus != PARSE_OK) {
      ctx.fail("value " + quote(r.value) + (parseStatus == PARSE_RANGE ? " overflows int64" : " is not a decimal integer"));
      return;
    }
    store<i64>(this.ns.dataStart, bswap<i64>(end));
    const sum = this.sum.namespace(this.ns);
    const s = sum.getI64();
    if (ctx.failed || !sum.putI64(s + v)) return;
    ctx.registerEventTimer(end - 1, this.ns);
  }

  onTimer(ctx: Context, t: Timer): void {
    if (t.namespaceLength != 8) {
      ctx.fail("timer namespace has " + t.namespaceLength.toString() + " bytes, want an 8-byte window end");
      return;
    }
    const ns = t.namespace;
    const end = bswap<i64>(load<i64>(ns.dataStart));
    const sum = this.sum.namespace(ns);
    if (!sum.exists()) return;
    const s = sum.getI64();
    if (ctx.failed) return;
    const b = this.buf.reset().i64(end - this.size).byte(0x2c).i64(end).byte(0x2c).i64(s);
    ctx.emit(t.key, b, t.timestamp);
    sum.delete();
  }
}

/**
 * windowEnd returns the end of the window [start, end) holding ts: start is
 * ts rounded down (towards minus infinity) to a multiple of size. An end
 * beyond the int64 range is clamped to it, as in the Go example.
 */
function windowEnd(ts: i64, size: i64): i64 {
  const rem = ts % size;
  // ts is negative: the boundary above it is ts-rem.
  if (rem < 0) return ts - rem;
  const start = ts - rem;
  if (start > i64.MAX_VALUE - size) return i64.MAX_VALUE;
  return start + size;
}

register("window", (): Operator => new Window());
