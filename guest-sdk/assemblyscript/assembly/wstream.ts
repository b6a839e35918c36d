// The SDK's core: operators, their Context, keyed state, timers, buffered
// output and the runtime behind the ABI exports (exports.ts). See README.md
// for the API and abi/ABI.md for the contract with the host.

import {
  hostEmit, hostEmitBatch, hostOutputIndex, hostStateRegister, hostStateGet, hostStatePut,
  hostStateDelete, hostStateIter, hostTimerRegister, hostTimerDelete, hostCurrentWatermark,
  hostProcessingTime, hostLog, hostFail, hostProgressAt, hostCommit,
} from "./host";
import {
  OK, NOT_FOUND, BAD_POINTER, BAD_HANDLE, BAD_ARGUMENT, LIMIT, UNKNOWN_OPERATOR, GUEST_ERROR, statusText,
} from "./status";
import { Bytes, copyBytes, quote, quoteRaw, quoteString, str } from "./bytes";
import { StateCache, ENTRY_NONE, ENTRY_VALUE, ENTRY_ABSENT, ENTRY_UNKNOWN, MAX_KEY, MAX_VALUE } from "./cache";
import { lookupMember, decodeString, kindName, KIND_NONE, KIND_NULL, KIND_BOOL, KIND_NUMBER, KIND_STRING } from "./json";

/** The ABI version this SDK implements (the wstream_abi_version export). */
export const ABI_VERSION: i32 = 1;

/** Timer domains. */
export const EVENT_TIME: i32 = 0;
export const PROCESSING_TIME: i32 = 1;

/** Log levels. */
export const LOG_DEBUG: i32 = 0;
export const LOG_INFO: i32 = 1;
export const LOG_WARN: i32 = 2;
export const LOG_ERROR: i32 = 3;

/** Watermark bounds: before the first watermark, and once the input ended. */
export const MIN_WATERMARK: i64 = i64.MIN_VALUE;
export const MAX_WATERMARK: i64 = i64.MAX_VALUE;

const STATE_VALUE: i32 = 1;
const STATE_MAP: i32 = 2;

const RECORD_HEADER: i32 = 20;
const FLUSH_THRESHOLD: i32 = 64 << 10;
const MAX_SLOTS: i32 = 4096;
const INITIAL_GET_BUF: i32 = 256;
const INITIAL_PAGE: i32 = 4 << 10;
// One state_iter entry is at most a value (16 MiB), a namespace (64 KiB)
// and its 8-byte header.
const MAX_PAGE: i32 = (16 << 20) + (64 << 10) + 8;
const ABBREV: i32 = 64;

// ---- Arguments -----------------------------------------------------------

// Operators pass bytes as string (sent as UTF-8), Uint8Array, ArrayBuffer or
// Bytes. argLen and argWrite size and copy such an argument; argPtr gives
// the address of its bytes, encoding a string into scratch buffer slot.

let argScratch = new StaticArray<usize>(3);
let argScratchCap = new StaticArray<i32>(3);

function argLen<T>(v: T): i32 {
  if (isNullable<T>()) {
    if (v === null) return 0;
  }
  if (isString<T>()) return String.UTF8.byteLength(changetype<string>(v));
  if (v instanceof Uint8Array) return changetype<Uint8Array>(v).byteLength;
  if (v instanceof Bytes) return changetype<Bytes>(v).length;
  if (v instanceof ArrayBuffer) return changetype<ArrayBuffer>(v).byteLength;
  ERROR("wstream: bytes must be a string, Uint8Array, ArrayBuffer or Bytes");
  return 0;
}

// argWrite copies the n = argLen(v) bytes of v to p.
function argWrite<T>(v: T, p: usize, n: i32): void {
  if (n == 0) return;
  if (isString<T>()) {
    const s = changetype<string>(v);
    String.UTF8.encodeUnsafe(changetype<usize>(s), s.length, p);
    return;
  }
  memory.copy(p, argPtr<T>(v, 0), <usize>n);
}

// argPtr returns where the bytes of v are; a string is encoded into scratch
// buffer slot (0..2), valid until the next use of that slot.
function argPtr<T>(v: T, slot: i32): usize {
  if (isNullable<T>()) {
    if (v === null) return 0;
  }
  if (isString<T>()) {
    const s = changetype<string>(v);
    const n = String.UTF8.byteLength(s);
    if (n > argScratchCap[slot]) {
      const old = argScratch[slot];
      const p = old == 0 ? heap.alloc(<usize>n) : heap.realloc(old, <usize>n);
      argScratch[slot] = p;
      argScratchCap[slot] = n;
    }
    String.UTF8.encodeUnsafe(changetype<usize>(s), s.length, argScratch[slot]);
    return argScratch[slot];
  }
  if (v instanceof Uint8Array) return changetype<Uint8Array>(v).dataStart;
  if (v instanceof Bytes) return changetype<Bytes>(v).dataStart;
  if (v instanceof ArrayBuffer) return changetype<usize>(v);
  ERROR("wstream: bytes must be a string, Uint8Array, ArrayBuffer or Bytes");
  return 0;
}

// ---- Output ----------------------------------------------------------------

// The callback's output: an ABI batch of outCount records in raw memory,
// handed to the host with one emit_batch when the callback returns, or
// earlier once it passed FLUSH_THRESHOLD bytes.
let outPtr: usize = 0;
let outCap: i32 = 0;
let outLen: i32 = 4;
let outCount: i32 = 0;

function resetOut(): void {
  outLen = 4;
  outCount = 0;
}

// reserve makes room for n more bytes of output and returns where they go.
function reserve(n: i32): usize {
  const need = outLen + n;
  if (need > outCap) {
    let cap = outCap * 2;
    if (cap < need) cap = need;
    if (cap < FLUSH_THRESHOLD + 4096) cap = FLUSH_THRESHOLD + 4096;
    outPtr = outPtr == 0 ? heap.alloc(<usize>cap) : heap.realloc(outPtr, <usize>cap);
    outCap = cap;
  }
  const p = outPtr + <usize>outLen;
  outLen = need;
  return p;
}

// flush hands the buffered records to the host; a refusal fails c.
function flush(c: Context): void {
  if (outCount == 0) return;
  store<u32>(outPtr, <u32>outCount);
  const n = outCount;
  const st = hostEmitBatch(outPtr, outLen);
  resetOut();
  if (st < 0) c.setError("emitting " + n.toString() + " records: " + statusText(st));
}

// ---- Records and timers ----------------------------------------------------

/**
 * One input record. Its bytes live in the host's input batch: key and value
 * return copies (made on first use), which may be kept. The Record object
 * itself is reused for the next record: do not keep it.
 */
