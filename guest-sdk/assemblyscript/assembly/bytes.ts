// Byte helpers: UTF-8 conversion, a growable byte builder, integer encoding
// and the Go-style quoting of error messages. The ABI speaks bytes and
// AssemblyScript strings are UTF-16, so strings cross it as UTF-8.

/** utf8 returns the UTF-8 encoding of s (lone surrogates as WTF-8). */
export function utf8(s: string): Uint8Array {
  const n = String.UTF8.byteLength(s);
  const b = new Uint8Array(n);
  String.UTF8.encodeUnsafe(changetype<usize>(s), s.length, b.dataStart);
  return b;
}

/** str decodes UTF-8 bytes into a string; invalid sequences become U+FFFD. */
export function str(b: Uint8Array): string {
  return String.UTF8.decodeUnsafe(b.dataStart, <usize>b.byteLength);
}

/** copyBytes returns a new Uint8Array holding len bytes of memory at ptr. */
export function copyBytes(ptr: usize, len: i32): Uint8Array {
  const b = new Uint8Array(len);
  if (len > 0) memory.copy(b.dataStart, ptr, <usize>len);
  return b;
}

/** bytesEqual reports whether a and b hold the same bytes. */
export function bytesEqual(a: Uint8Array, b: Uint8Array): bool {
  const n = a.byteLength;
  if (n != b.byteLength) return false;
  return memory.compare(a.dataStart, b.dataStart, <usize>n) == 0;
}

/** encodeI64LE is v as 8 bytes little-endian: the ABI's integer state encoding. */
export function encodeI64LE(v: i64): Uint8Array {
  const b = new Uint8Array(8);
  store<i64>(b.dataStart, v);
  return b;
}

/** decodeI64LE reads 8 bytes little-endian; b must hold 8 bytes. */
export function decodeI64LE(b: Uint8Array): i64 {
  assert(b.byteLength == 8, "decodeI64LE: not 8 bytes");
  return load<i64>(b.dataStart);
}

/**
 * encodeI64BE is v as 8 bytes big-endian: a namespace under which the
 * entries of one key sort by time (for non-negative times), the examples'
 * window-end convention.
 */
export function encodeI64BE(v: i64): Uint8Array {
  const b = new Uint8Array(8);
  store<i64>(b.dataStart, bswap<i64>(v));
  return b;
}

/** decodeI64BE reads 8 bytes big-endian; b must hold 8 bytes. */
export function decodeI64BE(b: Uint8Array): i64 {
  assert(b.byteLength == 8, "decodeI64BE: not 8 bytes");
  return bswap<i64>(load<i64>(b.dataStart));
}

/** formatI64 writes the decimal form of v at p and returns its length (at most 20). */
export function formatI64(p: usize, v: i64): i32 {
  let u: u64 = v < 0 ? <u64>0 - <u64>v : <u64>v;
  // Count the digits first, then write them backwards.
  let n = 1;
  for (let t = u / 10; t != 0; t /= 10) n++;
  const neg = v < 0 ? 1 : 0;
  let i = n + neg;
  do {
    i--;
    store<u8>(p + <usize>i, <u8>(48 + <i32>(u % 10)));
    u /= 10;
  } while (u != 0);
  if (neg) store<u8>(p, 45);
  return n + neg;
}

/**
 * Bytes is a growable byte buffer for building keys and values without a
 * string round trip. emit, put and the other calls that take bytes accept it
 * as is (its first length bytes). reset() empties it for reuse.
 */
export class Bytes {
  buf: Uint8Array;
  length: i32 = 0;

  constructor(capacity: i32 = 64) {
    this.buf = new Uint8Array(capacity > 0 ? capacity : 16);
  }

  /** Empties the buffer, keeping its capacity. */
  reset(): Bytes {
    this.length = 0;
    return this;
  }

  /** The address of the first byte; valid until the buffer grows. */
  get dataStart(): usize {
    return this.buf.dataStart;
  }

  private grow(extra: i32): usize {
    const need = this.length + extra;
    if (need > this.buf.byteLength) {
      let cap = this.buf.byteLength * 2;
      if (cap < need) cap = need;
      const nb = new Uint8Array(cap);
      memory.copy(nb.dataStart, this.buf.dataStart, <usize>this.length);
      this.buf = nb;
    }
    const p = this.buf.dataStart + <usize>this.length;
    this.length = need;
    return p;
  }

  /** Appends one byte. */
  byte(c: u8): Bytes {
    store<u8>(this.grow(1), c);
    return this;
  }

  /** Appends len bytes at ptr. */
  raw(ptr: usize, len: i32): Bytes {
    if (len > 0) memory.copy(this.grow(len), ptr, <usize>len);
    return this;
  }

  /** Appends the bytes of a Uint8Array. */
  bytes(b: Uint8Array): Bytes {
    return this.raw(b.dataStart, b.byteLength);
  }

