// The per-callback state cache (abi/ABI.md, "How the SDKs use them").
//
// Two host calls per record add up, so state does not cross the ABI per
// get and put. In process and onTimer, the first access to a
// state at a namespace reads it for the keys of the next records from the
// current one on, in one state_get_many whose requests point at the keys in
// the batch; the host's results are the cache, which later accesses index
// by record, without hashing or comparing keys. Writes change the results
// and mark them dirty; dirty entries go back in state_write_batch calls
// before a map iteration and when the hook ends, whether it succeeds or
// fails. The memory is raw (heap.alloc), out of the garbage collector's
// reach: the host is given its addresses.

import { hostStateGetMany, hostStateWriteBatch } from "./host";
import { NOT_FOUND } from "./status";

// Records a group reads ahead. The host reads them all, then writes back
// those written: a few at a time, its state lookups stay in its caches.
const CHUNK: u32 = 256;
const MAX_LIST: i32 = 1 << 16; // writes per state_write_batch
const MAX_GROUPS: i32 = 8;
const FIRST_BLOCK: usize = 16 << 10;
const KEEP_BLOCK: usize = 1 << 20; // a larger block is freed after the hook
const FIRST_ROOM: i32 = 16;
const MAX_ROOM: i32 = 4096;
const REQUEST: usize = 16;
const RESULT: usize = 12;
const WRITE: usize = 28;
const DIRTY: u32 = 0x80000000;
const RECORD_HEADER: usize = 20;

/** The ABI's key and namespace limit, and its value limit. */
export const MAX_KEY: i32 = 64 << 10;
export const MAX_VALUE: i32 = 16 << 20;

// A group caches state h at namespace ns for the keys of records [start,
// start + n) of the hook's batch: req holds the state_get_many requests,
// one per record, res the host's results (and the values after them). The
// result of record i's request names the request of the first record with
// the same key, whose result is that key's entry: the cache rewrites it on
// put and delete, with DIRTY in its first field and the address of the
// value written.
class Group {
  h: i32 = -1;
  nsPtr: usize = 0;
  nsLen: i32 = 0;
  start: u32 = 0;
  n: u32 = 0;
  req: usize = 0;
  res: usize = 0;
  slow: bool = true; // reading it failed: (h, ns) goes to the host at once
}

/** What StateCache.find found: the current record's entry, or nothing. */
export const ENTRY_NONE: i32 = 0; // not cached: go to the host at once
export const ENTRY_VALUE: i32 = 1; // a value, at valuePtr / valueLen
export const ENTRY_ABSENT: i32 = 2; // no value
export const ENTRY_UNKNOWN: i32 = 3; // state_get must read it (no room in the results, or a status)

export class StateCache {
  private groups: Array<Group> = new Array<Group>();
  private ng: i32 = 0;
  private last: i32 = 0; // the group of the last access, + 1; 0 for none
  private dirty: usize = 0; // u32: group << 17 | request index, in the order first written
  private ndirty: i32 = 0;
  private dirtyCap: i32 = 0;
  private block: usize = 0; // current block of memory
  private blockCap: usize = 0;
  private used: usize = 0;
  private old: Array<usize> = new Array<usize>(); // full blocks, freed after the hook
  private list: usize = 0; // write lists
  private listCap: usize = 0;
  private room: i32 = FIRST_ROOM;
  /** A write-back that failed before the end of the hook: its status, 0 for none. */
  err: i32 = 0;
  /** The handle of that write-back's writes when they were all of one state, else -1. */
  errHandle: i32 = -1;

  // The batch from the current record (or timer) on, its end, the records
  // left and the record's index: what a group reads ahead. bp is 0 outside
  // process and onTimer.
  bp: usize = 0;
  be: usize = 0;
  left: u32 = 0;
  rec: u32 = 0;

  // The value find found.
  valuePtr: usize = 0;
  valueLen: i32 = 0;
  // The group and result find used.
  private entryAt: usize = 0;
  private entryGroup: i32 = 0;

  // alloc returns n bytes of memory that stays put until reset; 0 when
  // memory runs out.
  private alloc(n: usize): usize {
    if (this.blockCap - this.used < n) {
      let cap = this.blockCap * 2;
      if (cap < FIRST_BLOCK) cap = FIRST_BLOCK;
      if (cap < n) cap = n;
      if (this.block != 0) this.old.push(this.block);
      this.block = heap.alloc(cap);
      this.blockCap = cap;
      this.used = 0;
    }
    const p = this.block + this.used;
    this.used += n;
    return p;
  }