export class Record {
  /** The index of the input edge, in plan order; 0 for a single input. */
  input: u32 = 0;
  /** Event time, milliseconds since the Unix epoch. */
  timestamp: i64 = 0;
  /** Where the key and value bytes are, during the process call. */
  keyPtr: usize = 0;
  keyLength: i32 = 0;
  valuePtr: usize = 0;
  valueLength: i32 = 0;
  private _key: Uint8Array | null = null;
  private _value: Uint8Array | null = null;

  set(input: u32, ts: i64, kp: usize, kl: i32, vp: usize, vl: i32): void {
    this.input = input;
    this.timestamp = ts;
    this.keyPtr = kp;
    this.keyLength = kl;
    this.valuePtr = vp;
    this.valueLength = vl;
    this._key = null;
    this._value = null;
  }

  /** The key's bytes. */
  get key(): Uint8Array {
    let k = this._key;
    if (k === null) this._key = k = copyBytes(this.keyPtr, this.keyLength);
    return k;
  }

  /** The value's bytes. */
  get value(): Uint8Array {
    let v = this._value;
    if (v === null) this._value = v = copyBytes(this.valuePtr, this.valueLength);
    return v;
  }

  /** The key decoded as UTF-8. */
  keyString(): string {
    return String.UTF8.decodeUnsafe(this.keyPtr, <usize>this.keyLength);
  }

  /** The value decoded as UTF-8. */
  valueString(): string {
    return String.UTF8.decodeUnsafe(this.valuePtr, <usize>this.valueLength);
  }
}

/** A fired timer: its domain, time, key and namespace. Reused like Record. */
export class Timer {
  /** EVENT_TIME or PROCESSING_TIME. */
  domain: i32 = 0;
  timestamp: i64 = 0;
  keyPtr: usize = 0;
  keyLength: i32 = 0;
  namespacePtr: usize = 0;
  namespaceLength: i32 = 0;
  private _key: Uint8Array | null = null;
  private _ns: Uint8Array | null = null;

  set(domain: i32, ts: i64, kp: usize, kl: i32, np: usize, nl: i32): void {
    this.domain = domain;
    this.timestamp = ts;
    this.keyPtr = kp;
    this.keyLength = kl;
    this.namespacePtr = np;
    this.namespaceLength = nl;
    this._key = null;
    this._ns = null;
  }

  /** The key the timer was registered under. */
  get key(): Uint8Array {
    let k = this._key;
    if (k === null) this._key = k = copyBytes(this.keyPtr, this.keyLength);
    return k;
  }

  /** The namespace it was registered with. */
  get namespace(): Uint8Array {
    let n = this._ns;
    if (n === null) this._ns = n = copyBytes(this.namespacePtr, this.namespaceLength);
    return n;
  }

  keyString(): string {
    return String.UTF8.decodeUnsafe(this.keyPtr, <usize>this.keyLength);
  }

  namespaceString(): string {
    return String.UTF8.decodeUnsafe(this.namespacePtr, <usize>this.namespaceLength);
  }
}

// ---- Operators -------------------------------------------------------------

/**
 * Operator is what a module implements: one instance per opened operator
 * slot. Override process, and the other hooks as needed. A hook fails by
 * calling ctx.fail (or through a failing SDK call, which records its own
 * message); the SDK then fails the host call with that message.
 */
export abstract class Operator {
  /** Register states, read the config, look outputs up. */
  open(ctx: Context): void {}

  /** Called once per input record. */
  abstract process(ctx: Context, record: Record): void;

  /** Called once per fired timer, with the timer's key as the current key. */
  onTimer(ctx: Context, timer: Timer): void {
    ctx.fail("a timer fired but the operator does not override onTimer");
  }

  /** After the input ended and every event-time timer fired; may emit. */
  close(ctx: Context): void {}

  /** Before a checkpoint barrier is forwarded: flush buffered output. */
  preBarrier(ctx: Context, checkpoint: i64): void {}

  /** A checkpoint completed (for example: commit a transaction); may not emit. */
  checkpointComplete(ctx: Context, checkpoint: i64): void {}

  /** A checkpoint was aborted; may not emit. */
  checkpointAborted(ctx: Context, checkpoint: i64): void {}
}

const opNames = new Array<string>();
const opFactories = new Array<() => Operator>();

/**
 * register makes operator name available to the host's wstream_open; call
 * it at the top level of the module, once per operator.
 */
export function register(name: string, factory: () => Operator): void {
  assert(name.length > 0, "wstream: register: empty operator name");
  for (let i = 0; i < opNames.length; i++) {
    assert(opNames[i] != name, "wstream: register: operator registered twice");
  }
  opNames.push(name);
  opFactories.push(factory);
}

let planBytes: ArrayBuffer | null = null;

/**
 * setPlan sets the module's job plan (JSON, docs/plan.md), returned by the
 * wstream_plan export; flags and plan files given to `wstream deploy`
 * override it.
 */
export function setPlan(json: string): void {
  planBytes = String.UTF8.encode(json);
}

// ---- State migration -------------------------------------------------------

/**
 * A migration converts one value of a state whose layout version the plan
 * raised (abi/ABI.md, wstream_migrate): version is the layout version the
 * value was written with; key, ns and value are the entry (valid during the
 * call only). It returns the value in the current layout, or null after
 * failMigration to fail the restore (an upgrade then rolls back).
 */
export type MigrateFn = (version: i32, key: Uint8Array, ns: Uint8Array, value: Uint8Array) => Uint8Array | null;

const migrationKeys = new Array<string>();
const migrationFns = new Array<MigrateFn>();
let migrationError: string | null = null;
let migrated: Uint8Array | null = null;

/**
 * registerMigration registers fn for the values of state of operator op
 * (docs/upgrade.md); call it at the top level of the module.
 */
export function registerMigration(op: string, state: string, fn: MigrateFn): void {
  const k = op + "\u0000" + state;
  for (let i = 0; i < migrationKeys.length; i++) {
    assert(migrationKeys[i] != k, "wstream: registerMigration: state registered twice");
  }
  migrationKeys.push(k);
  migrationFns.push(fn);
}

/** failMigration says why the migration in progress fails; return null after it. */
export function failMigration(msg: string): void {
  migrationError = msg;
}

function view(ptr: usize, len: i32): Uint8Array {
  const b = new Uint8Array(len);
  if (len > 0) memory.copy(b.dataStart, ptr, <usize>len);
  return b;
}

