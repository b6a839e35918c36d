// wordcount is a WebAssembly operator module that counts words: the
// operator "split" turns lines into words and the operator "count" keeps a
// count per word and emits every word's final count at the end of a bounded
// input. It is the AssemblyScript twin of examples/wasm/go/wordcount and
// emits the same records. Build it with
//
//     node guest-sdk/assemblyscript/node_modules/assemblyscript/bin/asc.js \
//         examples/wasm/as/wordcount/index.ts -O3 --runtime incremental \
//         --use abort=wstreamAbort -o wordcount.wasm

import { Operator, Context, Record, Timer, ValueState, Bytes, register, setPlan } from "../../../../guest-sdk/assemblyscript/assembly/index";
export * from "../../../../guest-sdk/assemblyscript/assembly/exports";

// The job plan: the same bytes as the Go example's.
const PLAN =
  "{\"name\":\"wordcount\",\"maxParallelism\":128,\"parallelism\":2,\n" +
  " \"vertices\":[\n" +
  "  {\"id\":\"source\",\"kind\":\"source\",\"connector\":\"gen\",\"config\":{\"count\":100000,\"keys\":1000,\"words\":4,\"seed\":1}},\n" +
  "  {\"id\":\"split\",\"kind\":\"operator\",\"operator\":\"split\"},\n" +
  "  {\"id\":\"count\",\"kind\":\"operator\",\"operator\":\"count\"},\n" +
  "  {\"id\":\"sink\",\"kind\":\"sink\",\"connector\":\"stdout\",\"parallelism\":1}],\n" +
  " \"edges\":[\n" +
  "  {\"from\":\"source\",\"to\":\"split\",\"partition\":\"rebalance\"},\n" +
  "  {\"from\":\"split\",\"to\":\"count\",\"partition\":\"key\"},\n" +
  "  {\"from\":\"count\",\"to\":\"sink\",\"partition\":\"rebalance\"}]}";
setPlan(PLAN);

/**
 * spaceLen returns the length of the white-space character at p (n bytes
 * left), or 0 when p does not start one. White space is Go's
 * unicode.IsSpace: ASCII \t \n \v \f \r and space, U+0085, U+00A0, U+1680,
 * U+2000..U+200A, U+2028, U+2029, U+202F, U+205F and U+3000, in UTF-8.
 * Matching the exact encodings is enough to split like Go: they start with
 * lead bytes, which never occur inside another character's encoding.
 */
// @ts-ignore: decorator
@inline
function spaceLen(p: usize, n: i32): i32 {
  const c = load<u8>(p);
  if (c < 0x80) return c == 0x20 || (c >= 0x09 && c <= 0x0d) ? 1 : 0;
  if (c == 0xc2) {
    if (n < 2) return 0;
    const b = load<u8>(p, 1);
    return b == 0x85 || b == 0xa0 ? 2 : 0;
  }
  if (n < 3) return 0;
  const b1 = load<u8>(p, 1);
  const b2 = load<u8>(p, 2);
  if (c == 0xe1) return b1 == 0x9a && b2 == 0x80 ? 3 : 0; // U+1680
  if (c == 0xe2) {
    // U+2000..U+200A, U+2028, U+2029, U+202F
    if (b1 == 0x80) return (b2 >= 0x80 && b2 <= 0x8a) || b2 == 0xa8 || b2 == 0xa9 || b2 == 0xaf ? 3 : 0;
    return b1 == 0x81 && b2 == 0x9f ? 3 : 0; // U+205F
  }
  if (c == 0xe3) return b1 == 0x80 && b2 == 0x80 ? 3 : 0; // U+3000
  return 0;
}

const EMPTY = new Uint8Array(0);

/**
 * Split emits one record per white-space-separated word of a line: key =
 * the word, empty value, the line's timestamp.
 */
class Split extends Operator {
  process(ctx: Context, r: Record): void {
    // The line's bytes in place, in the input batch: no copy per record.
    const p = r.valuePtr;
    const n = r.valueLength;
    let start = -1;
    for (let i = 0; i < n; ) {
      const sp = spaceLen(p + <usize>i, n - i);
      if (sp > 0) {
        if (start >= 0) {
          ctx.emitRaw(0, p + <usize>start, i - start, 0, 0, r.timestamp);
          start = -1;
        }
        i += sp;
        continue;
      }
      if (start < 0) start = i;
      i++;
    }
    if (start >= 0) ctx.emitRaw(0, p + <usize>start, n - start, 0, 0, r.timestamp);
  }
}

/**
 * Count keeps value state "count" per word (an int64, 8 bytes
 * little-endian) and emits key = word, value = the decimal count when the
 * input ends: an event-time timer at i64.MAX_VALUE.
 */
class Count extends Operator {
  n!: ValueState;
  buf: Bytes = new Bytes(20);

  open(ctx: Context): void {
    this.n = ctx.valueState("count");
  }

  process(ctx: Context, r: Record): void {
    const n = this.n.getI64();
    if (ctx.failed) return;
    // Counts start at 1: 0 means the word is new. Timers are keyed state:
    // one registration per word is enough.
    if (n == 0 && !ctx.registerEventTimer(i64.MAX_VALUE, EMPTY)) return;
    this.n.putI64(n + 1);
  }

  onTimer(ctx: Context, t: Timer): void {
    if (!this.n.exists()) return;
    const n = this.n.getI64();
    if (ctx.failed) return;
    ctx.emit(t.key, this.buf.reset().i64(n), t.timestamp);
    this.n.delete();
  }
}

register("split", (): Operator => new Split());
register("count", (): Operator => new Count());