  /** reset empties the cache after a hook, keeping a block for the next one. */
  reset(): void {
    this.ng = 0;
    this.last = 0;
    this.ndirty = 0;
    this.err = 0;
    this.errHandle = -1;
    this.bp = 0;
    for (let i = 0; i < this.old.length; i++) heap.free(this.old[i]);
    this.old.length = 0;
    this.used = 0;
    if (this.blockCap > KEEP_BLOCK) {
      heap.free(this.block);
      this.block = 0;
      this.blockCap = 0;
    }
    if (this.listCap > KEEP_BLOCK) {
      heap.free(this.list);
      this.list = 0;
      this.listCap = 0;
    }
  }

  private sameNs(g: Group, np: usize, nl: i32): bool {
    return g.nsLen == nl && (nl == 0 || memory.compare(g.nsPtr, np, <usize>nl) == 0);
  }

  // groupFor returns the index of the group that caches (h, ns) for the
  // current record, created when there is room; -1 when the access must
  // go to the host at once.
  private groupFor(h: i32, np: usize, nl: i32): i32 {
    if (this.last != 0) {
      const g = unchecked(this.groups[this.last - 1]);
      if (g.h == h && this.rec - g.start < g.n && this.sameNs(g, np, nl)) return this.last - 1;
    }
    if (this.bp == 0) return -1;
    for (let j = 0; j < this.ng; j++) {
      const g = this.groups[j];
      if (g.h != h || !this.sameNs(g, np, nl)) continue;
      if (g.slow) return -1;
      if (this.rec - g.start >= g.n) {
        // Past its records: the group moves on to the next ones. Its
        // writes go back first, so that the host's answers include them.
        const st = this.flush();
        if (st < 0 && this.err == 0) this.err = st;
        this.open(g, h, np, nl);
        if (g.slow) {
          this.last = 0;
          return -1;
        }
      }
      this.last = j + 1;
      return j;
    }
    if (this.ng == MAX_GROUPS) return -1;
    if (this.ng == this.groups.length) this.groups.push(new Group());
    const g = this.groups[this.ng++];
    this.open(g, h, np, nl);
    if (g.slow) return -1;
    this.last = this.ng;
    return this.ng - 1;
  }

  // open makes g the group of (h, ns) for the next CHUNK records from the
  // current one on, read with one state_get_many.
  private open(g: Group, h: i32, np: usize, nl: i32): void {
    g.h = h;
    g.start = this.rec;
    g.n = 0;
    g.slow = true;
    const n = this.left < CHUNK ? this.left : CHUNK;
    const ns = this.alloc(<usize>nl);
    if (nl > 0) memory.copy(ns, np, <usize>nl);
    // A group that turns out slow still matches (h, ns): its accesses go to
    // the host at once rather than try again.
    g.nsPtr = ns;
    g.nsLen = nl;
    const req = this.alloc(REQUEST * <usize>n);
    let p = this.bp;
    const e = this.be;
    let k: u32 = 0;
    for (; k < n; k++) {
      // Records past the current one are not checked yet: stop at a
      // malformed one, which the hook reports when it gets there.
      const left = e - p;
      if (left < RECORD_HEADER) break;
      const kl = load<u32>(p, 12);
      const vl = load<u32>(p, 16);
      if (<u64>kl + <u64>vl > <u64>(left - RECORD_HEADER)) break;
      const r = req + REQUEST * <usize>k;
      store<u32>(r, <u32>(p + RECORD_HEADER));
      store<u32>(r, kl, 4);
      store<u32>(r, <u32>ns, 8);
      store<u32>(r, <u32>nl, 12);
      p += RECORD_HEADER + <usize>kl + <usize>vl;
    }
    const cap = <usize>k * (RESULT + <usize>this.room);
    const res = this.alloc(cap);
    const need = hostStateGetMany(h, req, <i32>(REQUEST * <usize>k), res, <i32>cap);
    if (need < 0) return;
    if (<usize>need > cap && k > 0) {
      // Values were left out, to be read one by one: leave more room next
      // time.
      let per = (need - RESULT * k) / k + 1;
      this.room = per < MAX_ROOM ? per : MAX_ROOM;
    }
    g.n = k;
    g.req = req;
    g.res = res;
    g.slow = false;
  }