export function abiMigrate(opPtr: usize, opLen: i32, statePtr: usize, stateLen: i32, version: i32,
  keyPtr: usize, keyLen: i32, nsPtr: usize, nsLen: i32, valPtr: usize, valLen: i32): i64 {
  const e = "wstream_migrate";
  if (!region(e, opPtr, opLen) || !region(e, statePtr, stateLen) || !region(e, keyPtr, keyLen) ||
    !region(e, nsPtr, nsLen) || !region(e, valPtr, valLen)) return <i64>BAD_POINTER;
  const op = String.UTF8.decodeUnsafe(opPtr, <usize>opLen);
  const state = String.UTF8.decodeUnsafe(statePtr, <usize>stateLen);
  const k = op + "\u0000" + state;
  let idx = -1;
  for (let i = 0; i < migrationKeys.length; i++) {
    if (migrationKeys[i] == k) idx = i;
  }
  if (idx < 0) {
    hostFailString("no migration registered for state " + quoteString(state) + " of operator " + quoteString(op) + " (registerMigration)");
    return <i64>BAD_ARGUMENT;
  }
  migrationError = null;
  const out = migrationFns[idx](version, view(keyPtr, keyLen), view(nsPtr, nsLen), view(valPtr, valLen));
  if (out === null) {
    const why = migrationError;
    hostFailString("migrating state " + quoteString(state) + " of operator " + quoteString(op) + " from version " +
      version.toString() + ": " + (why === null ? "the migration returned null" : why));
    return <i64>BAD_ARGUMENT;
  }
  // Kept until the next call: the host copies it after this one.
  migrated = out;
  if (out.length == 0) return 0;
  return (<i64>out.dataStart << 32) | <i64>out.length;
}

// ---- Context ---------------------------------------------------------------

class StateInfo {
  constructor(public h: i32, public kind: i32) {}
}

function kindWord(kind: i32): string {
  return kind == STATE_MAP ? "map" : "value";
}

/** An operator's view of the host, passed to every hook. */
export class Context {
  /** The name the operator was opened under. */
  readonly operatorName: string;
  /** The operator's configuration from the job plan (JSON), empty when none. */
  readonly config: Uint8Array;

  op: Operator;
  keyPtr: usize = 0;
  keyLen: i32 = 0;
  opening: bool = false;
  err: string | null = null;
  wm: i64 = 0;
  wmValid: bool = false;
  states: Map<string, StateInfo> = new Map();
  record: Record = new Record();
  timer: Timer = new Timer();
  /** State cached for the hook in progress (cache.ts). */
  cache: StateCache = new StateCache();

  constructor(name: string, config: Uint8Array, op: Operator) {
    this.operatorName = name;
    this.config = config;
    this.op = op;
  }

  // ---- errors

  /**
   * fail records why the current hook fails. The first message wins; the
   * SDK stops at the end of the hook, drops its buffered output and fails
   * the host call with `operator "NAME": PHASE: [record ...: ]msg`.
   */
  fail(msg: string): void {
    this.setError(msg);
  }

  /** Whether the current hook has failed (see fail): stop early when it has. */
  get failed(): bool {
    return this.err !== null;
  }

  setError(msg: string): void {
    if (this.err === null) this.err = msg;
  }

  // ---- configuration

  /** The configuration decoded as UTF-8. */
  configString(): string {
    return str(this.config);
  }

  private member(name: string): i32 {
    const m = lookupMember(this.config.dataStart, this.config.byteLength, name);
    if (m.error !== null) {
      this.fail("config " + quote(this.config, ABBREV) + ": " + m.error!);
      return -1;
    }
    if (m.kind == KIND_NONE || m.kind == KIND_NULL) return 0;
    this.memberStart = m.start;
    this.memberEnd = m.end;
    return m.kind;
  }
  private memberStart: i32 = 0;
  private memberEnd: i32 = 0;

  private wrongKind(name: string, kind: i32, want: string): void {
    this.fail("config " + quote(this.config, ABBREV) + ": member " + quoteString(name) + " is " +
      kindName(kind) + ", not " + want);
  }

  /**
   * configInt returns the integer top-level member name of the JSON object
   * configuration, or dflt when the configuration is empty or null or lacks
   * the member (or it is null). Names match as in Go's encoding/json: ASCII
   * case is ignored, the last match wins. Malformed JSON, another type, a
   * fraction or exponent, or a value beyond int64 fail the hook (see fail)
   * and return dflt.
   */
  configInt(name: string, dflt: i64): i64 {
    const k = this.member(name);
    if (k <= 0) return dflt;
    if (k != KIND_NUMBER) {
      this.wrongKind(name, k, "an integer");
      return dflt;
    }
    const p = this.config.dataStart + <usize>this.memberStart;
    const n = this.memberEnd - this.memberStart;
    const neg = load<u8>(p) == 45;
    const limit: u64 = neg ? <u64>1 << 63 : <u64>i64.MAX_VALUE;
    let u: u64 = 0;
    for (let i = neg ? 1 : 0; i < n; i++) {
      // The document is valid JSON: anything but a digit is a fraction or
      // an exponent.
      const c = load<u8>(p + <usize>i);
      if (c < 48 || c > 57) {
        this.fail("config member " + quoteString(name) + ": " + str(copyBytes(p, n)) + " is not an integer");
        return dflt;
      }
      const d = <u64>(c - 48);
      if (u > (limit - d) / 10) {
        this.fail("config member " + quoteString(name) + ": " + str(copyBytes(p, n)) +
          " is not an integer that fits in 64 bits");
        return dflt;
      }
      u = u * 10 + d;
    }
    return neg ? <i64>(<u64>0 - u) : <i64>u;
  }

  /** configStr is configInt for a string member. */
  configStr(name: string, dflt: string): string {
    const k = this.member(name);
    if (k <= 0) return dflt;
    if (k != KIND_STRING) {
      this.wrongKind(name, k, "a string");
      return dflt;
    }
    const b = decodeString(this.config.dataStart, this.memberStart, this.memberEnd);
    return String.UTF8.decodeUnsafe(b.dataStart, <usize>b.length);
  }

  /** configBool is configInt for a boolean member. */
  configBool(name: string, dflt: bool): bool {
    const k = this.member(name);
    if (k <= 0) return dflt;
    if (k != KIND_BOOL) {
      this.wrongKind(name, k, "a boolean");
      return dflt;
    }
    return load<u8>(this.config.dataStart + <usize>this.memberStart) == 116;
  }

  // ---- current key

  /** The current key: the record's in process, the timer's in onTimer, empty elsewhere. */
  get key(): Uint8Array {
    return copyBytes(this.keyPtr, this.keyLen);
  }

  // ---- output

  /**
   * emit sends a record to output 0. key and value are strings (sent as
   * UTF-8), Uint8Array, ArrayBuffer or Bytes; they are copied into the
   * SDK's output buffer at once.
   */
  emit<K, V>(key: K, value: V, ts: i64): void {
    this.emitTo<K, V>(0, key, value, ts);
  }

