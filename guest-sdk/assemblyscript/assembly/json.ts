// A strict JSON reader (RFC 8259) for operator configurations: it checks
// the whole document and finds a top-level member of an object, with the
// rules of Go's encoding/json, so that an operator reads its config as the
// Go SDK's UnmarshalConfig does.

export const KIND_NONE = 0; // no such member, or the document is empty or null
export const KIND_NULL = 1;
export const KIND_BOOL = 2;
export const KIND_NUMBER = 3;
export const KIND_STRING = 4;
export const KIND_ARRAY = 5;
export const KIND_OBJECT = 6;

export function kindName(k: i32): string {
  switch (k) {
    case KIND_NULL: return "null";
    case KIND_BOOL: return "a boolean";
    case KIND_NUMBER: return "a number";
    case KIND_STRING: return "a string";
    case KIND_ARRAY: return "an array";
    case KIND_OBJECT: return "an object";
  }
  return "absent";
}

// Deeper nesting is refused, well within the wasm call stack.
const MAX_DEPTH = 128;

/**
 * JSONMember is the result of a lookup: the kind of the member's value and
 * where its text lies in the document. error is non-null when the document
 * is not valid JSON or not an object.
 */
export class JSONMember {
  kind: i32 = KIND_NONE;
  start: i32 = 0; // the value's first byte
  end: i32 = 0; // one past its last byte
  error: string | null = null;
}

class Scanner {
  p: usize;
  n: i32;
  i: i32 = 0;
  ok: bool = true;

  constructor(p: usize, n: i32) {
    this.p = p;
    this.n = n;
  }

  @inline at(i: i32): u32 {
    return <u32>load<u8>(this.p + <usize>i);
  }

  ws(): void {
    while (this.i < this.n) {
      const c = this.at(this.i);
      if (c != 32 && c != 9 && c != 10 && c != 13) break;
      this.i++;
    }
  }

  lit(s: string): void {
    for (let j = 0; j < s.length; j++) {
      if (this.i >= this.n || this.at(this.i) != <u32>s.charCodeAt(j)) {
        this.ok = false;
        return;
      }
      this.i++;
    }
  }

  hex4(): i32 {
    if (this.i + 4 > this.n) {
      this.ok = false;
      return 0;
    }
    let v = 0;
    for (let j = 0; j < 4; j++) {
      const c = this.at(this.i++);
      let d: i32;
      if (c >= 48 && c <= 57) d = c - 48;
      else if (c >= 97 && c <= 102) d = c - 87;
      else if (c >= 65 && c <= 70) d = c - 55;
      else {
        this.ok = false;
        return 0;
      }
      v = (v << 4) | d;
    }
    return v;
  }

  // str scans a string starting at its quote; with out it also appends the
  // decoded UTF-8 (invalid surrogates become U+FFFD, as in Go).
  str(out: Array<u8> | null): void {
    this.i++;
    while (true) {
      if (this.i >= this.n) {
        this.ok = false;
        return;
      }
      const c = this.at(this.i);
      if (c == 34) {
        this.i++;
        return;
      }
      if (c < 0x20) {
        this.ok = false;
        return;
      }
      if (c != 92) {
        if (out) out.push(<u8>c);
        this.i++;
        continue;
      }
      this.i++;
      if (this.i >= this.n) {
        this.ok = false;
        return;
      }
      const e = this.at(this.i++);
      let r: i32 = -1;
      switch (e) {
        case 34: r = 34; break;
        case 92: r = 92; break;
        case 47: r = 47; break;
        case 98: r = 8; break;
        case 102: r = 12; break;
        case 110: r = 10; break;
        case 114: r = 13; break;
        case 116: r = 9; break;
        case 117: {
          r = this.hex4();
          if (!this.ok) return;
          if (r >= 0xd800 && r < 0xdc00) {
            // A high surrogate pairs with a following \uDC00..\uDFFF.
            if (this.i + 6 <= this.n && this.at(this.i) == 92 && this.at(this.i + 1) == 117) {
              const save = this.i;
              this.i += 2;
              const lo = this.hex4();
              if (!this.ok) return;
              if (lo >= 0xdc00 && lo < 0xe000) r = 0x10000 + ((r - 0xd800) << 10) + (lo - 0xdc00);
              else {
                this.i = save;
                r = 0xfffd;
              }
            } else r = 0xfffd;
          } else if (r >= 0xdc00 && r < 0xe000) r = 0xfffd;
          break;
        }
        default:
          this.ok = false;
          return;
      }
      if (out) appendRune(out, r);
    }
  }

  num(): void {
    if (this.i < this.n && this.at(this.i) == 45) this.i++;
    if (this.i >= this.n) {
      this.ok = false;
      return;
    }
    let c = this.at(this.i);
    if (c == 48) this.i++;
    else if (c >= 49 && c <= 57) this.digits();
    else {
      this.ok = false;
      return;
    }
    if (this.i < this.n && this.at(this.i) == 46) {
      this.i++;
      if (!this.digits()) {
        this.ok = false;
        return;
      }
    }
    if (this.i < this.n) {
      c = this.at(this.i);
      if (c == 101 || c == 69) {
        this.i++;
        if (this.i < this.n && (this.at(this.i) == 43 || this.at(this.i) == 45)) this.i++;
        if (!this.digits()) this.ok = false;
      }
    }
  }

