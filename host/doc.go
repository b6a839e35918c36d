// Package host is the worker side of the wstream ABI (abi/ABI.md): a wazero
// runtime that validates and compiles operator modules and runs them, one
// module instance per subtask, behind operator.Operator.
//
// The pieces, from coarse to fine:
//
//  1. A Runtime is one wazero runtime per worker with its compilation cache,
//     the memory limit, close-on-deadline enabled, and two host modules
//     instantiated once: "wstream" (the ABI's host functions) and
//     "wasi_snapshot_preview1" (with no capabilities: no files, environment,
//     arguments or sockets).
//  2. Compile validates a module completely before anything runs it: magic,
//     wazero's decoder and validator, every required export and its
//     signature, every import, and wstream_abi_version (which takes one
//     short-lived instantiation, also used to read the plan). Identical bytes
//     compiled twice share one compiled module, which Compiled also finds
//     by its digest. A tenant's module (TenantModule) is first checked on its
//     bytes against Config.ModuleLimits (instrument.Admit: sizes and counts
//     of every section, locals, tables, reserved export names), compiled
//     apart from the same bytes compiled for the admin, with its tables
//     capped, and refused when it cannot be instrumented.
//  3. NewInstance instantiates a Module for one subtask (running _initialize
//     when exported). Instance.Operator hands out operator slots 0, 1, 2…
//     that share the instance, as chained operators of one subtask do. The
//     instance takes the handle of an export (wazero's call engine, with a
//     call stack of its own) when it first calls it: most operators never
//     call half of them, and taking all nine was half of a C instance's
//     start. Its linear memory lies in a reservation of address space as
//     large as its memory limit: growing never copies it, and only the
//     pages the guest touches take memory (memLimiter).
//  4. Every guest call runs under a per-instance context whose deadline is
//     re-armed per call without allocating, and which is also done when the
//     context given to NewInstance (the job's) is. The time the operator's
//     state waited on storage during the call (operator.StorageWaiter) does
//     not count, up to maxStorageCredit budgets: the timer, when it fires,
//     gives that time back. When the
//     deadline passes, the
//     instance's stop flag is set (package instrument rewrote the module to
//     check it) and the instance is closed; the call returns a GuestError
//     and the instance stays unusable. A module the rewrite cannot decode
//     is stopped by wazero's own checks instead.
//  5. Limits bound what a guest makes the host do besides its memory and
//     its deadline (abi/ABI.md, "Limits"): output and state written per
//     call, pending and cascading timers, log lines, message sizes. A host
//     function that would exceed a quota panics with a *QuotaError, which
//     wazero turns into a trap, so the guest stops at once. Every text that
//     comes from the guest passes EscapeGuestText before it reaches a log,
//     an error or a terminal.
//  6. A trap makes the instance unusable, and its operators must be opened
//     again in a new instance, unless the instance holds a snapshot
//     (Instance.Snapshot: a copy of its memory and of the mutable globals
//     that package instrument exports, with the host's view of the guest):
//     Instance.Reset then puts it back into that state, its memory's size
//     included, comparing only the pages written since the snapshot where
//     the kernel tracks writes (Linux 6.7 and later: userfaultfd's
//     asynchronous write-protect, read back with PAGEMAP_SCAN) and every
//     page elsewhere, and keeps the handles of its exports, whose call
//     stacks are already grown. Dead-letter mode snapshots every instance
//     once its operators are open.
//
// Host functions are stack-based api.GoModuleFunc values. They find the
// instance of the call in progress from the context with a type assertion,
// bounds-check every guest pointer and length (StatusBadPointer, never a host
// panic), and allocate nothing on the per-record paths (state_get, state_put,
// emit, emit_batch).
//
// An operator made with Instance.OperatorWithStats counts its guest calls,
// by kind with a histogram of their durations, and the host functions its
// guest called (CallStats, for the worker's metrics): every host function
// adds one to a plain counter in the instance, and the call wrapper moves
// those counts and the call's duration into the CallStats once per guest
// call.
//
// An Instance and its operators are used from one goroutine at a time, as
// operator.Operator requires; Runtime and Module are safe for concurrent use.
package host