  /** emitTo sends a record to the output with index output (see output). */
  emitTo<K, V>(output: i32, key: K, value: V, ts: i64): void {
    if (output < 0) {
      this.fail("emitTo: negative output index " + output.toString());
      return;
    }
    const kl = argLen<K>(key);
    const vl = argLen<V>(value);
    const p = reserve(RECORD_HEADER + kl + vl);
    store<u32>(p, <u32>output);
    store<i64>(p, ts, 4);
    store<u32>(p, <u32>kl, 12);
    store<u32>(p, <u32>vl, 16);
    argWrite<K>(key, p + RECORD_HEADER, kl);
    argWrite<V>(value, p + RECORD_HEADER + <usize>kl, vl);
    outCount++;
    if (outLen >= FLUSH_THRESHOLD) flush(this);
  }

  /**
   * emitRaw is emitTo for bytes given by address and length, for example
   * part of a record's value (record.valuePtr): it allocates nothing, for
   * hot loops.
   */
  emitRaw(output: i32, keyPtr: usize, keyLen: i32, valuePtr: usize, valueLen: i32, ts: i64): void {
    if (output < 0) {
      this.fail("emitRaw: negative output index " + output.toString());
      return;
    }
    const p = reserve(RECORD_HEADER + keyLen + valueLen);
    store<u32>(p, <u32>output);
    store<i64>(p, ts, 4);
    store<u32>(p, <u32>keyLen, 12);
    store<u32>(p, <u32>valueLen, 16);
    if (keyLen > 0) memory.copy(p + RECORD_HEADER, keyPtr, <usize>keyLen);
    if (valueLen > 0) memory.copy(p + RECORD_HEADER + <usize>keyLen, valuePtr, <usize>valueLen);
    outCount++;
    if (outLen >= FLUSH_THRESHOLD) flush(this);
  }

  /**
   * emitUnbuffered makes one emit host call, after handing the buffered
   * output to the host so that records keep their order, and returns the
   * host's status. The slow path.
   */
  emitUnbuffered<K, V>(output: i32, key: K, value: V, ts: i64): i32 {
    flush(this);
    const kp = argPtr<K>(key, 1);
    const vp = argPtr<V>(value, 2);
    return hostEmit(<u32>output, ts, kp, argLen<K>(key), vp, argLen<V>(value));
  }

  /**
   * output returns the index of the named output of this operator's vertex
   * (its position in the plan's "outputs", default ["main"]), or BAD_OUTPUT
   * (negative) when there is none. Look outputs up in open.
   */
  output(name: string): i32 {
    return hostOutputIndex(argPtr<string>(name, 0), String.UTF8.byteLength(name));
  }

  // ---- time and log

  /** The event-time watermark, fetched once per hook. */
  get watermark(): i64 {
    if (!this.wmValid) {
      this.wm = hostCurrentWatermark();
      this.wmValid = true;
    }
    return this.wm;
  }

  /** The host's wall clock, milliseconds since the Unix epoch. */
  get processingTime(): i64 {
    return hostProcessingTime();
  }

  /**
   * log writes msg (a string, or bytes) to the worker's log at level
   * (LOG_DEBUG .. LOG_ERROR).
   */
  log<M>(level: i32, msg: M): void {
    hostLog(level, argPtr<M>(msg, 0), argLen<M>(msg));
  }

  // ---- state

  /**
   * valueState returns the value state called name. Call it in open, where
   * it registers the state with the host; later calls only look the name
   * up. A name not registered in open, or registered as a map state, fails
   * the hook (see fail).
   */
  valueState(name: string): ValueState {
    return new ValueState(this, this.state(name, STATE_VALUE), name, null);
  }

  /** mapState is valueState for a map state. */
  mapState(name: string): MapState {
    return new MapState(this, this.state(name, STATE_MAP), name);
  }

  private state(name: string, kind: i32): i32 {
    if (this.states.has(name)) {
      const si = this.states.get(name);
      if (si.kind != kind) {
        this.fail("state " + quoteString(name) + " is a " + kindWord(si.kind) + " state, not a " + kindWord(kind) + " state");
        return -1;
      }
      return si.h;
    }
    if (!this.opening) {
      const method = kind == STATE_MAP ? "mapState" : "valueState";
      this.fail(kindWord(kind) + " state " + quoteString(name) + " was not registered: call ctx." + method + "(" +
        quoteString(name) + ") in open");
      return -1;
    }
    const h = hostStateRegister(argPtr<string>(name, 0), String.UTF8.byteLength(name), kind);
    if (h < 0) {
      this.fail("registering " + kindWord(kind) + " state " + quoteString(name) + ": " + statusText(h));
      return -1;
    }
    this.states.set(name, new StateInfo(h, kind));
    return h;
  }

  // ---- timers

  /**
   * registerEventTimer registers a timer of the current key that fires when
   * the watermark reaches ts; ns (bytes, may be null) tells timers of one
   * key apart. The same (domain, key, ns, ts) twice is one timer. Returns
   * false when the host refused (the hook then fails).
   */
  registerEventTimer<N>(ts: i64, ns: N): bool {
    return this.timerCall<N>(true, EVENT_TIME, ts, ns);
  }

  /** registerProcessingTimer: a timer that fires when the wall clock reaches ts. */
  registerProcessingTimer<N>(ts: i64, ns: N): bool {
    return this.timerCall<N>(true, PROCESSING_TIME, ts, ns);
  }

  /** deleteEventTimer removes a timer; deleting an absent one is fine. */
  deleteEventTimer<N>(ts: i64, ns: N): bool {
    return this.timerCall<N>(false, EVENT_TIME, ts, ns);
  }

  deleteProcessingTimer<N>(ts: i64, ns: N): bool {
    return this.timerCall<N>(false, PROCESSING_TIME, ts, ns);
  }

  private timerCall<N>(register: bool, domain: i32, ts: i64, ns: N): bool {
    const np = argPtr<N>(ns, 0);
    const nl = argLen<N>(ns);
    const st = register
      ? hostTimerRegister(domain, this.keyPtr, this.keyLen, np, nl, ts)
      : hostTimerDelete(domain, this.keyPtr, this.keyLen, np, nl, ts);
    if (st < 0) {
      this.fail((register ? "register " : "delete ") + domainName(domain) + " timer at " + ts.toString() + ": " +
        statusText(st));
      return false;
    }
    return true;
  }
}

function domainName(d: i32): string {
  return d == EVENT_TIME ? "event time" : d == PROCESSING_TIME ? "processing time" : "unknown-domain";
}

// ---- Keyed state -----------------------------------------------------------

// The read buffer of state_get, grown to the largest value read.
let getBuf: usize = 0;
let getCap: i32 = 0;
// Where stateRead left the value: getBuf or the state cache's memory.
let readPtr: usize = 0;

