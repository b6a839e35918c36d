;; conformance is the WebAssembly text module of the conformance suite: the
;; operator "conform" of tests/conformance/SPEC.md, written by hand against
;; the raw ABI (abi/ABI.md) without any SDK. Each input record's value is a
;; command; each command exercises one part of the ABI and emits one reply.
;; It answers exactly like the Go module examples/wasm/go/conformance:
;; value states "a", "b", "n", "big" and map states "m", "p" are registered
;; in open, in that order (state can only be registered there); commands
;; are split on single spaces and must have their exact number of tokens.
;; Counters (inc, and the timers of tinc) read and write through the
;; batched state imports, state_get_many and state_write_batch, one entry
;; per call: a module without an SDK may use them so (abi/ABI.md, "Batched
;; state access").
;; Assemble it with
;;
;;     wat2wasm -o conformance.wasm examples/wasm/wat/conformance.wat
;;
;; The runtime part is the one of guest-sdk/wat/reference.wat; see
;; guest-sdk/wat/README.md for the memory layout.
(module
  ;; ---------------------------------------------------------------- imports
  (import "wstream" "emit_batch" (func $emit_batch (param i32 i32) (result i32)))
  (import "wstream" "output_index" (func $output_index (param i32 i32) (result i32)))
  (import "wstream" "state_register" (func $state_register (param i32 i32 i32) (result i32)))
  (import "wstream" "state_get" (func $state_get (param i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wstream" "state_put" (func $state_put (param i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wstream" "state_delete" (func $state_delete (param i32 i32 i32 i32 i32) (result i32)))
  (import "wstream" "state_iter" (func $state_iter (param i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wstream" "timer_register" (func $timer_register (param i32 i32 i32 i32 i32 i64) (result i32)))
  (import "wstream" "timer_delete" (func $timer_delete (param i32 i32 i32 i32 i32 i64) (result i32)))
  (import "wstream" "current_watermark" (func $current_watermark (result i64)))
  (import "wstream" "processing_time" (func $processing_time (result i64)))
  (import "wstream" "log" (func $log (param i32 i32 i32)))
  (import "wstream" "fail" (func $fail (param i32 i32)))
  (import "wstream" "state_get_many" (func $state_get_many (param i32 i32 i32 i32 i32) (result i32)))
  (import "wstream" "state_write_batch" (func $state_write_batch (param i32 i32) (result i32)))

  ;; ----------------------------------------------------------------- memory
  ;; 0x0400 message buffer (1 KiB)      0x0800 scratch for digits and int64s
  ;; 0x0880 growable buffer descriptors 0x0900 the command's tokens
  ;; 0x1000 slot table (64 x 64 bytes)  0x2000 constant strings, NUL-ended
  ;; 0x5000 the lists of the batched state calls, and a tinc namespace
  ;; 0x10000 heap: the argument arena, the output buffer and the growable
  ;; buffers (bump allocated)
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
  (data (i32.const 0x3000) "conform\00")
  (data (i32.const 0x3040) "; it has [\"conform\"]\00")
  (data (i32.const 0x3080) "registering state \00")
  ;; The states, in registration order: four value states, two map states.
  (data (i32.const 0x3100) "a\00")
  (data (i32.const 0x3110) "b\00")
  (data (i32.const 0x3120) "n\00")
  (data (i32.const 0x3130) "big\00")
  (data (i32.const 0x3140) "m\00")
  (data (i32.const 0x3150) "p\00")
  ;; The commands, 16 bytes apart in dispatch order.
  (data (i32.const 0x3200) "put\00")
  (data (i32.const 0x3210) "get\00")
  (data (i32.const 0x3220) "del\00")
  (data (i32.const 0x3230) "inc\00")
  (data (i32.const 0x3240) "big\00")
  (data (i32.const 0x3250) "mput\00")
  (data (i32.const 0x3260) "mget\00")
  (data (i32.const 0x3270) "mdel\00")
  (data (i32.const 0x3280) "mfill\00")
  (data (i32.const 0x3290) "mscan\00")
  (data (i32.const 0x32a0) "emit\00")
  (data (i32.const 0x32b0) "batch\00")
  (data (i32.const 0x32c0) "timer\00")
  (data (i32.const 0x32d0) "untimer\00")
  (data (i32.const 0x32e0) "wm\00")
  (data (i32.const 0x32f0) "ptime\00")
  (data (i32.const 0x3300) "log\00")
  (data (i32.const 0x3310) "config\00")
  (data (i32.const 0x3320) "hooks\00")
  (data (i32.const 0x3330) "fail\00")
  (data (i32.const 0x3340) "tinc\00")
  ;; Replies and their pieces.
  (data (i32.const 0x3400) "ok\00")
  (data (i32.const 0x3440) "missing\00")
  (data (i32.const 0x3480) "=\00")
  (data (i32.const 0x34c0) "ok \00")
  (data (i32.const 0x3500) "mismatch\00")
  (data (i32.const 0x3540) "n=\00")
  (data (i32.const 0x3580) " first=\00")
  (data (i32.const 0x35c0) " last=\00")
  (data (i32.const 0x3600) "bad output \00")
  (data (i32.const 0x3640) "wm=\00")
  (data (i32.const 0x3680) "ptime ok\00")
  (data (i32.const 0x36c0) "ptime bad\00")
  (data (i32.const 0x3700) "config=\00")
  (data (i32.const 0x3740) "pre=\00")
  (data (i32.const 0x3780) " complete=\00")
  (data (i32.const 0x37c0) " aborted=\00")
  (data (i32.const 0x3800) "fired event \00")
  (data (i32.const 0x3840) "fired proc \00")
  (data (i32.const 0x3880) " ns=\00")
  (data (i32.const 0x38c0) "pre \00")
  (data (i32.const 0x3900) "close\00")
  (data (i32.const 0x3940) "event\00")
  (data (i32.const 0x3980) "proc\00")
  (data (i32.const 0x39c0) "out of memory\00")
  ;; Failure messages.
  (data (i32.const 0x3a00) "unknown command \00")
  (data (i32.const 0x3a40) "command \00")
  (data (i32.const 0x3a80) ": want \00")
  (data (i32.const 0x3ac0) " tokens, got \00")
  (data (i32.const 0x3b00) "unknown state \00")
  (data (i32.const 0x3b40) ": not a value state of this operator\00")
  (data (i32.const 0x3b80) ": not a map state of this operator\00")
  (data (i32.const 0x3bc0) " is not a non-negative decimal integer\00")
  (data (i32.const 0x3c00) "unknown time domain \00")
  (data (i32.const 0x3c40) "conform: fail \00")
  (data (i32.const 0x3c80) "mfill: \00")
  (data (i32.const 0x3cc0) " entries, at most 10000\00")
  (data (i32.const 0x3d00) "value state \00")
  (data (i32.const 0x3d40) " holds \00")
  (data (i32.const 0x3d80) " bytes, not an 8-byte int64\00")
  (data (i32.const 0x3dc0) "put state \00")
  (data (i32.const 0x3e00) "get state \00")
  (data (i32.const 0x3e40) "delete state \00")
  (data (i32.const 0x3e80) "iterate map state \00")
  (data (i32.const 0x3ec0) ": malformed page from the host\00")
  (data (i32.const 0x3f00) "output \00")
  (data (i32.const 0x3f40) "register timer at \00")
  (data (i32.const 0x3f80) "delete timer at \00")
  (data (i32.const 0x3fc0) ": no page holds the first entry\00")
  (data (i32.const 0x4000) "t\00")
  (data (i32.const 0x4010) "inc:\00")
  (data (i32.const 0x4020) " =\00")
  (data (i32.const 0x4030) "conform\00")
  (data (i32.const 0x4040) "m\00")
  (data (i32.const 0x4050) "fail\00")
  (data (i32.const 0x4060) "m|\00")
  (data (i32.const 0x4070) "|\00")
  (data (i32.const 0x4080) "migration refused\00")

  ;; The integer parse_int parsed; the slot of the callback in progress; the
  ;; record being handled (key and timestamp, for replies); whether a
  ;; growable buffer could not grow since the last check.
  (global $parsed (mut i64) (i64.const 0))
  (global $cur_slot (mut i32) (i32.const 0))
  (global $rkey (mut i32) (i32.const 0))
  (global $rklen (mut i32) (i32.const 0))
  (global $rts (mut i64) (i64.const 0))
  (global $oom (mut i32) (i32.const 0))

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


  ;; parse_int parses the decimal int64 [p, p+n) into $parsed, with Go's
  ;; rules (strconv-like: an optional sign, at least one digit). It returns
  ;; 0, 1 when it is not a decimal integer, 2 when it overflows int64.
  (func $parse_int (param $p i32) (param $n i32) (result i32)
    (local $neg i32) (local $i i32) (local $c i32) (local $u i64)
    (if (i32.gt_u (local.get $n) (i32.const 0))
      (then
        (local.set $c (i32.load8_u (local.get $p)))
        (local.set $neg (i32.eq (local.get $c) (i32.const 45)))
        (if (i32.or (local.get $neg) (i32.eq (local.get $c) (i32.const 43)))
          (then (local.set $i (i32.const 1))))))
    (if (i32.ge_u (local.get $i) (local.get $n)) (then (return (i32.const 1))))
    (block $done
      (loop $digit
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $c (i32.sub (i32.load8_u (i32.add (local.get $p) (local.get $i))) (i32.const 48)))
        (if (i32.gt_u (local.get $c) (i32.const 9)) (then (return (i32.const 1))))
        ;; The first test keeps u*10 from wrapping around.
        (if (i64.gt_u (local.get $u) (i64.const 922337203685477580)) (then (return (i32.const 2))))
        (local.set $u (i64.add (i64.mul (local.get $u) (i64.const 10)) (i64.extend_i32_u (local.get $c))))
        (if (i64.gt_u (local.get $u) (i64.const 0x8000000000000000)) (then (return (i32.const 2))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $digit)))
    (if (local.get $neg)
      (then (global.set $parsed (i64.sub (i64.const 0) (local.get $u))) (return (i32.const 0))))
    (if (i64.gt_u (local.get $u) (i64.const 0x7fffffffffffffff)) (then (return (i32.const 2))))
    (global.set $parsed (local.get $u))
    (i32.const 0))

  ;; ---- growable buffers: a descriptor of three i32 (ptr, cap, len) at
  ;; 0x880 (the reply), 0x890 (state_get's buffer), 0x8a0 (state_iter's
  ;; page), 0x8b0 (big's value), 0x8c0 and 0x8d0 (mscan's first and last
  ;; namespaces). A buffer grows geometrically, in place when it is the last
  ;; block of the heap.

  (func $buf_reserve (param $d i32) (param $need i32) (result i32)
    (local $ptr i32) (local $cap i32) (local $len i32) (local $want i64) (local $ncap i32) (local $p i32)
    (local.set $ptr (i32.load (local.get $d)))
    (local.set $cap (i32.load offset=4 (local.get $d)))
    (local.set $len (i32.load offset=8 (local.get $d)))
    (local.set $want (i64.add (i64.extend_i32_u (local.get $len)) (i64.extend_i32_u (local.get $need))))
    (if (i64.le_u (local.get $want) (i64.extend_i32_u (local.get $cap))) (then (return (i32.const 1))))
    (if (i64.gt_u (local.get $want) (i64.const 0x7fffffff)) (then (return (i32.const 0))))
    (local.set $ncap (i32.shl (local.get $cap) (i32.const 1)))
    (if (i32.lt_u (local.get $ncap) (i32.wrap_i64 (local.get $want))) (then (local.set $ncap (i32.wrap_i64 (local.get $want)))))
    (if (i32.lt_u (local.get $ncap) (i32.const 256)) (then (local.set $ncap (i32.const 256))))
    (if (i32.and (i32.ne (local.get $ptr) (i32.const 0))
                 (i32.eq (i32.add (local.get $ptr) (local.get $cap)) (global.get $heap)))
      (then
        (global.set $heap (local.get $ptr))
        (if (i32.eqz (call $alloc (local.get $ncap)))
          (then
            (global.set $heap (i32.add (local.get $ptr) (local.get $cap)))
            (return (i32.const 0))))
        (i32.store offset=4 (local.get $d) (local.get $ncap))
        (return (i32.const 1))))
    (local.set $p (call $alloc (local.get $ncap)))
    (if (i32.eqz (local.get $p)) (then (return (i32.const 0))))
    (memory.copy (local.get $p) (local.get $ptr) (local.get $len))
    (i32.store (local.get $d) (local.get $p))
    (i32.store offset=4 (local.get $d) (local.get $ncap))
    (i32.const 1))

  ;; buf_add appends [p, p+n); when the buffer cannot grow it sets $oom
  ;; and drops the bytes.
  (func $buf_add (param $d i32) (param $p i32) (param $n i32)
    (if (i32.eqz (call $buf_reserve (local.get $d) (local.get $n)))
      (then (global.set $oom (i32.const 1)) (return)))
    (memory.copy (i32.add (i32.load (local.get $d)) (i32.load offset=8 (local.get $d))) (local.get $p) (local.get $n))
    (i32.store offset=8 (local.get $d) (i32.add (i32.load offset=8 (local.get $d)) (local.get $n))))

  (func $buf_cstr (param $d i32) (param $s i32)
    (call $buf_add (local.get $d) (local.get $s) (call $strlen (local.get $s))))

  (func $buf_i64 (param $d i32) (param $v i64)
    (call $buf_add (local.get $d) (i32.const 0x800) (call $fmt_i64 (local.get $v) (i32.const 0x800))))

  (func $buf_reset (param $d i32)
    (i32.store offset=8 (local.get $d) (i32.const 0)))

  ;; err_oom fails the call for a buffer that could not grow.
  (func $err_oom (result i32)
    (call $err_begin)
    (call $msg_cstr (i32.const 0x39c0))
    (call $err_end))

  ;; ---- tokens: the command split on single spaces, the first 8 as (ptr,
  ;; len) pairs at 0x900

  (global $ntok (mut i32) (i32.const 0))
  (global $cmd (mut i32) (i32.const 0))
  (global $cmdlen (mut i32) (i32.const 0))

  (func $tokenize (param $p i32) (param $n i32)
    (local $i i32) (local $start i32)
    (global.set $cmd (local.get $p))
    (global.set $cmdlen (local.get $n))
    (global.set $ntok (i32.const 0))
    (loop $next
      (if (i32.or (i32.eq (local.get $i) (local.get $n))
                  (i32.eq (i32.load8_u (i32.add (local.get $p) (local.get $i))) (i32.const 32)))
        (then
          (if (i32.lt_u (global.get $ntok) (i32.const 8))
            (then
              (i32.store (i32.add (i32.const 0x900) (i32.shl (global.get $ntok) (i32.const 3)))
                         (i32.add (local.get $p) (local.get $start)))
              (i32.store (i32.add (i32.const 0x904) (i32.shl (global.get $ntok) (i32.const 3)))
                         (i32.sub (local.get $i) (local.get $start)))))
          (global.set $ntok (i32.add (global.get $ntok) (i32.const 1)))
          (local.set $start (i32.add (local.get $i) (i32.const 1)))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $next (i32.le_u (local.get $i) (local.get $n)))))

  (func $tp (param $i i32) (result i32) (i32.load (i32.add (i32.const 0x900) (i32.shl (local.get $i) (i32.const 3)))))
  (func $tl (param $i i32) (result i32) (i32.load (i32.add (i32.const 0x904) (i32.shl (local.get $i) (i32.const 3)))))
  (func $tok_is (param $i i32) (param $s i32) (result i32)
    (call $eq_cstr (call $tp (local.get $i)) (call $tl (local.get $i)) (local.get $s)))

  ;; args checks that the command has exactly n tokens; 0 or GUEST_ERROR.
  (func $args (param $n i32) (result i32)
    (if (i32.eq (global.get $ntok) (local.get $n)) (then (return (i32.const 0))))
    (call $err_begin)
    (call $msg_cstr (i32.const 0x3a40))
    (call $msg_quote (global.get $cmd) (global.get $cmdlen))
    (call $msg_cstr (i32.const 0x3a80))
    (call $msg_i64 (i64.extend_i32_u (local.get $n)))
    (call $msg_cstr (i32.const 0x3ac0))
    (call $msg_i64 (i64.extend_i32_u (global.get $ntok)))
    (call $err_end))

  ;; number parses token i, a non-negative decimal int64, into $parsed; 0 or
  ;; GUEST_ERROR.
  (func $number (param $i i32) (result i32)
    (if (i32.eqz (call $parse_int (call $tp (local.get $i)) (call $tl (local.get $i))))
      (then (if (i64.ge_s (global.get $parsed) (i64.const 0)) (then (return (i32.const 0))))))
    (call $err_begin)
    (call $msg_quote (call $tp (local.get $i)) (call $tl (local.get $i)))
    (call $msg_cstr (i32.const 0x3bc0))
    (call $err_end))

  ;; value_h returns the handle of the value state named by token i, or
  ;; GUEST_ERROR after failing the call. The handles are at +40 of the slot,
  ;; in the order of the names at 0x3100.
  (func $value_h (param $i i32) (result i32)
    (local $k i32)
    (loop $next
      (if (call $tok_is (local.get $i) (i32.add (i32.const 0x3100) (i32.shl (local.get $k) (i32.const 4))))
        (then (return (i32.load offset=40 (i32.add (global.get $cur_slot) (i32.shl (local.get $k) (i32.const 2)))))))
      (local.set $k (i32.add (local.get $k) (i32.const 1)))
      (br_if $next (i32.lt_u (local.get $k) (i32.const 4))))
    (call $err_begin)
    (call $msg_cstr (i32.const 0x3b00))
    (call $msg_quote (call $tp (local.get $i)) (call $tl (local.get $i)))
    (call $msg_cstr (i32.const 0x3b40))
    (call $err_end))

  ;; map_h is value_h for the map states (names 4 and 5).
  (func $map_h (param $i i32) (result i32)
    (local $k i32)
    (local.set $k (i32.const 4))
    (loop $next
      (if (call $tok_is (local.get $i) (i32.add (i32.const 0x3100) (i32.shl (local.get $k) (i32.const 4))))
        (then (return (i32.load offset=40 (i32.add (global.get $cur_slot) (i32.shl (local.get $k) (i32.const 2)))))))
      (local.set $k (i32.add (local.get $k) (i32.const 1)))
      (br_if $next (i32.lt_u (local.get $k) (i32.const 6))))
    (call $err_begin)
    (call $msg_cstr (i32.const 0x3b00))
    (call $msg_quote (call $tp (local.get $i)) (call $tl (local.get $i)))
    (call $msg_cstr (i32.const 0x3b80))
    (call $err_end))

  ;; err_state fails the call for a state call on the state named by token
  ;; 1 that returned st: "WHAT "NAME": status N (NAME)".
  (func $err_state (param $what i32) (param $st i32) (result i32)
    (call $err_begin)
    (call $msg_cstr (local.get $what))
    (call $msg_quote (call $tp (i32.const 1)) (call $tl (i32.const 1)))
    (call $msg_cstr (i32.const 0x2640))
    (call $msg_status (local.get $st))
    (call $err_end))

  ;; get reads the entry (h, current key, namespace [ns, ns+nl)) into the
  ;; buffer at 0x890 and returns its length, NOT_FOUND, or GUEST_ERROR after
  ;; failing the call. When the value does not fit, state_get says how long
  ;; it is: the buffer grows to that and the call is repeated (the value
  ;; cannot change between two calls of one callback).
  (func $get (param $h i32) (param $ns i32) (param $nl i32) (result i32)
    (local $st i32)
    (if (i32.eqz (i32.load offset=4 (i32.const 0x890)))
      (then (drop (call $buf_reserve (i32.const 0x890) (i32.const 256)))))
    (loop $again
      (local.set $st (call $state_get (local.get $h) (global.get $rkey) (global.get $rklen) (local.get $ns) (local.get $nl)
                                      (i32.load (i32.const 0x890)) (i32.load offset=4 (i32.const 0x890))))
      (if (i32.eq (local.get $st) (i32.const -1)) (then (return (i32.const -1))))
      (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_state (i32.const 0x3e00) (local.get $st)))))
      (if (i32.gt_u (local.get $st) (i32.load offset=4 (i32.const 0x890)))
        (then
          (call $buf_reset (i32.const 0x890))
          (if (i32.eqz (call $buf_reserve (i32.const 0x890) (local.get $st))) (then (return (call $err_oom))))
          (br $again))))
    (i32.store offset=8 (i32.const 0x890) (local.get $st))
    (local.get $st))

  ;; reply_found replies "=V" with the value get read, or "missing".
  (func $reply_found (param $n i32)
    (if (i32.eq (local.get $n) (i32.const -1))
      (then (call $buf_cstr (i32.const 0x880) (i32.const 0x3440)) (return)))
    (call $buf_cstr (i32.const 0x880) (i32.const 0x3480))
    (call $buf_add (i32.const 0x880) (i32.load (i32.const 0x890)) (local.get $n)))

  (func $reply_ok (call $buf_cstr (i32.const 0x880) (i32.const 0x3400)))

  ;; ---- the commands: each leaves its reply in the buffer at 0x880 and
  ;; returns 0, or returns GUEST_ERROR after failing the call

  ;; put S V
  (func $cmd_put (result i32)
    (local $h i32) (local $st i32)
    (if (local.tee $st (call $args (i32.const 3))) (then (return (local.get $st))))
    (if (i32.lt_s (local.tee $h (call $value_h (i32.const 1))) (i32.const 0)) (then (return (local.get $h))))
    (local.set $st (call $state_put (local.get $h) (global.get $rkey) (global.get $rklen) (i32.const 0) (i32.const 0)
                                    (call $tp (i32.const 2)) (call $tl (i32.const 2))))
    (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_state (i32.const 0x3dc0) (local.get $st)))))
    (call $reply_ok)
    (i32.const 0))

  ;; get S, del S
  (func $cmd_get_del (param $del i32) (result i32)
    (local $h i32) (local $st i32)
    (if (local.tee $st (call $args (i32.const 2))) (then (return (local.get $st))))
    (if (i32.lt_s (local.tee $h (call $value_h (i32.const 1))) (i32.const 0)) (then (return (local.get $h))))
    (if (local.get $del)
      (then
        (local.set $st (call $state_delete (local.get $h) (global.get $rkey) (global.get $rklen) (i32.const 0) (i32.const 0)))
        (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_state (i32.const 0x3e40) (local.get $st)))))
        (call $reply_ok)
        (return (i32.const 0))))
    (local.set $st (call $get (local.get $h) (i32.const 0) (i32.const 0)))
    (if (i32.lt_s (local.get $st) (i32.const -1)) (then (return (local.get $st))))
    (call $reply_found (local.get $st))
    (i32.const 0))

  ;; count adds 1 to the int64 counter (8 bytes little-endian, absent = 0)
  ;; of value state h for key [key, key+kl), empty namespace, named by token
  ;; 1, and leaves the new count in $parsed; 0 or GUEST_ERROR. It reads and
  ;; writes with the batched state calls, one entry each:
  ;;   0x5000 request: key_ptr key_len ns_ptr ns_len
  ;;   0x5010 out: result first:u32 vlen:i32 vptr:u32, then the value (64 bytes)
  ;;   0x5050 write: h key_ptr key_len ns_ptr ns_len val_ptr val_len
  ;;   0x5070 the new count
  (func $count (param $h i32) (param $key i32) (param $kl i32) (result i32)
    (local $st i32) (local $vl i32) (local $n i64)
    (i32.store (i32.const 0x5000) (local.get $key))
    (i32.store (i32.const 0x5004) (local.get $kl))
    (i64.store (i32.const 0x5008) (i64.const 0))
    (local.set $st (call $state_get_many (local.get $h) (i32.const 0x5000) (i32.const 16) (i32.const 0x5010) (i32.const 64)))
    (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_state (i32.const 0x3e00) (local.get $st)))))
    (local.set $vl (i32.load (i32.const 0x5014)))
    (if (i32.lt_s (local.get $vl) (i32.const -1)) (then (return (call $err_state (i32.const 0x3e00) (local.get $vl)))))
    (if (i32.ge_s (local.get $vl) (i32.const 0))
      (then
        (if (i32.ne (local.get $vl) (i32.const 8))
          (then
            (call $err_begin)
            (call $msg_cstr (i32.const 0x3d00))
            (call $msg_quote (call $tp (i32.const 1)) (call $tl (i32.const 1)))
            (call $msg_cstr (i32.const 0x3d40))
            (call $msg_i64 (i64.extend_i32_u (local.get $vl)))
            (call $msg_cstr (i32.const 0x3d80))
            (return (call $err_end))))
        ;; 8 bytes always fit in the 52 left after the result.
        (local.set $n (i64.load (i32.load (i32.const 0x5018))))))
    (local.set $n (i64.add (local.get $n) (i64.const 1)))
    (i64.store (i32.const 0x5070) (local.get $n))
    (i32.store (i32.const 0x5050) (local.get $h))
    (i32.store (i32.const 0x5054) (local.get $key))
    (i32.store (i32.const 0x5058) (local.get $kl))
    (i64.store (i32.const 0x505c) (i64.const 0))
    (i32.store (i32.const 0x5064) (i32.const 0x5070))
    (i32.store (i32.const 0x5068) (i32.const 8))
    (local.set $st (call $state_write_batch (i32.const 0x5050) (i32.const 28)))
    (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_state (i32.const 0x3dc0) (local.get $st)))))
    (global.set $parsed (local.get $n))
    (i32.const 0))

  ;; inc S: an int64 counter
  (func $cmd_inc (result i32)
    (local $h i32) (local $st i32)
    (if (local.tee $st (call $args (i32.const 2))) (then (return (local.get $st))))
    (if (i32.lt_s (local.tee $h (call $value_h (i32.const 1))) (i32.const 0)) (then (return (local.get $h))))
    (if (local.tee $st (call $count (local.get $h) (global.get $rkey) (global.get $rklen))) (then (return (local.get $st))))
    (call $buf_cstr (i32.const 0x880) (i32.const 0x3480))
    (call $buf_i64 (i32.const 0x880) (global.get $parsed))
    (i32.const 0))

  ;; tinc S TS: an event-time timer at TS, namespace "inc:S", whose firing
  ;; counts in value state S (wstream_on_timer); the namespace is built at
  ;; 0x5100.
  (func $cmd_tinc (result i32)
    (local $st i32)
    (if (local.tee $st (call $args (i32.const 3))) (then (return (local.get $st))))
    (if (i32.lt_s (call $value_h (i32.const 1)) (i32.const 0)) (then (return (i32.const -11))))
    (if (local.tee $st (call $number (i32.const 2))) (then (return (local.get $st))))
    (i32.store (i32.const 0x5100) (i32.load (i32.const 0x4010)))
    (memory.copy (i32.const 0x5104) (call $tp (i32.const 1)) (call $tl (i32.const 1)))
    (local.set $st (call $timer_register (i32.const 0) (global.get $rkey) (global.get $rklen) (i32.const 0x5100)
                                         (i32.add (i32.const 4) (call $tl (i32.const 1))) (global.get $parsed)))
    (if (i32.lt_s (local.get $st) (i32.const 0))
      (then
        (call $err_begin)
        (call $msg_cstr (i32.const 0x3f40))
        (call $msg_i64 (global.get $parsed))
        (call $msg_cstr (i32.const 0x2640))
        (call $msg_status (local.get $st))
        (return (call $err_end))))
    (call $reply_ok)
    (i32.const 0))

  ;; big S N: store N bytes 'a' + i % 26, read them back, compare
  (func $cmd_big (result i32)
    (local $h i32) (local $st i32) (local $n i32) (local $p i32) (local $i i32) (local $c i32)
    (if (local.tee $st (call $args (i32.const 3))) (then (return (local.get $st))))
    (if (i32.lt_s (local.tee $h (call $value_h (i32.const 1))) (i32.const 0)) (then (return (local.get $h))))
    (if (local.tee $st (call $number (i32.const 2))) (then (return (local.get $st))))
    (if (i64.gt_u (global.get $parsed) (i64.const 0x7fffffff)) (then (return (call $err_oom))))
    (local.set $n (i32.wrap_i64 (global.get $parsed)))
    (call $buf_reset (i32.const 0x8b0))
    (if (i32.eqz (call $buf_reserve (i32.const 0x8b0) (local.get $n))) (then (return (call $err_oom))))
    (local.set $p (i32.load (i32.const 0x8b0)))
    (local.set $c (i32.const 97))
    (block $done
      (loop $fill
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (i32.store8 (i32.add (local.get $p) (local.get $i)) (local.get $c))
        (local.set $c (i32.add (local.get $c) (i32.const 1)))
        (if (i32.eq (local.get $c) (i32.const 123)) (then (local.set $c (i32.const 97))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $fill)))
    (local.set $st (call $state_put (local.get $h) (global.get $rkey) (global.get $rklen) (i32.const 0) (i32.const 0)
                                    (local.get $p) (local.get $n)))
    (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_state (i32.const 0x3dc0) (local.get $st)))))
    (local.set $st (call $get (local.get $h) (i32.const 0) (i32.const 0)))
    (if (i32.lt_s (local.get $st) (i32.const -1)) (then (return (local.get $st))))
    ;; An absent value reads as empty.
    (if (i32.eq (local.get $st) (i32.const -1)) (then (local.set $st (i32.const 0))))
    (if (i32.or (i32.ne (local.get $st) (local.get $n))
                (i32.eqz (call $mem_eq (i32.load (i32.const 0x890)) (local.get $p) (local.get $n))))
      (then (call $buf_cstr (i32.const 0x880) (i32.const 0x3500)) (return (i32.const 0))))
    (call $buf_cstr (i32.const 0x880) (i32.const 0x34c0))
    (call $buf_i64 (i32.const 0x880) (i64.extend_i32_u (local.get $n)))
    (i32.const 0))

  (func $mem_eq (param $a i32) (param $b i32) (param $n i32) (result i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (if (i32.ne (i32.load8_u (i32.add (local.get $a) (local.get $i))) (i32.load8_u (i32.add (local.get $b) (local.get $i))))
          (then (return (i32.const 0))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 1))

  ;; mput S NS V
  (func $cmd_mput (result i32)
    (local $h i32) (local $st i32)
    (if (local.tee $st (call $args (i32.const 4))) (then (return (local.get $st))))
    (if (i32.lt_s (local.tee $h (call $map_h (i32.const 1))) (i32.const 0)) (then (return (local.get $h))))
    (local.set $st (call $state_put (local.get $h) (global.get $rkey) (global.get $rklen)
                                    (call $tp (i32.const 2)) (call $tl (i32.const 2)) (call $tp (i32.const 3)) (call $tl (i32.const 3))))
    (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_state (i32.const 0x3dc0) (local.get $st)))))
    (call $reply_ok)
    (i32.const 0))

  ;; mget S NS, mdel S NS
  (func $cmd_mget_mdel (param $del i32) (result i32)
    (local $h i32) (local $st i32)
    (if (local.tee $st (call $args (i32.const 3))) (then (return (local.get $st))))
    (if (i32.lt_s (local.tee $h (call $map_h (i32.const 1))) (i32.const 0)) (then (return (local.get $h))))
    (if (local.get $del)
      (then
        (local.set $st (call $state_delete (local.get $h) (global.get $rkey) (global.get $rklen)
                                           (call $tp (i32.const 2)) (call $tl (i32.const 2))))
        (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_state (i32.const 0x3e40) (local.get $st)))))
        (call $reply_ok)
        (return (i32.const 0))))
    (local.set $st (call $get (local.get $h) (call $tp (i32.const 2)) (call $tl (i32.const 2))))
    (if (i32.lt_s (local.get $st) (i32.const -1)) (then (return (local.get $st))))
    (call $reply_found (local.get $st))
    (i32.const 0))

  ;; mfill S N: entries k0000 ... = v0 ...
  (func $cmd_mfill (result i32)
    (local $h i32) (local $st i32) (local $n i32) (local $i i32) (local $vl i32)
    (if (local.tee $st (call $args (i32.const 3))) (then (return (local.get $st))))
    (if (i32.lt_s (local.tee $h (call $map_h (i32.const 1))) (i32.const 0)) (then (return (local.get $h))))
    (if (local.tee $st (call $number (i32.const 2))) (then (return (local.get $st))))
    (if (i64.gt_u (global.get $parsed) (i64.const 10000))
      (then
        (call $err_begin)
        (call $msg_cstr (i32.const 0x3c80))
        (call $msg_i64 (global.get $parsed))
        (call $msg_cstr (i32.const 0x3cc0))
        (return (call $err_end))))
    (local.set $n (i32.wrap_i64 (global.get $parsed)))
    ;; The entry name "kNNNN" at 0x860, the value "vN" at 0x868.
    (i32.store8 (i32.const 0x860) (i32.const 107))
    (i32.store8 (i32.const 0x868) (i32.const 118))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (i32.store8 (i32.const 0x861) (i32.add (i32.const 48) (i32.div_u (local.get $i) (i32.const 1000))))
        (i32.store8 (i32.const 0x862) (i32.add (i32.const 48) (i32.rem_u (i32.div_u (local.get $i) (i32.const 100)) (i32.const 10))))
        (i32.store8 (i32.const 0x863) (i32.add (i32.const 48) (i32.rem_u (i32.div_u (local.get $i) (i32.const 10)) (i32.const 10))))
        (i32.store8 (i32.const 0x864) (i32.add (i32.const 48) (i32.rem_u (local.get $i) (i32.const 10))))
        (local.set $vl (i32.add (i32.const 1) (call $fmt_i64 (i64.extend_i32_u (local.get $i)) (i32.const 0x869))))
        (local.set $st (call $state_put (local.get $h) (global.get $rkey) (global.get $rklen)
                                        (i32.const 0x860) (i32.const 5) (i32.const 0x868) (local.get $vl)))
        (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_state (i32.const 0x3dc0) (local.get $st)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (call $reply_ok)
    (i32.const 0))

  ;; mscan S P: every entry whose namespace starts with P ("-": all), page
  ;; by page: each state_iter call continues after the last namespace of the
  ;; previous page, kept in the buffer at 0x8d0 (the next page overwrites
  ;; the page buffer). When not even one entry fits (LIMIT), the page grows.
  (func $cmd_mscan (result i32)
    (local $h i32) (local $st i32) (local $pp i32) (local $pl i32) (local $ap i32) (local $al i32)
    (local $count i64) (local $e i32) (local $end i32) (local $nl i32) (local $vl i32) (local $lp i32) (local $ll i32)
    (if (local.tee $st (call $args (i32.const 3))) (then (return (local.get $st))))
    (if (i32.lt_s (local.tee $h (call $map_h (i32.const 1))) (i32.const 0)) (then (return (local.get $h))))
    (local.set $pp (call $tp (i32.const 2)))
    (local.set $pl (call $tl (i32.const 2)))
    (if (i32.and (i32.eq (local.get $pl) (i32.const 1)) (i32.eq (i32.load8_u (local.get $pp)) (i32.const 45)))
      (then (local.set $pl (i32.const 0))))
    (if (i32.eqz (i32.load offset=4 (i32.const 0x8a0)))
      (then (if (i32.eqz (call $buf_reserve (i32.const 0x8a0) (i32.const 4096))) (then (return (call $err_oom))))))
    (call $buf_reset (i32.const 0x8c0))
    (call $buf_reset (i32.const 0x8d0))
    ;; after_len -1: from the first entry.
    (local.set $al (i32.const -1))
    (block $done
      (loop $page
        (local.set $st (call $state_iter (local.get $h) (global.get $rkey) (global.get $rklen) (local.get $pp) (local.get $pl)
                                         (local.get $ap) (local.get $al)
                                         (i32.load (i32.const 0x8a0)) (i32.load offset=4 (i32.const 0x8a0))))
        (if (i32.eq (local.get $st) (i32.const -9))
          (then
            ;; An entry is at most 8 bytes + a 64 KiB namespace + a 16 MiB
            ;; value: a 32 MiB page holds any, so past that LIMIT is about
            ;; something else.
            (if (i32.ge_u (i32.load offset=4 (i32.const 0x8a0)) (i32.const 0x2000000))
              (then (return (call $err_state (i32.const 0x3e80) (local.get $st)))))
            (if (i32.eqz (call $buf_reserve (i32.const 0x8a0) (i32.shl (i32.load offset=4 (i32.const 0x8a0)) (i32.const 1))))
              (then (return (call $err_oom))))
            (br $page)))
        (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_state (i32.const 0x3e80) (local.get $st)))))
        (br_if $done (i32.eqz (local.get $st)))
        (if (i32.gt_u (local.get $st) (i32.load offset=4 (i32.const 0x8a0)))
          (then (return (call $err_state (i32.const 0x3e80) (local.get $st)))))
        ;;   entry := ns_len:u32 val_len:u32 ns[ns_len] value[val_len]
        (local.set $e (i32.load (i32.const 0x8a0)))
        (local.set $end (i32.add (local.get $e) (local.get $st)))
        (block $walked
          (loop $entry
            (br_if $walked (i32.ge_u (local.get $e) (local.get $end)))
            (if (i32.or (i32.lt_u (i32.sub (local.get $end) (local.get $e)) (i32.const 8))
                        (i64.gt_u (i64.add (i64.load32_u (local.get $e)) (i64.load32_u offset=4 (local.get $e)))
                                  (i64.extend_i32_u (i32.sub (i32.sub (local.get $end) (local.get $e)) (i32.const 8)))))
              (then
                (call $err_begin)
                (call $msg_cstr (i32.const 0x3e80))
                (call $msg_quote (call $tp (i32.const 1)) (call $tl (i32.const 1)))
                (call $msg_cstr (i32.const 0x3ec0))
                (return (call $err_end))))
            (local.set $nl (i32.load (local.get $e)))
            (local.set $vl (i32.load offset=4 (local.get $e)))
            (if (i64.eqz (local.get $count))
              (then (call $buf_add (i32.const 0x8c0) (i32.add (local.get $e) (i32.const 8)) (local.get $nl))))
            (local.set $lp (i32.add (local.get $e) (i32.const 8)))
            (local.set $ll (local.get $nl))
            (local.set $count (i64.add (local.get $count) (i64.const 1)))
            (local.set $e (i32.add (i32.add (local.get $e) (i32.const 8)) (i32.add (local.get $nl) (local.get $vl))))
            (br $entry)))
        ;; The next page starts after the last namespace of this one.
        (call $buf_reset (i32.const 0x8d0))
        (call $buf_add (i32.const 0x8d0) (local.get $lp) (local.get $ll))
        (if (global.get $oom) (then (return (call $err_oom))))
        (local.set $ap (i32.load (i32.const 0x8d0)))
        (local.set $al (local.get $ll))
        (br $page)))
    (call $buf_cstr (i32.const 0x880) (i32.const 0x3540))
    (call $buf_i64 (i32.const 0x880) (local.get $count))
    (if (i64.eqz (local.get $count)) (then (return (i32.const 0))))
    (call $buf_cstr (i32.const 0x880) (i32.const 0x3580))
    (call $buf_add (i32.const 0x880) (i32.load (i32.const 0x8c0)) (i32.load offset=8 (i32.const 0x8c0)))
    (call $buf_cstr (i32.const 0x880) (i32.const 0x35c0))
    (call $buf_add (i32.const 0x880) (i32.load (i32.const 0x8d0)) (i32.load offset=8 (i32.const 0x8d0)))
    (i32.const 0))

  ;; emit O V: output O by name; an unknown name is a reply, not a failure
  (func $cmd_emit (result i32)
    (local $st i32) (local $out i32)
    (if (local.tee $st (call $args (i32.const 3))) (then (return (local.get $st))))
    (local.set $out (call $output_index (call $tp (i32.const 1)) (call $tl (i32.const 1))))
    (if (i32.eq (local.get $out) (i32.const -4))
      (then
        (call $buf_cstr (i32.const 0x880) (i32.const 0x3600))
        (call $buf_add (i32.const 0x880) (call $tp (i32.const 1)) (call $tl (i32.const 1)))
        (return (i32.const 0))))
    (if (i32.lt_s (local.get $out) (i32.const 0)) (then (return (call $err_state (i32.const 0x3f00) (local.get $out)))))
    (if (local.tee $st (call $emit (local.get $out) (global.get $rts) (global.get $rkey) (global.get $rklen)
                                   (call $tp (i32.const 2)) (call $tl (i32.const 2))))
      (then (return (local.get $st))))
    (call $reply_ok)
    (i32.const 0))

  ;; batch N: N records r0 ... to out
  (func $cmd_batch (result i32)
    (local $st i32) (local $i i64)
    (if (local.tee $st (call $args (i32.const 2))) (then (return (local.get $st))))
    (if (local.tee $st (call $number (i32.const 1))) (then (return (local.get $st))))
    (i32.store8 (i32.const 0x860) (i32.const 114))
    (block $done
      (loop $next
        (br_if $done (i64.ge_u (local.get $i) (global.get $parsed)))
        (if (local.tee $st (call $emit (i32.const 0) (global.get $rts) (global.get $rkey) (global.get $rklen) (i32.const 0x860)
                                       (i32.add (i32.const 1) (call $fmt_i64 (local.get $i) (i32.const 0x861)))))
          (then (return (local.get $st))))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $next)))
    (call $reply_ok)
    (i32.const 0))

  ;; timer D TS, untimer D TS: namespace "t"
  (func $cmd_timer (param $del i32) (result i32)
    (local $st i32) (local $d i32)
    (if (local.tee $st (call $args (i32.const 3))) (then (return (local.get $st))))
    (local.set $d (i32.const -1))
    (if (call $tok_is (i32.const 1) (i32.const 0x3940)) (then (local.set $d (i32.const 0))))
    (if (call $tok_is (i32.const 1) (i32.const 0x3980)) (then (local.set $d (i32.const 1))))
    (if (i32.lt_s (local.get $d) (i32.const 0))
      (then
        (call $err_begin)
        (call $msg_cstr (i32.const 0x3c00))
        (call $msg_quote (call $tp (i32.const 1)) (call $tl (i32.const 1)))
        (return (call $err_end))))
    (if (local.tee $st (call $number (i32.const 2))) (then (return (local.get $st))))
    (if (local.get $del)
      (then (local.set $st (call $timer_delete (local.get $d) (global.get $rkey) (global.get $rklen) (i32.const 0x4000) (i32.const 1)
                                               (global.get $parsed))))
      (else (local.set $st (call $timer_register (local.get $d) (global.get $rkey) (global.get $rklen) (i32.const 0x4000) (i32.const 1)
                                                 (global.get $parsed)))))
    (if (i32.lt_s (local.get $st) (i32.const 0))
      (then
        (call $err_begin)
        (call $msg_cstr (select (i32.const 0x3f80) (i32.const 0x3f40) (local.get $del)))
        (call $msg_i64 (global.get $parsed))
        (call $msg_cstr (i32.const 0x2640))
        (call $msg_status (local.get $st))
        (return (call $err_end))))
    (call $reply_ok)
    (i32.const 0))

  ;; run executes the command [p, p+n) of the current record; the reply is
  ;; left in the buffer at 0x880.
  (func $run (param $p i32) (param $n i32) (result i32)
    (local $st i32) (local $s i32)
    (local.set $s (global.get $cur_slot))
    (call $buf_reset (i32.const 0x880))
    (call $tokenize (local.get $p) (local.get $n))
    (if (call $tok_is (i32.const 0) (i32.const 0x3200)) (then (return (call $cmd_put))))
    (if (call $tok_is (i32.const 0) (i32.const 0x3210)) (then (return (call $cmd_get_del (i32.const 0)))))
    (if (call $tok_is (i32.const 0) (i32.const 0x3220)) (then (return (call $cmd_get_del (i32.const 1)))))
    (if (call $tok_is (i32.const 0) (i32.const 0x3230)) (then (return (call $cmd_inc))))
    (if (call $tok_is (i32.const 0) (i32.const 0x3240)) (then (return (call $cmd_big))))
    (if (call $tok_is (i32.const 0) (i32.const 0x3250)) (then (return (call $cmd_mput))))
    (if (call $tok_is (i32.const 0) (i32.const 0x3260)) (then (return (call $cmd_mget_mdel (i32.const 0)))))
    (if (call $tok_is (i32.const 0) (i32.const 0x3270)) (then (return (call $cmd_mget_mdel (i32.const 1)))))
    (if (call $tok_is (i32.const 0) (i32.const 0x3280)) (then (return (call $cmd_mfill))))
    (if (call $tok_is (i32.const 0) (i32.const 0x3290)) (then (return (call $cmd_mscan))))
    (if (call $tok_is (i32.const 0) (i32.const 0x32a0)) (then (return (call $cmd_emit))))
    (if (call $tok_is (i32.const 0) (i32.const 0x32b0)) (then (return (call $cmd_batch))))
    (if (call $tok_is (i32.const 0) (i32.const 0x32c0)) (then (return (call $cmd_timer (i32.const 0)))))
    (if (call $tok_is (i32.const 0) (i32.const 0x32d0)) (then (return (call $cmd_timer (i32.const 1)))))
    (if (call $tok_is (i32.const 0) (i32.const 0x3340)) (then (return (call $cmd_tinc))))
    (if (call $tok_is (i32.const 0) (i32.const 0x32e0))                    ;; wm
      (then
        (call $buf_cstr (i32.const 0x880) (i32.const 0x3640))
        (call $buf_i64 (i32.const 0x880) (call $current_watermark))
        (return (i32.const 0))))
    (if (call $tok_is (i32.const 0) (i32.const 0x32f0))                    ;; ptime
      (then
        (call $buf_cstr (i32.const 0x880)
          (select (i32.const 0x3680) (i32.const 0x36c0) (i64.gt_s (call $processing_time) (i64.const 0))))
        (return (i32.const 0))))
    (if (call $tok_is (i32.const 0) (i32.const 0x3300))                    ;; log M
      (then
        (if (local.tee $st (call $args (i32.const 2))) (then (return (local.get $st))))
        (call $log (i32.const 1) (call $tp (i32.const 1)) (call $tl (i32.const 1)))
        (call $reply_ok)
        (return (i32.const 0))))
    (if (call $tok_is (i32.const 0) (i32.const 0x3310))                    ;; config
      (then
        (call $buf_cstr (i32.const 0x880) (i32.const 0x3700))
        (call $buf_add (i32.const 0x880) (i32.load offset=4 (local.get $s)) (i32.load offset=8 (local.get $s)))
        (return (i32.const 0))))
    (if (call $tok_is (i32.const 0) (i32.const 0x3320))                    ;; hooks
      (then
        (call $buf_cstr (i32.const 0x880) (i32.const 0x3740))
        (call $buf_i64 (i32.const 0x880) (i64.load offset=16 (local.get $s)))
        (call $buf_cstr (i32.const 0x880) (i32.const 0x3780))
        (call $buf_i64 (i32.const 0x880) (i64.load offset=24 (local.get $s)))
        (call $buf_cstr (i32.const 0x880) (i32.const 0x37c0))
        (call $buf_i64 (i32.const 0x880) (i64.load offset=32 (local.get $s)))
        (return (i32.const 0))))
    (if (call $tok_is (i32.const 0) (i32.const 0x3330))                    ;; fail M
      (then
        (if (local.tee $st (call $args (i32.const 2))) (then (return (local.get $st))))
        (call $err_begin)
        (call $msg_cstr (i32.const 0x3c40))
        (call $msg_bytes (call $tp (i32.const 1)) (call $tl (i32.const 1)))
        (return (call $err_end))))
    (call $err_begin)
    (call $msg_cstr (i32.const 0x3a00))
    (call $msg_quote (local.get $p) (local.get $n))
    (call $err_end))

  ;; ---- slots: 64 entries of 64 bytes at 0x1000
  ;;   +0 kind (0 closed, 1 conform)  +4 config ptr  +8 config len
  ;;   +16 +24 +32 the checkpoint ids last passed to pre_barrier,
  ;;   checkpoint_complete and checkpoint_aborted (i64, -1 for none)
  ;;   +40 .. +64 the six state handles, in the order of the names at 0x3100

  (func $slot (param $op i32) (result i32)
    (i32.add (i32.const 0x1000) (i32.shl (local.get $op) (i32.const 6))))

  (func $kind_of (param $op i32) (result i32)
    (if (i32.ge_u (local.get $op) (i32.const 64)) (then (return (i32.const 0))))
    (i32.load (call $slot (local.get $op))))

  ;; enter checks slot op for an export and starts its callback; 0, or
  ;; BAD_HANDLE after failing the call.
  (func $enter (param $op i32) (param $export i32) (param $phase i32) (result i32)
    (if (i32.eqz (call $kind_of (local.get $op))) (then (return (call $no_slot (local.get $export) (local.get $op)))))
    (global.set $cur_slot (call $slot (local.get $op)))
    (call $begin (i32.const 0x3000) (local.get $phase))
    (i32.const 0))

  ;; ================================================================ exports

  (func (export "wstream_abi_version") (result i32) (i32.const 1))

  (func (export "wstream_open") (param $op i32) (param $np i32) (param $nl i32) (param $cp i32) (param $cl i32) (result i32)
    (local $s i32) (local $k i32) (local $h i32) (local $cfg i32)
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
    (if (call $kind_of (local.get $op))
      (then
        (global.set $msg_len (i32.const 0))
        (call $msg_cstr (i32.const 0x2200))
        (call $msg_cstr (i32.const 0x2480))
        (call $msg_i64 (i64.extend_i32_s (local.get $op)))
        (call $msg_cstr (i32.const 0x2540))
        (call $msg_quote (i32.const 0x3000) (i32.const 7))
        (call $msg_cstr (i32.const 0x2ac0))
        (call $fail_msg)
        (return (i32.const -3))))
    (if (i32.eqz (call $eq_cstr (local.get $np) (local.get $nl) (i32.const 0x3000)))
      (then
        (global.set $msg_len (i32.const 0))
        (call $msg_cstr (i32.const 0x2580))
        (call $msg_quote (local.get $np) (local.get $nl))
        (call $msg_cstr (i32.const 0x3040))
        (call $fail_msg)
        (return (i32.const -10))))
    (local.set $s (call $slot (local.get $op)))
    (call $begin (i32.const 0x3000) (i32.const 0x2bc0))
    ;; The config must outlive the arena: keep a copy on the heap.
    (if (local.get $cl)
      (then
        (local.set $cfg (call $alloc (local.get $cl)))
        (if (i32.eqz (local.get $cfg)) (then (return (call $err_oom))))
        (memory.copy (local.get $cfg) (local.get $cp) (local.get $cl))))
    ;; States can only be registered here: four value states, two maps.
    (loop $register
      (local.set $h (call $state_register (i32.add (i32.const 0x3100) (i32.shl (local.get $k) (i32.const 4)))
                                          (call $strlen (i32.add (i32.const 0x3100) (i32.shl (local.get $k) (i32.const 4))))
                                          (select (i32.const 1) (i32.const 2) (i32.lt_u (local.get $k) (i32.const 4)))))
      (if (i32.lt_s (local.get $h) (i32.const 0))
        (then
          (call $err_begin)
          (call $msg_cstr (i32.const 0x3080))
          (call $msg_cstr (i32.add (i32.const 0x3100) (i32.shl (local.get $k) (i32.const 4))))
          (call $msg_cstr (i32.const 0x2640))
          (call $msg_status (local.get $h))
          (return (call $err_end))))
      (i32.store offset=40 (i32.add (local.get $s) (i32.shl (local.get $k) (i32.const 2))) (local.get $h))
      (local.set $k (i32.add (local.get $k) (i32.const 1)))
      (br_if $register (i32.lt_u (local.get $k) (i32.const 6))))
    (i32.store offset=4 (local.get $s) (local.get $cfg))
    (i32.store offset=8 (local.get $s) (local.get $cl))
    (i64.store offset=16 (local.get $s) (i64.const -1))
    (i64.store offset=24 (local.get $s) (i64.const -1))
    (i64.store offset=32 (local.get $s) (i64.const -1))
    (i32.store (local.get $s) (i32.const 1))
    (i32.const 0))

  ;; wstream_process runs each record's command and replies on output 0
  ;; with the record's key and timestamp.
  (func (export "wstream_process") (param $op i32) (param $ptr i32) (param $len i32) (result i32)
    (local $st i32) (local $n i32) (local $i i32) (local $p i32) (local $vl i32)
    (if (local.tee $st (call $enter (local.get $op) (i32.const 0x2240) (i32.const 0x2c00))) (then (return (local.get $st))))
    (if (i32.eqz (call $region (local.get $ptr) (local.get $len)))
      (then (return (call $bad_region (i32.const 0x2240) (local.get $ptr) (local.get $len)))))
    (if (local.tee $st (call $check_batch (local.get $ptr) (local.get $len) (i32.const 0x2b40))) (then (return (local.get $st))))
    (local.set $n (i32.load (local.get $ptr)))
    (local.set $p (i32.add (local.get $ptr) (i32.const 4)))
    (block $done
      (loop $record
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (call $at_record (i32.const 1) (local.get $i) (local.get $n) (local.get $p))
        (global.set $rts (i64.load offset=4 (local.get $p)))
        (global.set $rklen (i32.load offset=12 (local.get $p)))
        (global.set $rkey (i32.add (local.get $p) (i32.const 20)))
        (local.set $vl (i32.load offset=16 (local.get $p)))
        (global.set $oom (i32.const 0))
        (if (local.tee $st (call $run (i32.add (global.get $rkey) (global.get $rklen)) (local.get $vl)))
          (then (return (local.get $st))))
        (if (global.get $oom) (then (return (call $err_oom))))
        (if (local.tee $st (call $emit (i32.const 0) (global.get $rts) (global.get $rkey) (global.get $rklen)
                                       (i32.load (i32.const 0x880)) (i32.load offset=8 (i32.const 0x880))))
          (then (return (local.get $st))))
        (local.set $p (i32.add (i32.add (global.get $rkey) (global.get $rklen)) (local.get $vl)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $record)))
    (call $finish))

  ;; wstream_on_timer emits "fired event TS ns=NS" (or proc) for each timer,
  ;; with the timer's key and time. A timer of tinc (namespace "inc:S")
  ;; first counts in value state S, and the reply ends with " =N".
  (func (export "wstream_on_timer") (param $op i32) (param $ptr i32) (param $len i32) (result i32)
    (local $st i32) (local $n i32) (local $i i32) (local $p i32) (local $key i32) (local $kl i32) (local $nl i32)
    (if (local.tee $st (call $enter (local.get $op) (i32.const 0x2280) (i32.const 0x2c40))) (then (return (local.get $st))))
    (if (i32.eqz (call $region (local.get $ptr) (local.get $len)))
      (then (return (call $bad_region (i32.const 0x2280) (local.get $ptr) (local.get $len)))))
    (if (local.tee $st (call $check_batch (local.get $ptr) (local.get $len) (i32.const 0x2b80))) (then (return (local.get $st))))
    (local.set $n (i32.load (local.get $ptr)))
    (local.set $p (i32.add (local.get $ptr) (i32.const 4)))
    (block $done
      (loop $timer
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (call $at_record (i32.const 2) (local.get $i) (local.get $n) (local.get $p))
        (local.set $kl (i32.load offset=12 (local.get $p)))
        (local.set $nl (i32.load offset=16 (local.get $p)))
        (local.set $key (i32.add (local.get $p) (i32.const 20)))
        (global.set $oom (i32.const 0))
        (call $buf_reset (i32.const 0x880))
        (call $buf_cstr (i32.const 0x880) (select (i32.const 0x3840) (i32.const 0x3800)
                                                  (i32.eq (i32.load (local.get $p)) (i32.const 1))))
        (call $buf_i64 (i32.const 0x880) (i64.load offset=4 (local.get $p)))
        (call $buf_cstr (i32.const 0x880) (i32.const 0x3880))
        (call $buf_add (i32.const 0x880) (i32.add (local.get $key) (local.get $kl)) (local.get $nl))
        (if (i32.ge_u (local.get $nl) (i32.const 4))
          (then
            (if (i32.eq (i32.load (i32.add (local.get $key) (local.get $kl))) (i32.load (i32.const 0x4010)))
              (then
                ;; The state's name, after "inc:", as token 1 for value_h
                ;; and the messages.
                (i32.store (i32.const 0x908) (i32.add (i32.add (local.get $key) (local.get $kl)) (i32.const 4)))
                (i32.store (i32.const 0x90c) (i32.sub (local.get $nl) (i32.const 4)))
                (if (i32.lt_s (local.tee $st (call $value_h (i32.const 1))) (i32.const 0)) (then (return (local.get $st))))
                (if (local.tee $st (call $count (local.get $st) (local.get $key) (local.get $kl))) (then (return (local.get $st))))
                (call $buf_cstr (i32.const 0x880) (i32.const 0x4020))
                (call $buf_i64 (i32.const 0x880) (global.get $parsed))))))
        (if (global.get $oom) (then (return (call $err_oom))))
        (if (local.tee $st (call $emit (i32.const 0) (i64.load offset=4 (local.get $p)) (local.get $key) (local.get $kl)
                                       (i32.load (i32.const 0x880)) (i32.load offset=8 (i32.const 0x880))))
          (then (return (local.get $st))))
        (local.set $p (i32.add (i32.add (local.get $key) (local.get $kl)) (local.get $nl)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $timer)))
    (call $finish))

;; wstream_migrate (SPEC.md, "State migration"): state "m" of operator
  ;; "conform" becomes "m|VERSION|KEY|NS|VALUE", built in the growable
  ;; buffer at 0x8e0; state "fail" fails with "migration refused".
  (func (export "wstream_migrate")
    (param $op i32) (param $opn i32) (param $st i32) (param $stn i32) (param $ver i32)
    (param $k i32) (param $kn i32) (param $ns i32) (param $nsn i32) (param $v i32) (param $vn i32)
    (result i64)
    (if (i32.eqz (call $eq_cstr (local.get $op) (local.get $opn) (i32.const 0x4030)))
      (then (call $fail (i32.const 0x4080) (i32.const 17)) (return (i64.const -5))))
    (if (i32.eqz (call $eq_cstr (local.get $st) (local.get $stn) (i32.const 0x4040)))
      (then (call $fail (i32.const 0x4080) (i32.const 17)) (return (i64.const -5))))
    (global.set $oom (i32.const 0))
    (call $buf_reset (i32.const 0x8e0))
    (call $buf_cstr (i32.const 0x8e0) (i32.const 0x4060))
    (call $buf_i64 (i32.const 0x8e0) (i64.extend_i32_s (local.get $ver)))
    (call $buf_cstr (i32.const 0x8e0) (i32.const 0x4070))
    (call $buf_add (i32.const 0x8e0) (local.get $k) (local.get $kn))
    (call $buf_cstr (i32.const 0x8e0) (i32.const 0x4070))
    (call $buf_add (i32.const 0x8e0) (local.get $ns) (local.get $nsn))
    (call $buf_cstr (i32.const 0x8e0) (i32.const 0x4070))
    (call $buf_add (i32.const 0x8e0) (local.get $v) (local.get $vn))
    (if (global.get $oom) (then (return (i64.extend_i32_s (call $err_oom)))))
    (i64.or (i64.shl (i64.extend_i32_u (i32.load (i32.const 0x8e0))) (i64.const 32))
            (i64.extend_i32_u (i32.load offset=8 (i32.const 0x8e0)))))

  ;; wstream_close emits "close" with an empty key at time 0.
  (func (export "wstream_close") (param $op i32) (result i32)
    (local $st i32)
    (if (local.tee $st (call $enter (local.get $op) (i32.const 0x22c0) (i32.const 0x2c80))) (then (return (local.get $st))))
    ;; The slot is closed whatever happens: the host never calls it again.
    (i32.store (global.get $cur_slot) (i32.const 0))
    (if (local.tee $st (call $emit (i32.const 0) (i64.const 0) (i32.const 0) (i32.const 0) (i32.const 0x3900) (i32.const 5)))
      (then (return (local.get $st))))
    (call $finish))

  ;; wstream_pre_barrier remembers the id and emits "pre ID" with an empty
  ;; key at time 0.
  (func (export "wstream_pre_barrier") (param $op i32) (param $id i64) (result i32)
    (local $st i32)
    (if (local.tee $st (call $enter (local.get $op) (i32.const 0x2300) (i32.const 0x2300))) (then (return (local.get $st))))
    (i64.store offset=16 (global.get $cur_slot) (local.get $id))
    (i32.store (i32.const 0x860) (i32.load (i32.const 0x38c0)))
    (if (local.tee $st (call $emit (i32.const 0) (i64.const 0) (i32.const 0) (i32.const 0) (i32.const 0x860)
                                   (i32.add (i32.const 4) (call $fmt_i64 (local.get $id) (i32.const 0x864)))))
      (then (return (local.get $st))))
    (call $finish))

  (func (export "wstream_checkpoint_complete") (param $op i32) (param $id i64) (result i32)
    (local $st i32)
    (if (local.tee $st (call $enter (local.get $op) (i32.const 0x2340) (i32.const 0x2340))) (then (return (local.get $st))))
    (i64.store offset=24 (global.get $cur_slot) (local.get $id))
    (i32.const 0))

  (func (export "wstream_checkpoint_aborted") (param $op i32) (param $id i64) (result i32)
    (local $st i32)
    (if (local.tee $st (call $enter (local.get $op) (i32.const 0x2380) (i32.const 0x2380))) (then (return (local.get $st))))
    (i64.store offset=32 (global.get $cur_slot) (local.get $id))
    (i32.const 0))
)