  /**
   * find looks up (h, current key, ns): ENTRY_NONE when the access must go
   * to the host at once; else what the cache knows (for ENTRY_VALUE, the
   * value at valuePtr / valueLen, valid until the hook returns).
   */
  find(h: i32, np: usize, nl: i32): i32 {
    const j = this.groupFor(h, np, nl);
    if (j < 0) return ENTRY_NONE;
    const g = unchecked(this.groups[j]);
    const f = load<u32>(g.res + RESULT * <usize>(this.rec - g.start)) & ~DIRTY;
    const r = g.res + RESULT * <usize>f;
    this.entryAt = r;
    this.entryGroup = j;
    const vlen = load<i32>(r, 4);
    const vptr = load<u32>(r, 8);
    if (vlen >= 0 && vptr != 0) {
      this.valuePtr = <usize>vptr;
      this.valueLen = vlen;
      return ENTRY_VALUE;
    }
    return vlen == NOT_FOUND ? ENTRY_ABSENT : ENTRY_UNKNOWN;
  }

  /** keep caches the n bytes at p, read with state_get, for the entry find last returned ENTRY_UNKNOWN for. */
  keep(p: usize, n: i32): void {
    const v = this.alloc(<usize>n);
    if (n > 0) memory.copy(v, p, <usize>n);
    store<i32>(this.entryAt, n, 4);
    store<u32>(this.entryAt, <u32>v, 8);
    this.valuePtr = v;
    this.valueLen = n;
  }

  /**
   * put records a write of (h, current key, ns): the n bytes at vp, or a
   * deletion when n < 0. False when the cache does not hold the entry: the
   * write must go to the host at once.
   */
  put(h: i32, np: usize, nl: i32, vp: usize, n: i32): bool {
    const j = this.groupFor(h, np, nl);
    if (j < 0) return false;
    const g = unchecked(this.groups[j]);
    let v: usize = 0;
    if (n >= 0) {
      v = this.alloc(<usize>n);
      if (n > 0) memory.copy(v, vp, <usize>n);
    }
    const f = load<u32>(g.res + RESULT * <usize>(this.rec - g.start)) & ~DIRTY;
    const r = g.res + RESULT * <usize>f;
    const first = load<u32>(r);
    if ((first & DIRTY) == 0) {
      store<u32>(r, first | DIRTY);
      if (this.ndirty == this.dirtyCap) {
        const cap = this.dirtyCap == 0 ? 256 : this.dirtyCap * 2;
        this.dirty = this.dirty == 0 ? heap.alloc(<usize>cap * 4) : heap.realloc(this.dirty, <usize>cap * 4);
        this.dirtyCap = cap;
      }
      store<u32>(this.dirty + <usize>this.ndirty * 4, (<u32>j << 17) | f);
      this.ndirty++;
    }
    store<i32>(r, n >= 0 ? n : NOT_FOUND, 4);
    store<u32>(r, <u32>v, 8);
    return true;
  }

  /**
   * flush writes the dirty entries back to the host, in state_write_batch
   * calls of at most MAX_LIST writes; it returns the host's status, and
   * sets errHandle to the state of the writes when they were all of one.
   */
  flush(): i32 {
    const nd = this.ndirty;
    this.ndirty = 0;
    if (nd == 0) return 0;
    const per = nd < MAX_LIST ? nd : MAX_LIST;
    if (WRITE * <usize>per > this.listCap) {
      if (this.list != 0) heap.free(this.list);
      this.listCap = WRITE * <usize>per;
      this.list = heap.alloc(this.listCap);
    }
    const h = unchecked(this.groups[<i32>(load<u32>(this.dirty) >> 17)]).h;
    let one = true;
    let k = 0;
    for (let d = 0; d < nd; d++) {
      if (k == MAX_LIST) {
        const st = hostStateWriteBatch(this.list, <i32>(WRITE * <usize>k));
        if (st < 0) return this.failed(st, h, one);
        k = 0;
      }
      const e = load<u32>(this.dirty + <usize>d * 4);
      const g = unchecked(this.groups[<i32>(e >> 17)]);
      const f = e & 0x1ffff;
      const r = g.res + RESULT * <usize>f;
      const q = g.req + REQUEST * <usize>f;
      const w = this.list + WRITE * <usize>k;
      store<u32>(r, f); // clean again
      store<i32>(w, g.h);
      store<u64>(w, load<u64>(q), 4); // key
      store<u64>(w, load<u64>(q, 8), 12); // namespace
      store<u32>(w, load<u32>(r, 8), 20); // vptr
      store<i32>(w, load<i32>(r, 4), 24); // vlen; -1 (NOT_FOUND) deletes
      if (g.h != h) one = false;
      k++;
    }
    const st = hostStateWriteBatch(this.list, <i32>(WRITE * <usize>k));
    return st < 0 ? this.failed(st, h, one) : 0;
  }

  private failed(st: i32, h: i32, one: bool): i32 {
    this.errHandle = one ? h : -1;
    return st;
  }
}