// stateRead reads entry (h, current key, ns), from the state cache or
// with state_get, and returns its length with the value at readPtr, -1
// when absent, or -2 after recording an error on c.
function stateRead(c: Context, h: i32, what: string, name: string, np: usize, nl: i32): i32 {
  if (h < 0) {
    c.fail(what + " " + quoteString(name) + ": the state was not registered");
    return -2;
  }
  const cache = c.cache;
  let e = ENTRY_NONE;
  if (c.keyLen <= MAX_KEY && nl <= MAX_KEY) e = cache.find(h, np, nl);
  if (e == ENTRY_VALUE) {
    readPtr = cache.valuePtr;
    return cache.valueLen;
  }
  if (e == ENTRY_ABSENT) return -1;
  const n = stateReadDirect(c, h, what, name, np, nl);
  readPtr = getBuf;
  if (n >= 0 && e == ENTRY_UNKNOWN) {
    cache.keep(getBuf, n);
    readPtr = cache.valuePtr;
  }
  return n;
}

// stateReadDirect reads entry (h, current key, ns) with state_get into
// getBuf, like stateRead.
function stateReadDirect(c: Context, h: i32, what: string, name: string, np: usize, nl: i32): i32 {
  if (getBuf == 0) {
    getBuf = heap.alloc(<usize>INITIAL_GET_BUF);
    getCap = INITIAL_GET_BUF;
  }
  while (true) {
    const n = hostStateGet(h, c.keyPtr, c.keyLen, np, nl, getBuf, getCap);
    if (n == NOT_FOUND) return -1;
    if (n < 0) {
      c.fail(what + " " + quoteString(name) + ": " + statusText(n));
      return -2;
    }
    if (n <= getCap) return n;
    // Too small: nothing was copied. Grow to the value's size and retry.
    heap.free(getBuf);
    getBuf = heap.alloc(<usize>n);
    getCap = n;
  }
}

function readBytes(c: Context, h: i32, what: string, name: string, np: usize, nl: i32): Uint8Array | null {
  const n = stateRead(c, h, what, name, np, nl);
  if (n < 0) return null;
  return copyBytes(readPtr, n);
}

function readI64(c: Context, h: i32, what: string, kind: string, name: string, np: usize, nl: i32, dflt: i64): i64 {
  const n = stateRead(c, h, what, name, np, nl);
  if (n < 0) return dflt;
  if (n != 8) {
    c.fail(kind + " " + quoteString(name) + " holds " + n.toString() + " bytes, not an 8-byte int64: " +
      statusText(BAD_ARGUMENT));
    return dflt;
  }
  return load<i64>(readPtr);
}

// cacheWrite records a put of the vl bytes at vp (a delete for vl < 0) in
// the state cache and returns 1; 0, after recording an error on c, for a
// size over the ABI's limits; -1 when the write must go to the host at
// once.
function cacheWrite(c: Context, h: i32, what: string, name: string, np: usize, nl: i32, vp: usize, vl: i32): i32 {
  if (c.keyLen > MAX_KEY || nl > MAX_KEY || vl > MAX_VALUE) {
    c.fail(what + " " + quoteString(name) + ": " + statusText(LIMIT));
    return 0;
  }
  return c.cache.put(h, np, nl, vp, vl) ? 1 : -1;
}

function writeRaw(c: Context, h: i32, what: string, name: string, np: usize, nl: i32, vp: usize, vl: i32): bool {
  if (h < 0) {
    c.fail(what + " " + quoteString(name) + ": the state was not registered");
    return false;
  }
  const cw = cacheWrite(c, h, what, name, np, nl, vp, vl);
  if (cw >= 0) return cw > 0;
  const st = hostStatePut(h, c.keyPtr, c.keyLen, np, nl, vp, vl);
  if (st < 0) {
    c.fail(what + " " + quoteString(name) + ": " + statusText(st));
    return false;
  }
  return true;
}

function deleteRaw(c: Context, h: i32, what: string, name: string, np: usize, nl: i32): bool {
  if (h < 0) {
    c.fail(what + " " + quoteString(name) + ": the state was not registered");
    return false;
  }
  const cw = cacheWrite(c, h, what, name, np, nl, 0, -1);
  if (cw >= 0) return cw > 0;
  const st = hostStateDelete(h, c.keyPtr, c.keyLen, np, nl);
  if (st < 0) {
    c.fail(what + " " + quoteString(name) + ": " + statusText(st));
    return false;
  }
  return true;
}

let i64Scratch: usize = heap.alloc(8);

/**
 * ValueState is one value per (current key, namespace); the plain state
 * uses the empty namespace, namespace(ns) returns a view on another one
 * (for example a window). Get it from ctx.valueState in open. Integers are
 * 8 bytes little-endian, like the Go SDK's PutInt64, so state moves between
 * languages with a savepoint. Failed calls record an error on the Context
 * (the hook fails) and return null, 0 or false.
 */
export class ValueState {
  constructor(private c: Context, private h: i32, readonly name: string, private ns: Uint8Array | null) {}

  /** A view of this state under namespace ns (used as is: keep it unchanged). */
  namespace(ns: Uint8Array): ValueState {
    return new ValueState(this.c, this.h, this.name, ns);
  }

  private get np(): usize {
    const ns = this.ns;
    return ns === null ? 0 : ns.dataStart;
  }

  private get nl(): i32 {
    const ns = this.ns;
    return ns === null ? 0 : ns.byteLength;
  }

  /** The value of the current key, or null when there is none. */
  get(): Uint8Array | null {
    return readBytes(this.c, this.h, "get value state", this.name, this.np, this.nl);
  }

  /** The value decoded as UTF-8, or null. */
  getString(): string | null {
    const n = stateRead(this.c, this.h, "get value state", this.name, this.np, this.nl);
    if (n < 0) return null;
    return String.UTF8.decodeUnsafe(readPtr, <usize>n);
  }

  /** The value as an int64 (8 bytes little-endian), dflt when there is none. */
  getI64(dflt: i64 = 0): i64 {
    return readI64(this.c, this.h, "get value state", "value state", this.name, this.np, this.nl, dflt);
  }

  /** Whether the current key has a value (reads its size, not its bytes). */
  exists(): bool {
    if (this.h < 0) {
      this.c.fail("get value state " + quoteString(this.name) + ": the state was not registered");
      return false;
    }
    const c = this.c;
    if (c.keyLen <= MAX_KEY && this.nl <= MAX_KEY) {
      const e = c.cache.find(this.h, this.np, this.nl);
      if (e == ENTRY_VALUE) return true;
      if (e == ENTRY_ABSENT) return false;
    }
    const st = hostStateGet(this.h, this.c.keyPtr, this.c.keyLen, this.np, this.nl, 0, 0);
    if (st == NOT_FOUND) return false;
    if (st < 0) {
      this.c.fail("get value state " + quoteString(this.name) + ": " + statusText(st));
      return false;
    }
    return true;
  }

