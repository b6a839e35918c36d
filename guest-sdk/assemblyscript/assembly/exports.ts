// The ABI exports of abi/ABI.md. A module re-exports them from its entry
// file, next to its operators:
//
//     export * from "<sdk>/assembly/exports";
//
// and compiles with `--use abort=wstreamAbort`, so that AssemblyScript's
// aborts go through the host's fail import instead of an env.abort import.

import {
  ABI_VERSION, abiAlloc, abiOpen, abiProcess, abiOnTimer, abiClose, abiCheckpointHook, abiPlan, abiAbort, abiMigrate,
} from "./wstream";

export function wstream_abi_version(): i32 {
  return ABI_VERSION;
}

export function wstream_alloc(size: i32): usize {
  return abiAlloc(size);
}

export function wstream_open(op: i32, namePtr: usize, nameLen: i32, cfgPtr: usize, cfgLen: i32): i32 {
  return abiOpen(op, namePtr, nameLen, cfgPtr, cfgLen);
}

export function wstream_process(op: i32, ptr: usize, len: i32): i32 {
  return abiProcess(op, ptr, len);
}

export function wstream_on_timer(op: i32, ptr: usize, len: i32): i32 {
  return abiOnTimer(op, ptr, len);
}

export function wstream_close(op: i32): i32 {
  return abiClose(op);
}

export function wstream_plan(): i64 {
  return abiPlan();
}

export function wstream_pre_barrier(op: i32, checkpoint: i64): i32 {
  return abiCheckpointHook("wstream_pre_barrier", "pre_barrier", op, checkpoint, 0);
}

export function wstream_checkpoint_complete(op: i32, checkpoint: i64): i32 {
  return abiCheckpointHook("wstream_checkpoint_complete", "checkpoint_complete", op, checkpoint, 1);
}

export function wstream_checkpoint_aborted(op: i32, checkpoint: i64): i32 {
  return abiCheckpointHook("wstream_checkpoint_aborted", "checkpoint_aborted", op, checkpoint, 2);
}

export function wstream_migrate(opPtr: usize, opLen: i32, statePtr: usize, stateLen: i32, version: i32,
  keyPtr: usize, keyLen: i32, nsPtr: usize, nsLen: i32, valPtr: usize, valLen: i32): i64 {
  return abiMigrate(opPtr, opLen, statePtr, stateLen, version, keyPtr, keyLen, nsPtr, nsLen, valPtr, valLen);
}

// wstreamAbort replaces AssemblyScript's abort (--use abort=wstreamAbort):
// the message goes to the host's log and fail, then the module traps.
@global
function wstreamAbort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  abiAbort(message, fileName, line, column);
}