  /** Appends the UTF-8 encoding of s. */
  string(s: string): Bytes {
    const n = String.UTF8.byteLength(s);
    String.UTF8.encodeUnsafe(changetype<usize>(s), s.length, this.grow(n));
    return this;
  }

  /** Appends the decimal form of v. */
  i64(v: i64): Bytes {
    const p = this.grow(20);
    this.length -= 20 - formatI64(p, v);
    return this;
  }

  /** A copy of the content. */
  toUint8Array(): Uint8Array {
    return copyBytes(this.buf.dataStart, this.length);
  }

  /** The content decoded as UTF-8. */
  toString(): string {
    return String.UTF8.decodeUnsafe(this.buf.dataStart, <usize>this.length);
  }
}

/** The outcomes of parseDecimal, in parseStatus. */
export const PARSE_OK = 0;
export const PARSE_SYNTAX = 1;
export const PARSE_RANGE = 2;
export let parseStatus = PARSE_OK;

/**
 * parseDecimal parses the len bytes at p as a whole decimal int64 with an
 * optional sign, like Go's strconv.ParseInt(s, 10, 64). It sets parseStatus
 * to PARSE_OK, PARSE_SYNTAX (empty, another character) or PARSE_RANGE (it
 * does not fit in 64 bits, reported as soon as the digits read so far
 * overflow) and returns 0 unless PARSE_OK.
 */
export function parseDecimal(p: usize, len: i32): i64 {
  parseStatus = PARSE_SYNTAX;
  let i = 0;
  let neg = false;
  if (len > 0) {
    const c = load<u8>(p);
    if (c == 45 || c == 43) {
      neg = c == 45;
      i = 1;
    }
  }
  if (i == len) return 0;
  let n: u64 = 0;
  for (; i < len; i++) {
    const c = load<u8>(p + <usize>i);
    if (c < 48 || c > 57) return 0;
    // The first test keeps n*10 from wrapping around.
    if (n > (<u64>1 << 63) / 10) {
      parseStatus = PARSE_RANGE;
      return 0;
    }
    n = n * 10 + <u64>(c - 48);
    if (n > (<u64>1 << 63)) {
      parseStatus = PARSE_RANGE;
      return 0;
    }
  }
  if (!neg && n > <u64>i64.MAX_VALUE) {
    parseStatus = PARSE_RANGE;
    return 0;
  }
  parseStatus = PARSE_OK;
  return neg ? <i64>(<u64>0 - n) : <i64>n;
}

/** utf8Len is the length of the valid UTF-8 sequence at p (n bytes left), or 0. */
function utf8Len(p: usize, n: i32): i32 {
  const c = <u32>load<u8>(p);
  if (c < 0x80) return 1;
  let len: i32, min: u32, r: u32;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2; min = 0x80; r = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3; min = 0x800; r = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4; min = 0x10000; r = c & 0x07;
  } else {
    return 0;
  }
  if (n < len) return 0;
  for (let i = 1; i < len; i++) {
    const b = <u32>load<u8>(p + <usize>i);
    if ((b & 0xc0) != 0x80) return 0;
    r = (r << 6) | (b & 0x3f);
  }
  if (r < min || r > 0x10ffff || (r >= 0xd800 && r <= 0xdfff)) return 0;
  return len;
}

const HEX = "0123456789abcdef";

/**
 * quoteRaw is the len bytes at p as a double-quoted string in the style of
 * Go's %q: valid UTF-8 kept, quotes, backslashes and control bytes escaped,
 * cut after max bytes (max < 0: never) with "..." appended.
 */
export function quoteRaw(p: usize, len: i32, max: i32 = -1): string {
  const lim = max >= 0 && len > max ? max : len;
  const b = new Bytes(lim + 8);
  b.byte(34);
  for (let i = 0; i < lim;) {
    const c = load<u8>(p + <usize>i);
    if (c >= 0x80) {
      const l = utf8Len(p + <usize>i, lim - i);
      if (l > 0) {
        b.raw(p + <usize>i, l);
        i += l;
        continue;
      }
    }
    i++;
    if (c == 34) b.byte(92).byte(34);
    else if (c == 92) b.byte(92).byte(92);
    else if (c == 10) b.byte(92).byte(110);
    else if (c == 13) b.byte(92).byte(114);
    else if (c == 9) b.byte(92).byte(116);
    else if (c < 0x20 || c >= 0x7f) {
      b.byte(92).byte(120).byte(<u8>HEX.charCodeAt(c >> 4)).byte(<u8>HEX.charCodeAt(c & 15));
    } else b.byte(c);
  }
  b.byte(34);
  if (lim < len) b.string("...");
  return b.toString();
}

/** quote is quoteRaw for a Uint8Array. */
export function quote(v: Uint8Array, max: i32 = -1): string {
  return quoteRaw(v.dataStart, v.byteLength, max);
}

/** quoteString quotes a string's UTF-8 form. */
export function quoteString(s: string, max: i32 = -1): string {
  return quote(utf8(s), max);
}