  /** Stores v (string, Uint8Array, ArrayBuffer or Bytes). */
  put<V>(v: V): bool {
    return writeRaw(this.c, this.h, "put value state", this.name, this.np, this.nl, argPtr<V>(v, 1), argLen<V>(v));
  }

  /** Stores v as 8 bytes little-endian. */
  putI64(v: i64): bool {
    store<i64>(i64Scratch, v);
    return writeRaw(this.c, this.h, "put value state", this.name, this.np, this.nl, i64Scratch, 8);
  }

  /** Removes the value; removing an absent one is fine. */
  delete(): bool {
    return deleteRaw(this.c, this.h, "delete value state", this.name, this.np, this.nl);
  }
}

/**
 * MapState is a sorted map per current key whose keys are state
 * namespaces: iteration visits them in byte order. Map keys and values are
 * strings (as UTF-8), Uint8Array, ArrayBuffer or Bytes.
 */
export class MapState {
  constructor(private c: Context, private h: i32, readonly name: string) {}

  /** The value under map key k, or null. */
  get<K>(k: K): Uint8Array | null {
    return readBytes(this.c, this.h, "get map state", this.name, argPtr<K>(k, 0), argLen<K>(k));
  }

  getString<K>(k: K): string | null {
    const n = stateRead(this.c, this.h, "get map state", this.name, argPtr<K>(k, 0), argLen<K>(k));
    if (n < 0) return null;
    return String.UTF8.decodeUnsafe(readPtr, <usize>n);
  }

  getI64<K>(k: K, dflt: i64 = 0): i64 {
    return readI64(this.c, this.h, "get map state", "map state", this.name, argPtr<K>(k, 0), argLen<K>(k), dflt);
  }

  contains<K>(k: K): bool {
    return stateRead(this.c, this.h, "get map state", this.name, argPtr<K>(k, 0), argLen<K>(k)) >= 0;
  }

  put<K, V>(k: K, v: V): bool {
    return writeRaw(this.c, this.h, "put map state", this.name, argPtr<K>(k, 0), argLen<K>(k), argPtr<V>(v, 1), argLen<V>(v));
  }

  putI64<K>(k: K, v: i64): bool {
    store<i64>(i64Scratch, v);
    return writeRaw(this.c, this.h, "put map state", this.name, argPtr<K>(k, 0), argLen<K>(k), i64Scratch, 8);
  }

  delete<K>(k: K): bool {
    return deleteRaw(this.c, this.h, "delete map state", this.name, argPtr<K>(k, 0), argLen<K>(k));
  }

  /**
   * iter returns an iterator over the entries of the current key whose map
   * key starts with prefix, in byte order. It pages through the host's
   * state_iter; the map may change while it runs.
   */
  iter<P>(prefix: P): MapIterator {
    const n = argLen<P>(prefix);
    const p = new Uint8Array(n);
    if (n > 0) memory.copy(p.dataStart, argPtr<P>(prefix, 0), <usize>n);
    return new MapIterator(this.c, this.h, this.name, p);
  }

  /** entries iterates over every entry of the current key. */
  entries(): MapIterator {
    return new MapIterator(this.c, this.h, this.name, new Uint8Array(0));
  }
}

/**
 * MapIterator walks a map state: `while (it.next()) { it.key ... }`.
 * key and value return copies; keyLength, keyPtr and the other raw views
 * point into its page, valid until the next call of next.
 */
export class MapIterator {
  private page: Uint8Array = new Uint8Array(INITIAL_PAGE);
  private after: Uint8Array = new Uint8Array(64);
  private afterLen: i32 = -1;
  private pos: i32 = 0;
  private end: i32 = 0;
  private done: bool = false;
  private key_: Uint8Array | null = null;
  private value_: Uint8Array | null = null;
  keyPtr: usize = 0;
  keyLength: i32 = 0;
  valuePtr: usize = 0;
  valueLength: i32 = 0;

  constructor(private c: Context, private h: i32, private name: string, private prefix: Uint8Array) {
    if (h < 0) {
      c.fail("iterate map state " + quoteString(name) + ": the state was not registered");
      this.done = true;
    }
  }

  /** Moves to the next entry; false at the end or after an error. */
  next(): bool {
    if (this.done) return false;
    if (this.pos >= this.end && !this.fetch()) {
      this.done = true;
      return false;
    }
    const b = this.page.dataStart + <usize>this.pos;
    const nl = <i32>load<u32>(b);
    const vl = <i32>load<u32>(b, 4);
    this.keyPtr = b + 8;
    this.keyLength = nl;
    this.valuePtr = b + 8 + <usize>nl;
    this.valueLength = vl;
    this.key_ = null;
    this.value_ = null;
    this.pos += 8 + nl + vl;
    return true;
  }

  // fetch loads the next page after the last key returned; false at the end.
  private fetch(): bool {
    // The host iterates its own state: hand it the cached writes first.
    if (!flushState(this.c)) return false;
    if (this.pos > 0) {
      // Continue after the last map key returned, copied out of the page
      // the next call overwrites.
      if (this.keyLength > this.after.byteLength) this.after = new Uint8Array(this.keyLength * 2);
      memory.copy(this.after.dataStart, this.keyPtr, <usize>this.keyLength);
      this.afterLen = this.keyLength;
    }
    while (true) {
      const st = hostStateIter(this.h, this.c.keyPtr, this.c.keyLen, this.prefix.dataStart, this.prefix.byteLength,
        this.after.dataStart, this.afterLen, this.page.dataStart, this.page.byteLength);
      if (st == LIMIT && this.page.byteLength < MAX_PAGE) {
        // Not even the first entry fits: a larger page.
        let cap = this.page.byteLength * 4;
        if (cap > MAX_PAGE) cap = MAX_PAGE;
        this.page = new Uint8Array(cap);
        continue;
      }
      if (st < 0) {
        this.c.fail("iterate map state " + quoteString(this.name) + ": " + statusText(st));
        return false;
      }
      this.pos = 0;
      this.end = st;
      return st > 0;
    }
  }

  /** The current entry's map key. */
  get key(): Uint8Array {
    let k = this.key_;
    if (k === null) this.key_ = k = copyBytes(this.keyPtr, this.keyLength);
    return k;
  }

  /** The current entry's value. */
  get value(): Uint8Array {
    let v = this.value_;
    if (v === null) this.value_ = v = copyBytes(this.valuePtr, this.valueLength);
    return v;
  }

