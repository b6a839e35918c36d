// The host functions of abi/ABI.md, module "wstream". Pointers are offsets
// into this module's memory; lengths are signed i32. Everything else in the
// SDK calls these; operators use Context, ValueState and MapState instead.

@external("wstream", "emit")
export declare function hostEmit(port: u32, ts: i64, keyPtr: usize, keyLen: i32, valPtr: usize, valLen: i32): i32;

@external("wstream", "emit_batch")
export declare function hostEmitBatch(ptr: usize, len: i32): i32;

@external("wstream", "output_index")
export declare function hostOutputIndex(namePtr: usize, nameLen: i32): i32;

@external("wstream", "state_register")
export declare function hostStateRegister(namePtr: usize, nameLen: i32, kind: i32): i32;

@external("wstream", "state_get")
export declare function hostStateGet(h: i32, keyPtr: usize, keyLen: i32, nsPtr: usize, nsLen: i32, outPtr: usize, outCap: i32): i32;

@external("wstream", "state_put")
export declare function hostStatePut(h: i32, keyPtr: usize, keyLen: i32, nsPtr: usize, nsLen: i32, valPtr: usize, valLen: i32): i32;

@external("wstream", "state_delete")
export declare function hostStateDelete(h: i32, keyPtr: usize, keyLen: i32, nsPtr: usize, nsLen: i32): i32;

@external("wstream", "state_iter")
export declare function hostStateIter(
  h: i32, keyPtr: usize, keyLen: i32, prefixPtr: usize, prefixLen: i32,
  afterPtr: usize, afterLen: i32, outPtr: usize, outCap: i32,
): i32;

@external("wstream", "timer_register")
export declare function hostTimerRegister(domain: i32, keyPtr: usize, keyLen: i32, nsPtr: usize, nsLen: i32, ts: i64): i32;

@external("wstream", "timer_delete")
export declare function hostTimerDelete(domain: i32, keyPtr: usize, keyLen: i32, nsPtr: usize, nsLen: i32, ts: i64): i32;

// The optional batched state functions (abi/ABI.md, "Batched state
// access"): lists of (ptr, len) pairs into this module's memory.
@external("wstream", "state_get_many")
export declare function hostStateGetMany(h: i32, reqPtr: usize, reqLen: i32, outPtr: usize, outCap: i32): i32;

@external("wstream", "state_write_batch")
export declare function hostStateWriteBatch(ptr: usize, len: i32): i32;

@external("wstream", "current_watermark")
export declare function hostCurrentWatermark(): i64;

@external("wstream", "processing_time")
export declare function hostProcessingTime(): i64;

@external("wstream", "log")
export declare function hostLog(level: i32, ptr: usize, len: i32): void;

@external("wstream", "fail")
export declare function hostFail(ptr: usize, len: i32): void;

// Optional (abi/ABI.md, progress_at): names the SDK's progress word.
@external("wstream", "progress_at")
export declare function hostProgressAt(ptr: usize): i32;

// Optional (abi/ABI.md, commit): the records of the running batch callback
// before done are done; returns the records wanted before the next point.
@external("wstream", "commit")
export declare function hostCommit(done: u32): i32;