  digits(): bool {
    const s = this.i;
    while (this.i < this.n && this.at(this.i) >= 48 && this.at(this.i) <= 57) this.i++;
    return this.i > s;
  }

  // value scans one value and returns its kind.
  value(depth: i32): i32 {
    if (depth > MAX_DEPTH) {
      this.ok = false;
      return KIND_NONE;
    }
    this.ws();
    if (this.i >= this.n) {
      this.ok = false;
      return KIND_NONE;
    }
    const c = this.at(this.i);
    switch (c) {
      case 123: {
        this.i++;
        this.ws();
        if (this.i < this.n && this.at(this.i) == 125) {
          this.i++;
          return KIND_OBJECT;
        }
        while (this.ok) {
          this.ws();
          if (this.i >= this.n || this.at(this.i) != 34) {
            this.ok = false;
            break;
          }
          this.str(null);
          this.ws();
          if (!this.ok || this.i >= this.n || this.at(this.i) != 58) {
            this.ok = false;
            break;
          }
          this.i++;
          this.value(depth + 1);
          this.ws();
          if (!this.ok || this.i >= this.n) {
            this.ok = false;
            break;
          }
          const d = this.at(this.i++);
          if (d == 125) break;
          if (d != 44) this.ok = false;
        }
        return KIND_OBJECT;
      }
      case 91: {
        this.i++;
        this.ws();
        if (this.i < this.n && this.at(this.i) == 93) {
          this.i++;
          return KIND_ARRAY;
        }
        while (this.ok) {
          this.value(depth + 1);
          this.ws();
          if (!this.ok || this.i >= this.n) {
            this.ok = false;
            break;
          }
          const d = this.at(this.i++);
          if (d == 93) break;
          if (d != 44) this.ok = false;
        }
        return KIND_ARRAY;
      }
      case 34:
        this.str(null);
        return KIND_STRING;
      case 116:
        this.lit("true");
        return KIND_BOOL;
      case 102:
        this.lit("false");
        return KIND_BOOL;
      case 110:
        this.lit("null");
        return KIND_NULL;
    }
    this.num();
    return KIND_NUMBER;
  }
}

function appendRune(out: Array<u8>, r: i32): void {
  if (r < 0x80) out.push(<u8>r);
  else if (r < 0x800) {
    out.push(<u8>(0xc0 | (r >> 6)));
    out.push(<u8>(0x80 | (r & 0x3f)));
  } else if (r < 0x10000) {
    out.push(<u8>(0xe0 | (r >> 12)));
    out.push(<u8>(0x80 | ((r >> 6) & 0x3f)));
    out.push(<u8>(0x80 | (r & 0x3f)));
  } else {
    out.push(<u8>(0xf0 | (r >> 18)));
    out.push(<u8>(0x80 | ((r >> 12) & 0x3f)));
    out.push(<u8>(0x80 | ((r >> 6) & 0x3f)));
    out.push(<u8>(0x80 | (r & 0x3f)));
  }
}

// foldEqual compares a decoded member name with name, ignoring ASCII case
// as Go's encoding/json does when it matches names to struct fields.
function foldEqual(a: Array<u8>, name: string): bool {
  if (a.length != name.length) return false;
  for (let i = 0; i < a.length; i++) {
    let x = <u32>a[i];
    let y = <u32>name.charCodeAt(i);
    if (x >= 65 && x <= 90) x += 32;
    if (y >= 65 && y <= 90) y += 32;
    if (x != y) return false;
  }
  return true;
}

/**
 * lookupMember checks the n-byte JSON document at p and finds its top-level
 * member name (ASCII letters compare ignoring case; the last match wins, as
 * in Go). An empty document or a null one has no members.
 */
export function lookupMember(p: usize, n: i32, name: string): JSONMember {
  const res = new JSONMember();
  if (n == 0) return res;
  const s = new Scanner(p, n);
  s.ws();
  const top = s.i < n ? s.at(s.i) : 0;
  const kind = s.value(0);
  s.ws();
  if (!s.ok || s.i != n) {
    res.error = "not valid JSON";
    return res;
  }
  if (kind == KIND_NULL) return res;
  if (top != 123) {
    res.error = "not a JSON object";
    return res;
  }
  // Valid: walk the members again, decoding names.
  s.i = 0;
  s.ws();
  s.i++;
  const key = new Array<u8>();
  while (true) {
    s.ws();
    if (s.at(s.i) == 125) break;
    key.length = 0;
    s.str(key);
    s.ws();
    s.i++; // ':'
    s.ws();
    const start = s.i;
    const k = s.value(0);
    const end = s.i;
    if (foldEqual(key, name)) {
      res.kind = k;
      res.start = start;
      res.end = end;
    }
    s.ws();
    if (s.at(s.i++) == 125) break;
  }
  return res;
}

/**
 * decodeString decodes the JSON string text [start, end) of the document at
 * p into UTF-8 bytes.
 */
export function decodeString(p: usize, start: i32, end: i32): Array<u8> {
  const s = new Scanner(p, end);
  s.i = start;
  const out = new Array<u8>();
  s.str(out);
  return out;
}