  keyString(): string {
    return String.UTF8.decodeUnsafe(this.keyPtr, <usize>this.keyLength);
  }

  valueString(): string {
    return String.UTF8.decodeUnsafe(this.valuePtr, <usize>this.valueLength);
  }

  /** The current value as an int64 (8 bytes little-endian); fails the hook on another size. */
  valueI64(): i64 {
    if (this.valueLength != 8) {
      this.c.fail("map state " + quoteString(this.name) + " holds " + this.valueLength.toString() +
        " bytes, not an 8-byte int64: " + statusText(BAD_ARGUMENT));
      return 0;
    }
    return load<i64>(this.valuePtr);
  }
}

// ---- Runtime behind the exports ----------------------------------------------

// The argument arena (wstream_alloc): replaced only by a larger one.
let arena: usize = 0;
let arenaCap: i32 = 0;

const slots = new Array<Context | null>();

export function hostFailString(msg: string): void {
  const b = String.UTF8.encode(msg);
  hostFail(changetype<usize>(b), b.byteLength);
}

export function abiAlloc(size: i32): usize {
  if (size < 0) return 0;
  if (size > arenaCap || arena == 0) {
    // Grow geometrically so that a host growing batches step by step does
    // not reallocate on every step.
    let cap = arenaCap * 2;
    if (cap < size) cap = size;
    if (cap < 64 << 10) cap = 64 << 10;
    if (arena != 0) heap.free(arena);
    arena = heap.alloc(<usize>cap);
    arenaCap = cap;
  }
  return arena;
}

// region checks that [ptr, ptr+len) lies inside the arena.
function region(exportName: string, ptr: usize, len: i32): bool {
  if (len == 0) return true;
  if (len < 0 || arena == 0 || ptr < arena || <u64>(ptr - arena) + <u64>len > <u64>arenaCap) {
    hostFailString(exportName + ": region [0x" + ptr.toString(16) + ", +" + len.toString() +
      ") lies outside the " + arenaCap.toString() + "-byte argument arena returned by wstream_alloc");
    return false;
  }
  return true;
}

function slot(op: i32): Context | null {
  if (op < 0 || op >= slots.length) return null;
  return slots[op];
}

function noSlot(exportName: string, op: i32): i32 {
  hostFailString(exportName + ": operator slot " + op.toString() + " is not open");
  return BAD_HANDLE;
}

// flushState hands the cached state writes to the host; false, after
// recording an error on c, when the host refuses one.
function flushState(c: Context): bool {
  const st = c.cache.flush();
  if (st < 0) {
    c.fail(writeBackError(c, st, c.cache.errHandle));
    return false;
  }
  return true;
}

function writeBackError(c: Context, st: i32, h: i32): string {
  const names = c.states.keys();
  for (let i = 0; i < names.length; i++) {
    if (h >= 0 && c.states.get(names[i]).h == h) return "write back state " + quoteString(names[i]) + ": " + statusText(st);
  }
  return "write back state: " + statusText(st);
}

// endState writes the cached writes back and empties the cache at the end
// of a hook, whether it succeeds or fails, as the unbatched calls would
// have.
function endState(c: Context): void {
  const failed = c.err !== null;
  if (flushState(c) && !failed && c.cache.err != 0) c.fail(writeBackError(c, c.cache.err, -1));
  c.cache.reset();
}

function begin(c: Context): void {
  c.keyPtr = 0;
  c.keyLen = 0;
  c.wmValid = false;
  c.err = null;
  resetOut();
}

function failCallback(c: Context, phase: string, what: string, msg: string): i32 {
  resetOut();
  c.keyPtr = 0;
  c.keyLen = 0;
  hostFailString("operator " + quoteString(c.operatorName) + ": " + phase + ": " + what + msg);
  return GUEST_ERROR;
}

// finish ends a hook: it reports an error, or else hands the buffered
// output to the host.
function finish(c: Context, phase: string, what: string): i32 {
  const failed = c.err !== null;
  endState(c);
  c.keyPtr = 0;
  c.keyLen = 0;
  if (failed) return failCallback(c, phase, what, c.err!);
  if (c.err !== null) return failCallback(c, phase, "", c.err!);
  flush(c);
  if (c.err !== null) return failCallback(c, phase, "", c.err!);
  return OK;
}

export function abiOpen(op: i32, namePtr: usize, nameLen: i32, cfgPtr: usize, cfgLen: i32): i32 {
  if (!region("wstream_open", namePtr, nameLen) || !region("wstream_open", cfgPtr, cfgLen)) return BAD_POINTER;
  if (op < 0 || op >= MAX_SLOTS) {
    hostFailString("wstream_open: operator slot " + op.toString() + " is outside [0, " + MAX_SLOTS.toString() + ")");
    return BAD_HANDLE;
  }
  const open = slot(op);
  if (open !== null) {
    hostFailString("wstream_open: operator slot " + op.toString() + " is already open (operator " +
      quoteString(open.operatorName) + ")");
    return BAD_HANDLE;
  }
  const name = String.UTF8.decodeUnsafe(namePtr, <usize>nameLen);
  let idx = -1;
  const nb = copyBytes(namePtr, nameLen);
  for (let i = 0; i < opNames.length; i++) {
    const want = String.UTF8.encode(opNames[i]);
    if (want.byteLength == nameLen && memory.compare(changetype<usize>(want), namePtr, <usize>nameLen) == 0) {
      idx = i;
      break;
    }
  }
  if (idx < 0) {
    let have = "";
    for (let i = 0; i < opNames.length; i++) have += (i > 0 ? " " : "") + quoteString(opNames[i]);
    hostFailString("wstream_open: the module has no operator " + quote(nb, 256) + "; it has [" + have + "]");
    return UNKNOWN_OPERATOR;
  }
  if (!progressNamed) {
    progressNamed = true;
    hostProgressAt(progressWord);
  }
  while (slots.length <= op) slots.push(null);
  const c = new Context(name, copyBytes(cfgPtr, cfgLen), opFactories[idx]());
  begin(c);
  c.opening = true;
  c.op.open(c);
  c.opening = false;
  const st = finish(c, "open", "");
  if (st == OK) slots[op] = c;
  return st;
}

function badBatch(c: Context, kind: string, problem: string, index: u32, off: u32): i32 {
  endState(c);
  resetOut();
  c.keyPtr = 0;
  c.keyLen = 0;
  if (off == 0) {
    hostFailString("operator " + quoteString(c.operatorName) + ": " + kind + " batch from the host: malformed batch: " +
      index.toString() + " bytes is " + problem);
  } else {
    hostFailString("operator " + quoteString(c.operatorName) + ": " + kind + " batch from the host: malformed batch: record " +
      index.toString() + " at offset " + off.toString() + ": " + problem);
  }
  return BAD_ARGUMENT;
}

