;; reference.wat is the skeleton of a wstream operator module written by
;; hand in WebAssembly text against the raw ABI (abi/ABI.md), without any
;; SDK. Copy it, keep the runtime part, replace the operators. It has two:
;;
;;   identity  emits every record unchanged (key, value, timestamp): the
;;             batch walk and the output buffer, nothing else;
;;   dedup     keyed: emits a record only the first time its key is seen
;;             within 1000 ms of event time. Value state "seen" holds the
;;             time it was seen (an int64, 8 bytes little-endian, as every
;;             SDK stores integers); an event-time timer 1000 ms later
;;             forgets it.
;;
;; Assemble with
;;
;;     wat2wasm -o reference.wasm guest-sdk/wat/reference.wat
;;
;; guest-sdk/wat/README.md explains the memory layout, the batch walk and
;; every export and import used here.
(module
  ;; ---------------------------------------------------------------- imports
  ;; Every host function of the ABI, all from module "wstream" (the host
  ;; refuses any other import). A module may import any subset; the ones
  ;; this skeleton does not call are here to show their signatures.
  (import "wstream" "emit" (func $emit_one (param i32 i64 i32 i32 i32 i32) (result i32)))      ;; port ts key_ptr key_len val_ptr val_len
  (import "wstream" "emit_batch" (func $emit_batch (param i32 i32) (result i32)))             ;; batch_ptr batch_len
  (import "wstream" "output_index" (func $output_index (param i32 i32) (result i32)))         ;; name_ptr name_len -> index
  (import "wstream" "state_register" (func $state_register (param i32 i32 i32) (result i32))) ;; name_ptr name_len kind -> handle
  (import "wstream" "state_get" (func $state_get (param i32 i32 i32 i32 i32 i32 i32) (result i32)))  ;; h key ns out_ptr out_cap -> len
  (import "wstream" "state_put" (func $state_put (param i32 i32 i32 i32 i32 i32 i32) (result i32)))  ;; h key ns val
  (import "wstream" "state_delete" (func $state_delete (param i32 i32 i32 i32 i32) (result i32)))    ;; h key ns
  (import "wstream" "state_iter" (func $state_iter (param i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32))) ;; h key prefix after out
  (import "wstream" "timer_register" (func $timer_register (param i32 i32 i32 i32 i32 i64) (result i32))) ;; domain key ns ts
  (import "wstream" "timer_delete" (func $timer_delete (param i32 i32 i32 i32 i32 i64) (result i32)))     ;; domain key ns ts
  (import "wstream" "current_watermark" (func $current_watermark (result i64)))
  (import "wstream" "processing_time" (func $processing_time (result i64)))
  (import "wstream" "log" (func $log (param i32 i32 i32)))                                     ;; level ptr len
  (import "wstream" "fail" (func $fail (param i32 i32)))                                       ;; ptr len
  ;; Optional, batched (README.md, "Batched state"): lists of (ptr, len) pairs.
  (import "wstream" "state_get_many" (func $state_get_many (param i32 i32 i32 i32 i32) (result i32)))  ;; h req req_len out out_cap -> size needed
  (import "wstream" "state_write_batch" (func $state_write_batch (param i32 i32) (result i32)))        ;; writes writes_len
  ;; Optional: where the guest keeps the index of the record it is on, so
  ;; that dead-letter mode finds a failing record without searching.
  (import "wstream" "progress_at" (func $progress_at (param i32) (result i32)))                    ;; ptr (0: none)
  ;; Optional: in process and on_timer, the records before done are done
  ;; (output emitted, state written); returns the records wanted before the
  ;; next such point, 0 for none (abi/ABI.md, "commit"). This skeleton
  ;; holds no state between records, so it has nothing to gain from it.
  (import "wstream" "commit" (func $commit (param i32) (result i32)))                              ;; done -> interval

  ;; ----------------------------------------------------------------- memory
  ;; 0x0400 message buffer (1 KiB)      0x0800 scratch for digits and int64s
  ;; 0x1000 slot table (64 x 32 bytes)  0x2000 constant strings, NUL-ended
  ;; 0x10000 heap: the argument arena and the output buffer (bump allocated)
  (memory (export "memory") 2)

  (global $heap (mut i32) (i32.const 0x10000))     ;; first free heap byte
  (global $arena (mut i32) (i32.const 0))          ;; last wstream_alloc region
  (global $arena_cap (mut i32) (i32.const 0))
  (global $out (mut i32) (i32.const 0))            ;; output batch buffer
  (global $out_cap (mut i32) (i32.const 0))
  (global $out_len (mut i32) (i32.const 0))        ;; 0 when empty, else 4 + records
  (global $out_n (mut i32) (i32.const 0))          ;; records in the buffer
  (global $msg_len (mut i32) (i32.const 0))
  ;; The callback in progress, for error messages.
  (global $cur_name (mut i32) (i32.const 0))       ;; operator name (C string)
  (global $cur_phase (mut i32) (i32.const 0))      ;; "process", "on_timer", ...
  (global $cur_what (mut i32) (i32.const 0))       ;; 0 nothing, 1 a record, 2 a timer
  (global $cur_i (mut i32) (i32.const 0))
  (global $cur_n (mut i32) (i32.const 0))
  (global $cur_key (mut i32) (i32.const 0))
  (global $cur_klen (mut i32) (i32.const 0))
  (global $cur_ts (mut i64) (i64.const 0))
  (global $cur_port (mut i32) (i32.const 0))


  ;; Status names, 32 bytes apart: -1 at 0x2000, -2 at 0x2020, ...
  (data (i32.const 0x2000) "NOT_FOUND\00")
  (data (i32.const 0x2020) "BAD_POINTER\00")
  (data (i32.const 0x2040) "BAD_HANDLE\00")
  (data (i32.const 0x2060) "BAD_OUTPUT\00")
  (data (i32.const 0x2080) "BAD_ARGUMENT\00")
  (data (i32.const 0x20a0) "KEY_GROUP\00")
  (data (i32.const 0x20c0) "NO_KEYED_STATE\00")
  (data (i32.const 0x20e0) "STATE_ERROR\00")
  (data (i32.const 0x2100) "LIMIT\00")
  (data (i32.const 0x2120) "UNKNOWN_OPERATOR\00")
  (data (i32.const 0x2140) "GUEST_ERROR\00")
  (data (i32.const 0x2160) "NOT_IN_CALLBACK\00")
  ;; Pieces of messages.
  (data (i32.const 0x2200) "wstream_open\00")
  (data (i32.const 0x2240) "wstream_process\00")
  (data (i32.const 0x2280) "wstream_on_timer\00")
  (data (i32.const 0x22c0) "wstream_close\00")
  (data (i32.const 0x2300) "wstream_pre_barrier\00")
  (data (i32.const 0x2340) "wstream_checkpoint_complete\00")
  (data (i32.const 0x2380) "wstream_checkpoint_aborted\00")
  (data (i32.const 0x23c0) ": region [\00")
  (data (i32.const 0x2400) ") lies outside the \00")
  (data (i32.const 0x2440) "-byte argument arena returned by wstream_alloc\00")
  (data (i32.const 0x2480) ": operator slot \00")
  (data (i32.const 0x24c0) " is not open\00")
  (data (i32.const 0x2500) " is outside [0, 64)\00")
  (data (i32.const 0x2540) " is already open (operator \00")
  (data (i32.const 0x2580) "wstream_open: the module has no operator \00")
  (data (i32.const 0x25c0) "operator \"\00")
  (data (i32.const 0x2600) "\": \00")
  (data (i32.const 0x2640) ": \00")
  (data (i32.const 0x2680) "record \00")
  (data (i32.const 0x26c0) " of \00")
  (data (i32.const 0x2700) " (key \00")
  (data (i32.const 0x2740) "): \00")
  (data (i32.const 0x2780) "event time timer at \00")
  (data (i32.const 0x27c0) "processing time timer at \00")
  (data (i32.const 0x2800) "checkpoint \00")
  (data (i32.const 0x2840) " batch from the host: malformed batch: \00")
  (data (i32.const 0x2880) " bytes is shorter than the 4-byte header\00")
  (data (i32.const 0x28c0) " at offset \00")
  (data (i32.const 0x2900) ": header truncated\00")
  (data (i32.const 0x2940) ": key and value overrun the batch\00")
  (data (i32.const 0x2980) " trailing bytes after \00")
  (data (i32.const 0x29c0) " records\00")
  (data (i32.const 0x2a00) "emitting \00")
  (data (i32.const 0x2a40) "status \00")
  (data (i32.const 0x2a80) " (\00")
  (data (i32.const 0x2ac0) ")\00")
  (data (i32.const 0x2b00) "out of memory for the output buffer\00")
  (data (i32.const 0x2b40) "input\00")
  (data (i32.const 0x2b80) "timer\00")
  (data (i32.const 0x2bc0) "open\00")
  (data (i32.const 0x2c00) "process\00")
  (data (i32.const 0x2c40) "on_timer\00")
  (data (i32.const 0x2c80) "close\00")
  (data (i32.const 0x2cc0) "...\00")
  (data (i32.const 0x2d00) "0x\00")
  ;; This module's strings.
  (data (i32.const 0x3000) "identity\00")
  (data (i32.const 0x3040) "dedup\00")
  (data (i32.const 0x3080) "; it has [\"dedup\" \"identity\"]\00")
  (data (i32.const 0x30c0) "seen\00")
  (data (i32.const 0x3100) "registering value state \"seen\"\00")
  (data (i32.const 0x3140) "get state \"seen\"\00")
  (data (i32.const 0x3180) "put state \"seen\"\00")
  (data (i32.const 0x31c0) "delete state \"seen\"\00")
  (data (i32.const 0x3200) "register event time timer\00")
  (data (i32.const 0x3240) "opened\00")

  ;; ================================================================ runtime

  ;; alloc returns size bytes at an 8-byte aligned address from the bump
  ;; heap, growing memory as needed, or 0 when memory cannot grow.
  (func $alloc (param $size i32) (result i32)
    (local $p i32) (local $end i64) (local $have i64)
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.const 7)) (i32.const -8)))
    (local.set $end (i64.add (i64.extend_i32_u (local.get $p)) (i64.extend_i32_u (local.get $size))))
    (local.set $have (i64.shl (i64.extend_i32_u (memory.size)) (i64.const 16)))
    (if (i64.gt_u (local.get $end) (local.get $have))
      (then
        (if (i32.lt_s
              (memory.grow (i32.wrap_i64 (i64.shr_u
                (i64.add (i64.sub (local.get $end) (local.get $have)) (i64.const 0xffff))
                (i64.const 16))))
              (i32.const 0))
          (then (return (i32.const 0))))))
    (global.set $heap (i32.wrap_i64 (local.get $end)))
    (local.get $p))

  ;; wstream_alloc returns the argument arena, replacing it by a larger one
  ;; (at least twice the size, at least 64 KiB) when size does not fit. The
  ;; host never uses an old arena again, so when nothing was allocated after
  ;; it the new one takes its place instead of leaking it.
  (func (export "wstream_alloc") (param $size i32) (result i32)
    (local $cap i32) (local $p i32) (local $top i32)
    (if (i32.lt_s (local.get $size) (i32.const 0)) (then (return (i32.const 0))))
    (if (i32.and (i32.ne (global.get $arena) (i32.const 0))
                 (i32.le_u (local.get $size) (global.get $arena_cap)))
      (then (return (global.get $arena))))
    (local.set $cap (i32.shl (global.get $arena_cap) (i32.const 1)))
    (if (i32.gt_u (global.get $arena_cap) (i32.const 0x40000000)) (then (local.set $cap (local.get $size))))
    (if (i32.lt_u (local.get $cap) (local.get $size)) (then (local.set $cap (local.get $size))))
    (if (i32.lt_u (local.get $cap) (i32.const 0x10000)) (then (local.set $cap (i32.const 0x10000))))
    (local.set $top (global.get $heap))
    (if (i32.and (i32.ne (global.get $arena) (i32.const 0))
                 (i32.eq (i32.add (global.get $arena) (global.get $arena_cap)) (global.get $heap)))
      (then (global.set $heap (global.get $arena))))
    (local.set $p (call $alloc (local.get $cap)))
    (if (i32.and (i32.eqz (local.get $p)) (i32.gt_u (local.get $cap) (local.get $size)))
      (then
        (local.set $cap (local.get $size))
        (local.set $p (call $alloc (local.get $cap)))))
    (if (i32.eqz (local.get $p))
      (then (global.set $heap (local.get $top)) (return (i32.const 0))))
    (global.set $arena (local.get $p))
    (global.set $arena_cap (local.get $cap))
    (local.get $p))

  ;; region reports whether [ptr, ptr+len) lies inside the arena: the ABI
  ;; promises it for every pointer the host passes; len 0 is always valid.
  (func $region (param $ptr i32) (param $len i32) (result i32)
    (if (i32.eqz (local.get $len)) (then (return (i32.const 1))))
    (if (i32.or (i32.or (i32.lt_s (local.get $len) (i32.const 0)) (i32.eqz (global.get $arena)))
                (i32.lt_u (local.get $ptr) (global.get $arena)))
      (then (return (i32.const 0))))
    (i64.le_u
      (i64.add (i64.extend_i32_u (i32.sub (local.get $ptr) (global.get $arena)))
               (i64.extend_i32_u (local.get $len)))
      (i64.extend_i32_u (global.get $arena_cap))))

  ;; ---- messages: built in the 1 KiB buffer at 0x400, cut off when full

  (func $msg_byte (param $c i32)
    (if (i32.lt_u (global.get $msg_len) (i32.const 0x400))
      (then
        (i32.store8 (i32.add (i32.const 0x400) (global.get $msg_len)) (local.get $c))
        (global.set $msg_len (i32.add (global.get $msg_len) (i32.const 1))))))

  (func $msg_bytes (param $p i32) (param $n i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (call $msg_byte (i32.load8_u (i32.add (local.get $p) (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next))))

  ;; msg_cstr appends the NUL-terminated string at p.
  (func $msg_cstr (param $p i32)
    (local $c i32)
    (block $done
      (loop $next
        (local.set $c (i32.load8_u (local.get $p)))
        (br_if $done (i32.eqz (local.get $c)))
        (call $msg_byte (local.get $c))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $next))))

  (func $msg_i64 (param $v i64)
    (call $msg_bytes (i32.const 0x800) (call $fmt_i64 (local.get $v) (i32.const 0x800))))

  (func $hex_digit (param $d i32) (result i32)
    (select (i32.add (local.get $d) (i32.const 48)) (i32.add (local.get $d) (i32.const 87))
            (i32.lt_u (local.get $d) (i32.const 10))))

  ;; msg_hex appends v as 0x followed by lower-case hex digits.
  (func $msg_hex (param $v i32)
    (local $shift i32)
    (call $msg_cstr (i32.const 0x2d00))
    (local.set $shift (i32.const 28))
    (block $found
      (loop $skip
        (br_if $found (i32.eqz (local.get $shift)))
        (br_if $found (i32.and (i32.shr_u (local.get $v) (local.get $shift)) (i32.const 15)))
        (local.set $shift (i32.sub (local.get $shift) (i32.const 4)))
        (br $skip)))
    (loop $digit
      (call $msg_byte (call $hex_digit (i32.and (i32.shr_u (local.get $v) (local.get $shift)) (i32.const 15))))
      (local.set $shift (i32.sub (local.get $shift) (i32.const 4)))
      (br_if $digit (i32.ge_s (local.get $shift) (i32.const 0)))))

  ;; msg_quote appends the first 64 bytes of [p, p+n) in double quotes,
  ;; escaping quotes, backslashes and control bytes, with ... when cut.
  (func $msg_quote (param $p i32) (param $n i32)
    (local $i i32) (local $m i32) (local $c i32)
    (local.set $m (select (local.get $n) (i32.const 64) (i32.lt_u (local.get $n) (i32.const 64))))
    (call $msg_byte (i32.const 34))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $m)))
        (local.set $c (i32.load8_u (i32.add (local.get $p) (local.get $i))))
        (if (i32.or (i32.eq (local.get $c) (i32.const 34)) (i32.eq (local.get $c) (i32.const 92)))
          (then (call $msg_byte (i32.const 92)) (call $msg_byte (local.get $c)))
          (else
            (if (i32.eq (local.get $c) (i32.const 10))
              (then (call $msg_byte (i32.const 92)) (call $msg_byte (i32.const 110)))
              (else
                (if (i32.or (i32.lt_u (local.get $c) (i32.const 32)) (i32.eq (local.get $c) (i32.const 127)))
                  (then
                    (call $msg_byte (i32.const 92)) (call $msg_byte (i32.const 120))
                    (call $msg_byte (call $hex_digit (i32.shr_u (local.get $c) (i32.const 4))))
                    (call $msg_byte (call $hex_digit (i32.and (local.get $c) (i32.const 15)))))
                  (else (call $msg_byte (local.get $c))))))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (call $msg_byte (i32.const 34))
    (if (i32.gt_u (local.get $n) (i32.const 64)) (then (call $msg_cstr (i32.const 0x2cc0)))))

  ;; msg_status appends "status N (NAME)" for a host status code.
  (func $msg_status (param $st i32)
    (call $msg_cstr (i32.const 0x2a40))
    (call $msg_i64 (i64.extend_i32_s (local.get $st)))
    (if (i32.and (i32.lt_s (local.get $st) (i32.const 0)) (i32.ge_s (local.get $st) (i32.const -12)))
      (then
        (call $msg_cstr (i32.const 0x2a80))
        (call $msg_cstr (i32.add (i32.const 0x2000)
          (i32.shl (i32.sub (i32.const -1) (local.get $st)) (i32.const 5))))
        (call $msg_cstr (i32.const 0x2ac0)))))

  ;; fail_msg hands the message built so far to the host's fail.
  (func $fail_msg
    (call $fail (i32.const 0x400) (global.get $msg_len)))

  ;; ---- the callback in progress

  ;; begin starts a callback of operator name (a C string) in phase.
  (func $begin (param $name i32) (param $phase i32)
    (global.set $cur_name (local.get $name))
    (global.set $cur_phase (local.get $phase))
    (global.set $cur_what (i32.const 0))
    (global.set $out_len (i32.const 0))
    (global.set $out_n (i32.const 0)))

  ;; at_record notes that record i of n, at p, is being handled (what 1), or
  ;; a timer (what 2).
  (func $at_record (param $what i32) (param $i i32) (param $n i32) (param $p i32)
    (global.set $cur_what (local.get $what))
    (global.set $cur_i (local.get $i))
    (global.set $cur_n (local.get $n))
    (global.set $cur_port (i32.load (local.get $p)))
    (global.set $cur_ts (i64.load offset=4 (local.get $p)))
    (global.set $cur_klen (i32.load offset=12 (local.get $p)))
    (global.set $cur_key (i32.add (local.get $p) (i32.const 20))))

  ;; err_begin starts a failure message: operator "NAME": PHASE: and the
  ;; record or timer being handled.
  (func $err_begin
    (global.set $msg_len (i32.const 0))
    (call $msg_cstr (i32.const 0x25c0))
    (call $msg_cstr (global.get $cur_name))
    (call $msg_cstr (i32.const 0x2600))
    (call $msg_cstr (global.get $cur_phase))
    (call $msg_cstr (i32.const 0x2640))
    (if (i32.eq (global.get $cur_what) (i32.const 1))
      (then
        (call $msg_cstr (i32.const 0x2680))
        (call $msg_i64 (i64.extend_i32_u (global.get $cur_i)))
        (call $msg_cstr (i32.const 0x26c0))
        (call $msg_i64 (i64.extend_i32_u (global.get $cur_n)))
        (call $msg_cstr (i32.const 0x2700))
        (call $msg_quote (global.get $cur_key) (global.get $cur_klen))
        (call $msg_cstr (i32.const 0x2740))))
    (if (i32.eq (global.get $cur_what) (i32.const 2))
      (then
        (call $msg_cstr (select (i32.const 0x2780) (i32.const 0x27c0) (i32.eqz (global.get $cur_port))))
        (call $msg_i64 (global.get $cur_ts))
        (call $msg_cstr (i32.const 0x2700))
        (call $msg_quote (global.get $cur_key) (global.get $cur_klen))
        (call $msg_cstr (i32.const 0x2740)))))

  ;; err_end fails the call with the message, drops the callback's buffered
  ;; output and returns GUEST_ERROR for the export to return.
  (func $err_end (result i32)
    (global.set $out_len (i32.const 0))
    (global.set $out_n (i32.const 0))
    (call $fail_msg)
    (i32.const -11))

  ;; err_host fails the call for a host function that returned status st:
  ;; "WHAT: status N (NAME)".
  (func $err_host (param $what i32) (param $st i32) (result i32)
    (call $err_begin)
    (call $msg_cstr (local.get $what))
    (call $msg_cstr (i32.const 0x2640))
    (call $msg_status (local.get $st))
    (call $err_end))

  ;; bad_region reports a pointer outside the arena and returns BAD_POINTER.
  (func $bad_region (param $export i32) (param $ptr i32) (param $len i32) (result i32)
    (global.set $msg_len (i32.const 0))
    (call $msg_cstr (local.get $export))
    (call $msg_cstr (i32.const 0x23c0))
    (call $msg_hex (local.get $ptr))
    (call $msg_byte (i32.const 44)) (call $msg_byte (i32.const 32)) (call $msg_byte (i32.const 43))
    (call $msg_i64 (i64.extend_i32_s (local.get $len)))
    (call $msg_cstr (i32.const 0x2400))
    (call $msg_i64 (i64.extend_i32_u (global.get $arena_cap)))
    (call $msg_cstr (i32.const 0x2440))
    (call $fail_msg)
    (i32.const -2))

  ;; no_slot reports an operator slot that is not open: BAD_HANDLE.
  (func $no_slot (param $export i32) (param $op i32) (result i32)
    (global.set $msg_len (i32.const 0))
    (call $msg_cstr (local.get $export))
    (call $msg_cstr (i32.const 0x2480))
    (call $msg_i64 (i64.extend_i32_s (local.get $op)))
    (call $msg_cstr (i32.const 0x24c0))
    (call $fail_msg)
    (i32.const -3))

  ;; check_batch walks the batch [ptr, ptr+len) and checks that its records
  ;; fill it exactly, so that the operators can walk it without checks. It
  ;; returns 0, or BAD_ARGUMENT after failing the call; kind names the batch
  ;; ("input" or "timer").
  ;;   batch  := count:u32 record{count}
  ;;   record := port:u32 ts:i64 klen:u32 vlen:u32 key[klen] value[vlen]
  (func $check_batch (param $ptr i32) (param $len i32) (param $kind i32) (result i32)
    (local $p i32) (local $end i32) (local $i i32) (local $count i32) (local $left i32)
    (global.set $msg_len (i32.const 0))
    (call $msg_cstr (i32.const 0x25c0))
    (call $msg_cstr (global.get $cur_name))
    (call $msg_cstr (i32.const 0x2600))
    (call $msg_cstr (local.get $kind))
    (call $msg_cstr (i32.const 0x2840))
    (if (i32.lt_u (local.get $len) (i32.const 4))
      (then
        (call $msg_i64 (i64.extend_i32_u (local.get $len)))
        (call $msg_cstr (i32.const 0x2880))
        (call $fail_msg)
        (return (i32.const -5))))
    (local.set $count (i32.load (local.get $ptr)))
    (local.set $p (i32.add (local.get $ptr) (i32.const 4)))
    (local.set $end (i32.add (local.get $ptr) (local.get $len)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
        (local.set $left (i32.sub (local.get $end) (local.get $p)))
        (if (i32.lt_u (local.get $left) (i32.const 20))
          (then
            (call $msg_cstr (i32.const 0x2680))
            (call $msg_i64 (i64.extend_i32_u (local.get $i)))
            (call $msg_cstr (i32.const 0x28c0))
            (call $msg_i64 (i64.extend_i32_u (i32.sub (local.get $p) (local.get $ptr))))
            (call $msg_cstr (i32.const 0x2900))
            (call $fail_msg)
            (return (i32.const -5))))
        (if (i64.gt_u
              (i64.add (i64.load32_u offset=12 (local.get $p)) (i64.load32_u offset=16 (local.get $p)))
              (i64.extend_i32_u (i32.sub (local.get $left) (i32.const 20))))
          (then
            (call $msg_cstr (i32.const 0x2680))
            (call $msg_i64 (i64.extend_i32_u (local.get $i)))
            (call $msg_cstr (i32.const 0x28c0))
            (call $msg_i64 (i64.extend_i32_u (i32.sub (local.get $p) (local.get $ptr))))
            (call $msg_cstr (i32.const 0x2940))
            (call $fail_msg)
            (return (i32.const -5))))
        (local.set $p (i32.add (i32.add (local.get $p) (i32.const 20))
                               (i32.add (i32.load offset=12 (local.get $p)) (i32.load offset=16 (local.get $p)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (if (i32.ne (local.get $p) (local.get $end))
      (then
        (call $msg_i64 (i64.extend_i32_u (i32.sub (local.get $end) (local.get $p))))
        (call $msg_cstr (i32.const 0x2980))
        (call $msg_i64 (i64.extend_i32_u (local.get $count)))
        (call $msg_cstr (i32.const 0x29c0))
        (call $fail_msg)
        (return (i32.const -5))))
    (global.set $msg_len (i32.const 0))
    (i32.const 0))

  ;; ---- output: records are appended to one batch, handed to the host with
  ;; one emit_batch per callback (earlier when the batch passes 64 KiB)

  ;; out_reserve makes room for need more bytes in the output buffer; 0 when
  ;; memory cannot grow. The buffer grows in place when it is the last block
  ;; of the heap, else moves.
  (func $out_reserve (param $need i32) (result i32)
    (local $want i64) (local $cap i32) (local $p i32)
    (local.set $want (i64.add (i64.extend_i32_u (global.get $out_len)) (i64.extend_i32_u (local.get $need))))
    (if (i64.le_u (local.get $want) (i64.extend_i32_u (global.get $out_cap))) (then (return (i32.const 1))))
    (if (i64.gt_u (local.get $want) (i64.const 0x7fffffff)) (then (return (i32.const 0))))
    (local.set $cap (i32.shl (global.get $out_cap) (i32.const 1)))
    (if (i32.lt_u (local.get $cap) (i32.wrap_i64 (local.get $want))) (then (local.set $cap (i32.wrap_i64 (local.get $want)))))
    (if (i32.lt_u (local.get $cap) (i32.const 4096)) (then (local.set $cap (i32.const 4096))))
    (if (i32.and (i32.ne (global.get $out) (i32.const 0))
                 (i32.eq (i32.add (global.get $out) (global.get $out_cap)) (global.get $heap)))
      (then
        (global.set $heap (global.get $out))
        (if (i32.eqz (call $alloc (local.get $cap)))
          (then
            (global.set $heap (i32.add (global.get $out) (global.get $out_cap)))
            (return (i32.const 0))))
        (global.set $out_cap (local.get $cap))
        (return (i32.const 1))))
    (local.set $p (call $alloc (local.get $cap)))
    (if (i32.eqz (local.get $p)) (then (return (i32.const 0))))
    (memory.copy (local.get $p) (global.get $out) (global.get $out_len))
    (global.set $out (local.get $p))
    (global.set $out_cap (local.get $cap))
    (i32.const 1))

  ;; flush hands the buffered records to the host; 0, or GUEST_ERROR after
  ;; failing the call when the host refuses them.
  (func $flush (result i32)
    (local $n i32) (local $st i32)
    (local.set $n (global.get $out_n))
    (if (i32.eqz (local.get $n)) (then (global.set $out_len (i32.const 0)) (return (i32.const 0))))
    (i32.store (global.get $out) (local.get $n))
    (local.set $st (call $emit_batch (global.get $out) (global.get $out_len)))
    (global.set $out_len (i32.const 0))
    (global.set $out_n (i32.const 0))
    (if (i32.lt_s (local.get $st) (i32.const 0))
      (then
        (call $err_begin)
        (call $msg_cstr (i32.const 0x2a00))
        (call $msg_i64 (i64.extend_i32_u (local.get $n)))
        (call $msg_cstr (i32.const 0x29c0))
        (call $msg_cstr (i32.const 0x2640))
        (call $msg_status (local.get $st))
        (return (call $err_end))))
    (i32.const 0))

  ;; emit appends one record to the output buffer; 0 or a failure status.
  (func $emit (param $port i32) (param $ts i64) (param $kp i32) (param $kl i32) (param $vp i32) (param $vl i32) (result i32)
    (local $need i32) (local $p i32)
    (local.set $need (i32.add (i32.const 20) (i32.add (local.get $kl) (local.get $vl))))
    (if (i32.eqz (global.get $out_len)) (then (global.set $out_len (i32.const 4))))
    (if (i32.eqz (call $out_reserve (local.get $need)))
      (then
        (call $err_begin)
        (call $msg_cstr (i32.const 0x2b00))
        (return (call $err_end))))
    (local.set $p (i32.add (global.get $out) (global.get $out_len)))
    (i32.store (local.get $p) (local.get $port))
    (i64.store offset=4 (local.get $p) (local.get $ts))
    (i32.store offset=12 (local.get $p) (local.get $kl))
    (i32.store offset=16 (local.get $p) (local.get $vl))
    (memory.copy (i32.add (local.get $p) (i32.const 20)) (local.get $kp) (local.get $kl))
    (memory.copy (i32.add (i32.add (local.get $p) (i32.const 20)) (local.get $kl)) (local.get $vp) (local.get $vl))
    (global.set $out_len (i32.add (global.get $out_len) (local.get $need)))
    (global.set $out_n (i32.add (global.get $out_n) (i32.const 1)))
    (if (i32.ge_u (global.get $out_len) (i32.const 0x10000)) (then (return (call $flush))))
    (i32.const 0))

  ;; finish ends a callback that went well: the buffered output goes out.
  (func $finish (result i32)
    (global.set $cur_what (i32.const 0))
    (call $flush))

  ;; ---- numbers and strings

  ;; fmt_i64 writes v in decimal at dst and returns its length (at most 20).
  ;; Digits are produced backwards at 0x840..0x860; the magnitude is taken
  ;; as unsigned so that i64::MIN works.
  (func $fmt_i64 (param $v i64) (param $dst i32) (result i32)
    (local $u i64) (local $p i32) (local $n i32)
    (local.set $u (select (i64.sub (i64.const 0) (local.get $v)) (local.get $v)
                          (i64.lt_s (local.get $v) (i64.const 0))))
    (local.set $p (i32.const 0x860))
    (loop $digit
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.wrap_i64 (i64.rem_u (local.get $u) (i64.const 10)))))
      (local.set $u (i64.div_u (local.get $u) (i64.const 10)))
      (br_if $digit (i64.ne (local.get $u) (i64.const 0))))
    (if (i64.lt_s (local.get $v) (i64.const 0))
      (then
        (local.set $p (i32.sub (local.get $p) (i32.const 1)))
        (i32.store8 (local.get $p) (i32.const 45))))
    (local.set $n (i32.sub (i32.const 0x860) (local.get $p)))
    (memory.copy (local.get $dst) (local.get $p) (local.get $n))
    (local.get $n))

  ;; eq_cstr reports whether [p, p+n) equals the C string s.
  (func $eq_cstr (param $p i32) (param $n i32) (param $s i32) (result i32)
    (local $i i32)
    (block $differ
      (loop $next
        (if (i32.eq (local.get $i) (local.get $n))
          (then (return (i32.eqz (i32.load8_u (i32.add (local.get $s) (local.get $i)))))))
        (br_if $differ (i32.ne (i32.load8_u (i32.add (local.get $p) (local.get $i)))
                               (i32.load8_u (i32.add (local.get $s) (local.get $i)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0))

  (func $strlen (param $s i32) (result i32)
    (local $p i32)
    (local.set $p (local.get $s))
    (block $done
      (loop $next
        (br_if $done (i32.eqz (i32.load8_u (local.get $p))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $next)))
    (i32.sub (local.get $p) (local.get $s)))


  ;; ---- slots: 64 entries of 32 bytes at 0x1000, one per operator slot the
  ;; host opened (a chain shares the instance; slots count 0, 1, ...)
  ;;   +0 kind (0 closed, 1 identity, 2 dedup)  +4 state handle of "seen"

  (func $slot (param $op i32) (result i32)
    (i32.add (i32.const 0x1000) (i32.shl (local.get $op) (i32.const 5))))

  ;; kind_of returns the kind of the operator open in slot op, 0 for none.
  (func $kind_of (param $op i32) (result i32)
    (if (i32.ge_u (local.get $op) (i32.const 64)) (then (return (i32.const 0))))
    (i32.load (call $slot (local.get $op))))

  (func $name_of (param $kind i32) (result i32)
    (select (i32.const 0x3000) (i32.const 0x3040) (i32.eq (local.get $kind) (i32.const 1))))

  ;; ================================================================ exports

  (func (export "wstream_abi_version") (result i32) (i32.const 1))

  ;; A module with a job plan also exports wstream_plan: () -> i64, the
  ;; plan's (ptr << 32) | len (see examples/wasm/wat/wordcount.wat).

  (func (export "wstream_open") (param $op i32) (param $np i32) (param $nl i32) (param $cp i32) (param $cl i32) (result i32)
    (local $kind i32) (local $h i32)
    (if (i32.eqz (call $region (local.get $np) (local.get $nl)))
      (then (return (call $bad_region (i32.const 0x2200) (local.get $np) (local.get $nl)))))
    (if (i32.eqz (call $region (local.get $cp) (local.get $cl)))
      (then (return (call $bad_region (i32.const 0x2200) (local.get $cp) (local.get $cl)))))
    (if (i32.ge_u (local.get $op) (i32.const 64))
      (then
        (global.set $msg_len (i32.const 0))
        (call $msg_cstr (i32.const 0x2200))
        (call $msg_cstr (i32.const 0x2480))
        (call $msg_i64 (i64.extend_i32_s (local.get $op)))
        (call $msg_cstr (i32.const 0x2500))
        (call $fail_msg)
        (return (i32.const -3))))
    (local.set $kind (call $kind_of (local.get $op)))
    (if (local.get $kind)
      (then
        (global.set $msg_len (i32.const 0))
        (call $msg_cstr (i32.const 0x2200))
        (call $msg_cstr (i32.const 0x2480))
        (call $msg_i64 (i64.extend_i32_s (local.get $op)))
        (call $msg_cstr (i32.const 0x2540))
        (call $msg_quote (call $name_of (local.get $kind)) (call $strlen (call $name_of (local.get $kind))))
        (call $msg_cstr (i32.const 0x2ac0))
        (call $fail_msg)
        (return (i32.const -3))))
    (if (call $eq_cstr (local.get $np) (local.get $nl) (i32.const 0x3000)) (then (local.set $kind (i32.const 1))))
    (if (call $eq_cstr (local.get $np) (local.get $nl) (i32.const 0x3040)) (then (local.set $kind (i32.const 2))))
    (if (i32.eqz (local.get $kind))
      (then
        (global.set $msg_len (i32.const 0))
        (call $msg_cstr (i32.const 0x2580))
        (call $msg_quote (local.get $np) (local.get $nl))
        (call $msg_cstr (i32.const 0x3080))
        (call $fail_msg)
        (return (i32.const -10))))
    (call $begin (call $name_of (local.get $kind)) (i32.const 0x2bc0))
    ;; The config is [cp, cp+cl), JSON from the plan (empty when none); it
    ;; lives in the arena, so copy what is needed later. Neither operator
    ;; has one.
    (if (i32.eq (local.get $kind) (i32.const 2))
      (then
        ;; state_register works only here, in wstream_open: kind 1 = value.
        (local.set $h (call $state_register (i32.const 0x30c0) (i32.const 4) (i32.const 1)))
        (if (i32.lt_s (local.get $h) (i32.const 0))
          (then (return (call $err_host (i32.const 0x3100) (local.get $h)))))
        (i32.store offset=4 (call $slot (local.get $op)) (local.get $h))))
    (call $log (i32.const 0) (i32.const 0x3240) (i32.const 6))
    (i32.store (call $slot (local.get $op)) (local.get $kind))
    (i32.const 0))

  (func (export "wstream_process") (param $op i32) (param $ptr i32) (param $len i32) (result i32)
    (local $kind i32) (local $st i32)
    (local.set $kind (call $kind_of (local.get $op)))
    (if (i32.eqz (local.get $kind)) (then (return (call $no_slot (i32.const 0x2240) (local.get $op)))))
    (if (i32.eqz (call $region (local.get $ptr) (local.get $len)))
      (then (return (call $bad_region (i32.const 0x2240) (local.get $ptr) (local.get $len)))))
    (call $begin (call $name_of (local.get $kind)) (i32.const 0x2c00))
    (if (local.tee $st (call $check_batch (local.get $ptr) (local.get $len) (i32.const 0x2b40))) (then (return (local.get $st))))
    (if (i32.eq (local.get $kind) (i32.const 1))
      (then (local.set $st (call $identity_process (local.get $ptr))))
      (else (local.set $st (call $dedup_process (local.get $op) (local.get $ptr)))))
    (if (local.get $st) (then (return (local.get $st))))
    (call $finish))

  (func (export "wstream_on_timer") (param $op i32) (param $ptr i32) (param $len i32) (result i32)
    (local $kind i32) (local $st i32)
    (local.set $kind (call $kind_of (local.get $op)))
    (if (i32.eqz (local.get $kind)) (then (return (call $no_slot (i32.const 0x2280) (local.get $op)))))
    (if (i32.eqz (call $region (local.get $ptr) (local.get $len)))
      (then (return (call $bad_region (i32.const 0x2280) (local.get $ptr) (local.get $len)))))
    (call $begin (call $name_of (local.get $kind)) (i32.const 0x2c40))
    (if (local.tee $st (call $check_batch (local.get $ptr) (local.get $len) (i32.const 0x2b80))) (then (return (local.get $st))))
    ;; identity registers no timers: an empty batch is all it can get.
    (if (i32.eq (local.get $kind) (i32.const 2))
      (then (if (local.tee $st (call $dedup_on_timer (local.get $op) (local.get $ptr))) (then (return (local.get $st))))))
    (call $finish))

  (func (export "wstream_close") (param $op i32) (result i32)
    (local $kind i32)
    (local.set $kind (call $kind_of (local.get $op)))
    (if (i32.eqz (local.get $kind)) (then (return (call $no_slot (i32.const 0x22c0) (local.get $op)))))
    ;; The slot is closed whatever happens: the host never calls it again.
    (i32.store (call $slot (local.get $op)) (i32.const 0))
    (call $begin (call $name_of (local.get $kind)) (i32.const 0x2c80))
    ;; Close may still emit (and use state): emit here, then finish.
    (call $finish))

  ;; The checkpoint hooks (optional exports): pre_barrier may emit, to flush
  ;; output buffered across calls; complete and aborted may not. Neither
  ;; operator buffers anything.
  (func (export "wstream_pre_barrier") (param $op i32) (param $id i64) (result i32)
    (if (i32.eqz (call $kind_of (local.get $op))) (then (return (call $no_slot (i32.const 0x2300) (local.get $op)))))
    (i32.const 0))
  (func (export "wstream_checkpoint_complete") (param $op i32) (param $id i64) (result i32)
    (if (i32.eqz (call $kind_of (local.get $op))) (then (return (call $no_slot (i32.const 0x2340) (local.get $op)))))
    (i32.const 0))
  (func (export "wstream_checkpoint_aborted") (param $op i32) (param $id i64) (result i32)
    (if (i32.eqz (call $kind_of (local.get $op))) (then (return (call $no_slot (i32.const 0x2380) (local.get $op)))))
    (i32.const 0))

  ;; ============================================================== operators

  ;; identity_process emits every record of the (checked) batch at b as it
  ;; came. The walk is the one every operator uses:
  ;;   p = b + 4; repeat count times:
  ;;     port = [p] ts = [p+4] klen = [p+12] vlen = [p+16]
  ;;     key = p+20, value = key+klen, next p = value+vlen
  (func $identity_process (param $b i32) (result i32)
    (local $n i32) (local $i i32) (local $p i32) (local $key i32) (local $kl i32) (local $vl i32) (local $st i32)
    (local.set $n (i32.load (local.get $b)))
    (local.set $p (i32.add (local.get $b) (i32.const 4)))
    (block $done
      (loop $record
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (call $at_record (i32.const 1) (local.get $i) (local.get $n) (local.get $p))
        (local.set $kl (i32.load offset=12 (local.get $p)))
        (local.set $vl (i32.load offset=16 (local.get $p)))
        (local.set $key (i32.add (local.get $p) (i32.const 20)))
        (if (local.tee $st (call $emit (i32.const 0) (i64.load offset=4 (local.get $p))
                                       (local.get $key) (local.get $kl) (i32.add (local.get $key) (local.get $kl)) (local.get $vl)))
          (then (return (local.get $st))))
        (local.set $p (i32.add (i32.add (local.get $key) (local.get $kl)) (local.get $vl)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $record)))
    (i32.const 0))

  ;; dedup_process emits a record when its key has no "seen" entry, then
  ;; stores its time and sets a timer 1000 ms later (saturating at i64::MAX)
  ;; that forgets the key. Every state and timer call names its key: there
  ;; is no implicit current key.
  (func $dedup_process (param $op i32) (param $b i32) (result i32)
    (local $h i32) (local $n i32) (local $i i32) (local $p i32) (local $key i32) (local $kl i32) (local $vl i32)
    (local $ts i64) (local $at i64) (local $st i32)
    (local.set $h (i32.load offset=4 (call $slot (local.get $op))))
    (local.set $n (i32.load (local.get $b)))
    (local.set $p (i32.add (local.get $b) (i32.const 4)))
    (block $done
      (loop $record
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (call $at_record (i32.const 1) (local.get $i) (local.get $n) (local.get $p))
        (local.set $ts (i64.load offset=4 (local.get $p)))
        (local.set $kl (i32.load offset=12 (local.get $p)))
        (local.set $vl (i32.load offset=16 (local.get $p)))
        (local.set $key (i32.add (local.get $p) (i32.const 20)))
        ;; state_get copies the value into out (8 bytes at 0x820) and
        ;; returns its length, or NOT_FOUND (-1). A value longer than out_cap
        ;; is not copied: its length comes back, to retry with more room.
        (local.set $st (call $state_get (local.get $h) (local.get $key) (local.get $kl) (i32.const 0) (i32.const 0)
                                        (i32.const 0x820) (i32.const 8)))
        (if (i32.lt_s (local.get $st) (i32.const -1)) (then (return (call $err_host (i32.const 0x3140) (local.get $st)))))
        (if (i32.eq (local.get $st) (i32.const -1))
          (then
            (if (local.tee $st (call $emit (i32.const 0) (local.get $ts) (local.get $key) (local.get $kl)
                                           (i32.add (local.get $key) (local.get $kl)) (local.get $vl)))
              (then (return (local.get $st))))
            (i64.store (i32.const 0x820) (local.get $ts))      ;; wasm stores little-endian
            (local.set $st (call $state_put (local.get $h) (local.get $key) (local.get $kl) (i32.const 0) (i32.const 0)
                                            (i32.const 0x820) (i32.const 8)))
            (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_host (i32.const 0x3180) (local.get $st)))))
            (local.set $at (i64.add (local.get $ts) (i64.const 1000)))
            (if (i64.lt_s (local.get $at) (local.get $ts)) (then (local.set $at (i64.const 0x7fffffffffffffff))))
            ;; Domain 0 = event time: fires when the watermark reaches at.
            (local.set $st (call $timer_register (i32.const 0) (local.get $key) (local.get $kl) (i32.const 0) (i32.const 0)
                                                 (local.get $at)))
            (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_host (i32.const 0x3200) (local.get $st)))))))
        (local.set $p (i32.add (i32.add (local.get $key) (local.get $kl)) (local.get $vl)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $record)))
    (i32.const 0))

  ;; dedup_on_timer forgets the key of each fired timer. A timer batch is a
  ;; batch: port = time domain, ts = the timer's time, key = its key, value
  ;; = its namespace.
  (func $dedup_on_timer (param $op i32) (param $b i32) (result i32)
    (local $h i32) (local $n i32) (local $i i32) (local $p i32) (local $key i32) (local $kl i32) (local $st i32)
    (local.set $h (i32.load offset=4 (call $slot (local.get $op))))
    (local.set $n (i32.load (local.get $b)))
    (local.set $p (i32.add (local.get $b) (i32.const 4)))
    (block $done
      (loop $timer
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (call $at_record (i32.const 2) (local.get $i) (local.get $n) (local.get $p))
        (local.set $kl (i32.load offset=12 (local.get $p)))
        (local.set $key (i32.add (local.get $p) (i32.const 20)))
        (local.set $st (call $state_delete (local.get $h) (local.get $key) (local.get $kl) (i32.const 0) (i32.const 0)))
        (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_host (i32.const 0x31c0) (local.get $st)))))
        (local.set $p (i32.add (i32.add (local.get $key) (local.get $kl)) (i32.load offset=16 (local.get $p))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $timer)))
    (i32.const 0))
)