// progressWord holds the index, in the running wstream_process or
// wstream_on_timer call's batch, of the record or timer being processed
// (0xFFFFFFFF between records); its address goes to the host at the first
// open (progress_at). In dead-letter mode the host reads it when a callback
// fails, an abort included, and takes that record out instead of searching
// the batch.
const progressWord: usize = memory.data<u32>([0xFFFFFFFF]);
let progressNamed = false;

// firstCommit asks the host where the batch callback starting marks its
// first commit point (commit): a record's index, 0xFFFFFFFF for none.
function firstCommit(): u32 {
  const st = hostCommit(0);
  return st > 0 ? <u32>st : 0xFFFFFFFF;
}

// commitPoint marks a commit point before record (or timer) i: the cached
// state writes and the buffered output of the records before it go to the
// host, which keeps them should the callback fail later (dead-letter mode
// then runs again only the records after it). It returns the index of the
// next point the host asks for, 0xFFFFFFFF for none; a failure is recorded
// on c.
function commitPoint(c: Context, i: u32): u32 {
  if (!flushState(c)) return 0xFFFFFFFF;
  if (c.cache.err != 0) {
    c.fail(writeBackError(c, c.cache.err, -1));
    return 0xFFFFFFFF;
  }
  flush(c);
  if (c.err !== null) return 0xFFFFFFFF;
  const st = hostCommit(i);
  if (st < 0) {
    c.fail("commit point before record " + i.toString() + ": " + statusText(st));
    return 0xFFFFFFFF;
  }
  return st == 0 ? 0xFFFFFFFF : i + <u32>st;
}

// batch walks an input or timer batch and calls the operator for each entry.
function runBatch(exportName: string, op: i32, ptr: usize, len: i32, timers: bool): i32 {
  const c = slot(op);
  if (c === null) return noSlot(exportName, op);
  if (!region(exportName, ptr, len)) return BAD_POINTER;
  const kind = timers ? "timer" : "input";
  if (len < 4) return badBatch(c, kind, "shorter than the 4-byte header", <u32>len, 0);
  begin(c);
  const count = load<u32>(ptr);
  const e = ptr + <usize>len;
  let p = ptr + 4;
  const phase = timers ? "on_timer" : "process";
  let next = firstCommit();
  for (let i: u32 = 0; i < count; i++) {
    if (i == next) {
      store<u32>(progressWord, 0xFFFFFFFF); // a failure in here is no record's
      next = commitPoint(c, i);
      if (c.err !== null) return finish(c, phase, "");
    }
    const left = e - p;
    if (left < <usize>RECORD_HEADER) return badBatch(c, kind, "header truncated", i, <u32>(p - ptr));
    const kl = load<u32>(p, 12);
    const vl = load<u32>(p, 16);
    if (<u64>kl + <u64>vl > <u64>(left - RECORD_HEADER)) {
      return badBatch(c, kind, "key and value overrun the batch", i, <u32>(p - ptr));
    }
    const port = load<u32>(p);
    const ts = load<i64>(p, 4);
    const kp = p + RECORD_HEADER;
    const vp = kp + <usize>kl;
    c.keyPtr = kp;
    c.keyLen = <i32>kl;
    const cache = c.cache;
    cache.bp = p;
    cache.be = e;
    cache.left = count - i;
    cache.rec = i;
    store<u32>(progressWord, i);
    if (timers) {
      const t = c.timer;
      t.set(<i32>port, ts, kp, <i32>kl, vp, <i32>vl);
      c.op.onTimer(c, t);
      if (c.err !== null) {
        return finish(c, phase, domainName(<i32>port) + " timer at " + ts.toString() + " (key " +
          quoteRaw(kp, <i32>kl, ABBREV) + "): ");
      }
    } else {
      const r = c.record;
      r.set(port, ts, kp, <i32>kl, vp, <i32>vl);
      c.op.process(c, r);
      if (c.err !== null) {
        return finish(c, phase, "record " + i.toString() + " of " + count.toString() + " (key " +
          quoteRaw(kp, <i32>kl, ABBREV) + "): ");
      }
    }
    p = vp + <usize>vl;
  }
  // A failure from here on is no record's.
  store<u32>(progressWord, 0xFFFFFFFF);
  if (p != e) {
    endState(c);
    resetOut();
    c.keyPtr = 0;
    c.keyLen = 0;
    hostFailString("operator " + quoteString(c.operatorName) + ": " + kind + " batch from the host: malformed batch: " +
      (e - p).toString() + " trailing bytes after " + count.toString() + " records");
    return BAD_ARGUMENT;
  }
  return finish(c, phase, "");
}

export function abiProcess(op: i32, ptr: usize, len: i32): i32 {
  return runBatch("wstream_process", op, ptr, len, false);
}

export function abiOnTimer(op: i32, ptr: usize, len: i32): i32 {
  return runBatch("wstream_on_timer", op, ptr, len, true);
}

export function abiClose(op: i32): i32 {
  const c = slot(op);
  if (c === null) return noSlot("wstream_close", op);
  // The slot is gone whatever close does: the host never calls it again.
  slots[op] = null;
  begin(c);
  c.op.close(c);
  return finish(c, "close", "");
}

export function abiCheckpointHook(exportName: string, phase: string, op: i32, id: i64, hook: i32): i32 {
  const c = slot(op);
  if (c === null) return noSlot(exportName, op);
  begin(c);
  if (hook == 0) c.op.preBarrier(c, id);
  else if (hook == 1) c.op.checkpointComplete(c, id);
  else c.op.checkpointAborted(c, id);
  return finish(c, phase, "checkpoint " + id.toString() + ": ");
}

export function abiPlan(): i64 {
  const p = planBytes;
  if (p === null) return 0;
  return (<i64>changetype<usize>(p) << 32) | <i64>p.byteLength;
}

// abiAbort reports an AssemblyScript abort (a failed assert, an index out of
// range, a throw) through the host's log and fail, then traps: the runtime
// cannot go on after one.
export function abiAbort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  // A flag in static memory: an abort may come before globals are set up,
  // and building the message may abort again.
  const aborting = memory.data(4);
  if (load<u32>(aborting) == 0) {
    store<u32>(aborting, 1);
    let msg = "abort: " + (message !== null ? message : "(no message)");
    if (fileName !== null) msg += " at " + fileName + ":" + line.toString() + ":" + column.toString();
    const b = String.UTF8.encode(msg);
    hostLog(LOG_ERROR, changetype<usize>(b), b.byteLength);
    hostFail(changetype<usize>(b), b.byteLength);
  }
  unreachable();
}
