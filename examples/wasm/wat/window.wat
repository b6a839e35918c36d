;; window is a WebAssembly operator module written by hand in WebAssembly
;; text against the raw ABI (abi/ABI.md), without any SDK: the operator
;; "window" sums the decimal values of each key per event-time tumbling
;; window of config "size" milliseconds and emits one record per key and
;; window when the watermark passes the window's end. Records for windows the
;; watermark already passed go unchanged to the second output, "late". It is
;; the twin of examples/wasm/go/window: same plan, same output bytes, same
;; state (value state "sum", an int64 as 8 bytes little-endian, under
;; namespace = the window end as 8 bytes big-endian). Assemble it with
;;
;;     wat2wasm -o window.wasm examples/wasm/wat/window.wat
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
  (import "wstream" "timer_register" (func $timer_register (param i32 i32 i32 i32 i32 i64) (result i32)))
  (import "wstream" "current_watermark" (func $current_watermark (result i64)))
  (import "wstream" "fail" (func $fail (param i32 i32)))

  ;; ----------------------------------------------------------------- memory
  ;; 0x0400 message buffer (1 KiB)      0x0800 scratch for digits and int64s
  ;; 0x0880 the "start,end,sum" text    0x1000 slot table (64 x 32 bytes)
  ;; 0x2000 constant strings, NUL-ended 0x8000 the JSON reader's nesting stack
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
  (data (i32.const 0x3000) "window\00")
  (data (i32.const 0x3040) "; it has [\"window\"]\00")
  (data (i32.const 0x3080) "registering value state \"sum\"\00")
  (data (i32.const 0x30c0) "get state \"sum\"\00")
  (data (i32.const 0x3100) "put state \"sum\"\00")
  (data (i32.const 0x3140) "delete state \"sum\"\00")
  (data (i32.const 0x3180) "register event time timer at \00")
  (data (i32.const 0x31c0) "value state \"sum\" holds \00")
  (data (i32.const 0x3200) " bytes, not an 8-byte int64\00")
  (data (i32.const 0x3240) "late\00")
  (data (i32.const 0x3280) "the window vertex needs outputs [\"main\",\"late\"]: output \"late\": \00")
  (data (i32.const 0x3300) "config size must be a positive number of milliseconds, got \00")
  (data (i32.const 0x3340) "config \00")
  (data (i32.const 0x3380) ": invalid JSON at offset \00")
  (data (i32.const 0x33c0) ": not a JSON object\00")
  (data (i32.const 0x3400) ": member \"size\" is not an integer that fits in int64\00")
  (data (i32.const 0x3440) ": JSON nested too deeply\00")
  (data (i32.const 0x3480) "value \00")
  (data (i32.const 0x34c0) " is not a decimal integer\00")
  (data (i32.const 0x3500) " overflows int64\00")
  (data (i32.const 0x3540) "timer namespace has \00")
  (data (i32.const 0x3580) " bytes, want an 8-byte window end\00")
  (data (i32.const 0x35c0) "true\00")
  (data (i32.const 0x3600) "false\00")
  (data (i32.const 0x3640) "null\00")
  (data (i32.const 0x3680) "size\00")
  (data (i32.const 0x36c0) "sum\00")
  ;; The job plan, byte for byte the one of examples/wasm/go/window.
  (data (i32.const 0x3800)
    "{\"name\":\"window\",\"maxParallelism\":128,\"parallelism\":2,\n"
    " \"vertices\":[\n"
    "  {\"id\":\"source\",\"kind\":\"source\",\"connector\":\"file\",\"parallelism\":1,\n"
    "   \"config\":{\"path\":\"input.tsv\",\"format\":\"tsv\",\"watermarkDelay\":2000}},\n"
    "  {\"id\":\"window\",\"kind\":\"operator\",\"operator\":\"window\",\"config\":{\"size\":1000},\"outputs\":[\"main\",\"late\"]},\n"
    "  {\"id\":\"sink\",\"kind\":\"sink\",\"connector\":\"stdout\",\"parallelism\":1},\n"
    "  {\"id\":\"late\",\"kind\":\"sink\",\"connector\":\"stdout\",\"parallelism\":1}],\n"
    " \"edges\":[\n"
    "  {\"from\":\"source\",\"to\":\"window\",\"partition\":\"key\"},\n"
    "  {\"from\":\"window\",\"to\":\"sink\",\"partition\":\"rebalance\"},\n"
    "  {\"from\":\"window\",\"to\":\"late\",\"partition\":\"rebalance\",\"output\":\"late\"}]}\00")

  ;; The window size of the operator being opened, and the parsed integer of
  ;; parse_int.
  (global $size (mut i64) (i64.const 1000))
  (global $parsed (mut i64) (i64.const 0))

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

  ;; bswap64 reverses the bytes of v: the window end is stored big-endian
  ;; so that the namespaces of one key sort by time.
  (func $bswap64 (param $v i64) (result i64)
    (local $r i64) (local $i i32)
    (loop $byte
      (local.set $r (i64.or (i64.shl (local.get $r) (i64.const 8)) (i64.and (local.get $v) (i64.const 0xff))))
      (local.set $v (i64.shr_u (local.get $v) (i64.const 8)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $byte (i32.lt_u (local.get $i) (i32.const 8))))
    (local.get $r))

  ;; ---- JSON: the configuration {"size":N}, read as Go's encoding/json
  ;; reads it into struct{ Size int64 `json:"size"` }: the whole text must
  ;; be valid JSON; an object sets Size from its member "size" (the name
  ;; compared case-insensitively, escapes decoded; the last one wins) when
  ;; its value is an integer literal that fits in int64, leaves it for null,
  ;; and refuses anything else; null leaves it; other values are refused.
  ;; Other members are checked for syntax and ignored.

  (global $jp (mut i32) (i32.const 0))    ;; the next byte
  (global $jend (mut i32) (i32.const 0))

  (func $j_peek (result i32)
    (if (result i32) (i32.lt_u (global.get $jp) (global.get $jend))
      (then (i32.load8_u (global.get $jp)))
      (else (i32.const -1))))

  (func $j_ws
    (local $c i32)
    (block $done
      (loop $next
        (local.set $c (call $j_peek))
        (br_if $done (i32.eqz (i32.or (i32.or (i32.eq (local.get $c) (i32.const 32)) (i32.eq (local.get $c) (i32.const 9)))
                                      (i32.or (i32.eq (local.get $c) (i32.const 10)) (i32.eq (local.get $c) (i32.const 13))))))
        (global.set $jp (i32.add (global.get $jp) (i32.const 1)))
        (br $next))))

  (func $is_hex (param $c i32) (result i32)
    (i32.or (i32.le_u (i32.sub (local.get $c) (i32.const 48)) (i32.const 9))
            (i32.le_u (i32.sub (i32.or (local.get $c) (i32.const 0x20)) (i32.const 97)) (i32.const 5))))

  (func $hex_val (param $c i32) (result i32)
    (select (i32.sub (local.get $c) (i32.const 48))
            (i32.sub (i32.or (local.get $c) (i32.const 0x20)) (i32.const 87))
            (i32.le_u (i32.sub (local.get $c) (i32.const 48)) (i32.const 9))))

  ;; j_string skips a string at $jp (its opening quote); 0 when malformed.
  ;; Any byte from 0x20 up is allowed inside, as Go allows invalid UTF-8.
  (func $j_string (result i32)
    (local $c i32) (local $i i32)
    (global.set $jp (i32.add (global.get $jp) (i32.const 1)))
    (loop $next
      (local.set $c (call $j_peek))
      (if (i32.lt_s (local.get $c) (i32.const 32)) (then (return (i32.const 0))))
      (global.set $jp (i32.add (global.get $jp) (i32.const 1)))
      (if (i32.eq (local.get $c) (i32.const 34)) (then (return (i32.const 1))))
      (if (i32.eq (local.get $c) (i32.const 92))
        (then
          (local.set $c (call $j_peek))
          (global.set $jp (i32.add (global.get $jp) (i32.const 1)))
          (if (i32.eq (local.get $c) (i32.const 117))     ;; \uXXXX
            (then
              (local.set $i (i32.const 0))
              (loop $hex
                (if (i32.eqz (call $is_hex (call $j_peek))) (then (return (i32.const 0))))
                (global.set $jp (i32.add (global.get $jp) (i32.const 1)))
                (local.set $i (i32.add (local.get $i) (i32.const 1)))
                (br_if $hex (i32.lt_u (local.get $i) (i32.const 4)))))
            (else
              ;; " \ / b f n r t
              (if (i32.eqz (i32.or (i32.or (i32.or (i32.eq (local.get $c) (i32.const 34)) (i32.eq (local.get $c) (i32.const 92)))
                                           (i32.or (i32.eq (local.get $c) (i32.const 47)) (i32.eq (local.get $c) (i32.const 98))))
                                   (i32.or (i32.or (i32.eq (local.get $c) (i32.const 102)) (i32.eq (local.get $c) (i32.const 110)))
                                           (i32.or (i32.eq (local.get $c) (i32.const 114)) (i32.eq (local.get $c) (i32.const 116))))))
                (then (return (i32.const 0))))))))
      (br $next))
    (i32.const 0))

  ;; j_digits skips at least one digit; 0 when there is none.
  (func $j_digits (result i32)
    (if (i32.gt_u (i32.sub (call $j_peek) (i32.const 48)) (i32.const 9)) (then (return (i32.const 0))))
    (loop $next
      (global.set $jp (i32.add (global.get $jp) (i32.const 1)))
      (br_if $next (i32.le_u (i32.sub (call $j_peek) (i32.const 48)) (i32.const 9))))
    (i32.const 1))

  ;; j_number skips a number: -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?
  ;; It returns 0 when malformed, 1 for an integer literal, 2 for one with a
  ;; fraction or an exponent.
  (func $j_number (result i32)
    (local $kind i32) (local $c i32)
    (local.set $kind (i32.const 1))
    (if (i32.eq (call $j_peek) (i32.const 45)) (then (global.set $jp (i32.add (global.get $jp) (i32.const 1)))))
    (if (i32.eq (call $j_peek) (i32.const 48))
      (then (global.set $jp (i32.add (global.get $jp) (i32.const 1))))
      (else (if (i32.eqz (call $j_digits)) (then (return (i32.const 0))))))
    (if (i32.eq (call $j_peek) (i32.const 46))
      (then
        (global.set $jp (i32.add (global.get $jp) (i32.const 1)))
        (if (i32.eqz (call $j_digits)) (then (return (i32.const 0))))
        (local.set $kind (i32.const 2))))
    (local.set $c (call $j_peek))
    (if (i32.or (i32.eq (local.get $c) (i32.const 101)) (i32.eq (local.get $c) (i32.const 69)))
      (then
        (global.set $jp (i32.add (global.get $jp) (i32.const 1)))
        (local.set $c (call $j_peek))
        (if (i32.or (i32.eq (local.get $c) (i32.const 43)) (i32.eq (local.get $c) (i32.const 45)))
          (then (global.set $jp (i32.add (global.get $jp) (i32.const 1)))))
        (if (i32.eqz (call $j_digits)) (then (return (i32.const 0))))
        (local.set $kind (i32.const 2))))
    (local.get $kind))

  ;; j_literal skips the literal s (a C string); 0 when it is not there.
  (func $j_literal (param $s i32) (result i32)
    (local $c i32)
    (loop $next
      (local.set $c (i32.load8_u (local.get $s)))
      (if (i32.eqz (local.get $c)) (then (return (i32.const 1))))
      (if (i32.ne (call $j_peek) (local.get $c)) (then (return (i32.const 0))))
      (global.set $jp (i32.add (global.get $jp) (i32.const 1)))
      (local.set $s (i32.add (local.get $s) (i32.const 1)))
      (br $next))
    (i32.const 0))

  ;; j_key_is_size reports whether the string [s, e) (between its quotes,
  ;; already checked) decodes to "size", ignoring ASCII case.
  (func $j_key_is_size (param $s i32) (param $e i32) (result i32)
    (local $k i32) (local $c i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $s) (local.get $e)))
        (local.set $c (i32.load8_u (local.get $s)))
        (local.set $s (i32.add (local.get $s) (i32.const 1)))
        (if (i32.eq (local.get $c) (i32.const 92))
          (then
            (local.set $c (i32.load8_u (local.get $s)))
            (local.set $s (i32.add (local.get $s) (i32.const 1)))
            (if (i32.eq (local.get $c) (i32.const 117))
              (then
                (local.set $c (i32.or (i32.or (i32.shl (call $hex_val (i32.load8_u (local.get $s))) (i32.const 12))
                                              (i32.shl (call $hex_val (i32.load8_u offset=1 (local.get $s))) (i32.const 8)))
                                      (i32.or (i32.shl (call $hex_val (i32.load8_u offset=2 (local.get $s))) (i32.const 4))
                                              (call $hex_val (i32.load8_u offset=3 (local.get $s))))))
                (local.set $s (i32.add (local.get $s) (i32.const 4)))))))
        ;; "size" is s i z e; an escape like \n never matches.
        (if (i32.ge_u (local.get $k) (i32.const 4)) (then (return (i32.const 0))))
        (if (i32.ne (select (i32.or (local.get $c) (i32.const 0x20)) (local.get $c)
                            (i32.le_u (i32.sub (local.get $c) (i32.const 65)) (i32.const 25)))
                    (i32.load8_u (i32.add (i32.const 0x3680) (local.get $k))))
          (then (return (i32.const 0))))
        (local.set $k (i32.add (local.get $k) (i32.const 1)))
        (br $next)))
    (i32.eq (local.get $k) (i32.const 4)))

  ;; read_config reads the configuration [p, p+n) into $size (see above);
  ;; an empty configuration leaves the default. It returns 0, or
  ;; GUEST_ERROR after failing the call. The nesting stack at 0x8000 holds
  ;; one byte per open container ({ or [), at most 10000 like Go's decoder.
  (func $read_config (param $p i32) (param $n i32) (result i32)
    (local $state i32) (local $depth i32) (local $c i32) (local $is_size i32) (local $ks i32) (local $k i32)
    (local $start i32) (local $why i32)
    (global.set $size (i64.const 1000))
    (if (i32.eqz (local.get $n)) (then (return (i32.const 0))))
    (global.set $jp (local.get $p))
    (global.set $jend (i32.add (local.get $p) (local.get $n)))
    ;; state 0: a value comes; 1: a member name comes; 2: a value ended.
    ;; why is the message when the text is refused: 0x3380 a syntax error,
    ;; 0x33c0 not an object, 0x3400 a bad size, 0x3440 too deep.
    (local.set $why (i32.const 0x3380))
    (block $refuse
      (loop $machine
        (if (i32.eqz (local.get $state))
          (then
            (call $j_ws)
            (local.set $c (call $j_peek))
            (local.set $start (global.get $jp))
            ;; The whole text must be an object, or null.
            (if (i32.and (i32.eqz (local.get $depth))
                         (i32.and (i32.ne (local.get $c) (i32.const 123)) (i32.ne (local.get $c) (i32.const 110))))
              (then (local.set $why (i32.const 0x33c0)) (br $refuse)))
            (if (i32.or (i32.eq (local.get $c) (i32.const 123)) (i32.eq (local.get $c) (i32.const 91)))
              (then
                (if (local.get $is_size) (then (local.set $why (i32.const 0x3400)) (br $refuse)))
                (if (i32.ge_u (local.get $depth) (i32.const 10000)) (then (local.set $why (i32.const 0x3440)) (br $refuse)))
                (i32.store8 (i32.add (i32.const 0x8000) (local.get $depth)) (local.get $c))
                (local.set $depth (i32.add (local.get $depth) (i32.const 1)))
                (global.set $jp (i32.add (global.get $jp) (i32.const 1)))
                (call $j_ws)
                ;; An empty container ends at once; else a member name or
                ;; an element comes.
                (if (i32.eq (call $j_peek) (i32.add (local.get $c) (i32.const 2)))
                  (then
                    (global.set $jp (i32.add (global.get $jp) (i32.const 1)))
                    (local.set $depth (i32.sub (local.get $depth) (i32.const 1)))
                    (local.set $state (i32.const 2)))
                  (else (local.set $state (i32.eq (local.get $c) (i32.const 123)))))
                (br $machine)))
            (if (i32.eq (local.get $c) (i32.const 34))
              (then
                (br_if $refuse (i32.eqz (call $j_string)))
                (if (local.get $is_size) (then (local.set $why (i32.const 0x3400)) (br $refuse)))))
            (if (i32.or (i32.eq (local.get $c) (i32.const 45)) (i32.le_u (i32.sub (local.get $c) (i32.const 48)) (i32.const 9)))
              (then
                (local.set $k (call $j_number))
                (br_if $refuse (i32.eqz (local.get $k)))
                (if (local.get $is_size)
                  (then
                    (if (i32.or (i32.eq (local.get $k) (i32.const 2))
                                (call $parse_int (local.get $start) (i32.sub (global.get $jp) (local.get $start))))
                      (then (local.set $why (i32.const 0x3400)) (br $refuse)))
                    (global.set $size (global.get $parsed))))))
            (if (i32.eq (local.get $c) (i32.const 116))
              (then
                (br_if $refuse (i32.eqz (call $j_literal (i32.const 0x35c0))))
                (if (local.get $is_size) (then (local.set $why (i32.const 0x3400)) (br $refuse)))))
            (if (i32.eq (local.get $c) (i32.const 102))
              (then
                (br_if $refuse (i32.eqz (call $j_literal (i32.const 0x3600))))
                (if (local.get $is_size) (then (local.set $why (i32.const 0x3400)) (br $refuse)))))
            ;; null leaves a member as it is.
            (if (i32.eq (local.get $c) (i32.const 110))
              (then (br_if $refuse (i32.eqz (call $j_literal (i32.const 0x3640))))))
            ;; Nothing moved: no value starts here.
            (br_if $refuse (i32.eq (global.get $jp) (local.get $start)))
            (local.set $is_size (i32.const 0))
            (local.set $state (i32.const 2))
            (br $machine)))
        (if (i32.eq (local.get $state) (i32.const 1))
          (then
            (call $j_ws)
            (br_if $refuse (i32.ne (call $j_peek) (i32.const 34)))
            (local.set $ks (global.get $jp))
            (br_if $refuse (i32.eqz (call $j_string)))
            (local.set $is_size (i32.and (i32.eq (local.get $depth) (i32.const 1))
              (call $j_key_is_size (i32.add (local.get $ks) (i32.const 1)) (i32.sub (global.get $jp) (i32.const 1)))))
            (call $j_ws)
            (br_if $refuse (i32.ne (call $j_peek) (i32.const 58)))
            (global.set $jp (i32.add (global.get $jp) (i32.const 1)))
            (local.set $state (i32.const 0))
            (br $machine)))
        ;; state 2: after a value
        (call $j_ws)
        (if (i32.eqz (local.get $depth))
          (then
            (br_if $refuse (i32.ne (global.get $jp) (global.get $jend)))
            (return (i32.const 0))))
        (local.set $c (call $j_peek))
        ;; { is 123 and } 125, [ is 91 and ] 93: the closer is the opener + 2.
        (local.set $k (i32.load8_u (i32.add (i32.const 0x8000) (i32.sub (local.get $depth) (i32.const 1)))))
        (if (i32.eq (local.get $c) (i32.const 44))
          (then
            (global.set $jp (i32.add (global.get $jp) (i32.const 1)))
            (local.set $state (i32.eq (local.get $k) (i32.const 123)))
            (br $machine)))
        (br_if $refuse (i32.ne (local.get $c) (i32.add (local.get $k) (i32.const 2))))
        (global.set $jp (i32.add (global.get $jp) (i32.const 1)))
        (local.set $depth (i32.sub (local.get $depth) (i32.const 1)))
        (br $machine)))
    (call $err_begin)
    (call $msg_cstr (i32.const 0x3340))
    (call $msg_quote (local.get $p) (local.get $n))
    (call $msg_cstr (local.get $why))
    (if (i32.eq (local.get $why) (i32.const 0x3380))
      (then (call $msg_i64 (i64.extend_i32_u (i32.sub (global.get $jp) (local.get $p))))))
    (call $err_end))

  ;; ---- slots: 64 entries of 32 bytes at 0x1000
  ;;   +0 kind (0 closed, 1 window)  +4 handle of "sum"  +8 index of output
  ;;   "late"  +16 the window size (i64)

  (func $slot (param $op i32) (result i32)
    (i32.add (i32.const 0x1000) (i32.shl (local.get $op) (i32.const 5))))

  ;; kind_of returns the kind of the operator open in slot op, 0 for none.
  (func $kind_of (param $op i32) (result i32)
    (if (i32.ge_u (local.get $op) (i32.const 64)) (then (return (i32.const 0))))
    (i32.load (call $slot (local.get $op))))

  ;; ================================================================ exports

  (func (export "wstream_abi_version") (result i32) (i32.const 1))

  ;; wstream_plan returns (ptr << 32) | len of the plan JSON.
  (func (export "wstream_plan") (result i64)
    (i64.or (i64.shl (i64.const 0x3800) (i64.const 32))
            (i64.extend_i32_u (call $strlen (i32.const 0x3800)))))

  (func (export "wstream_open") (param $op i32) (param $np i32) (param $nl i32) (param $cp i32) (param $cl i32) (result i32)
    (local $st i32) (local $late i32) (local $h i32)
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
        (call $msg_quote (i32.const 0x3000) (i32.const 6))
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
    (call $begin (i32.const 0x3000) (i32.const 0x2bc0))
    (local.set $st (call $read_config (local.get $cp) (local.get $cl)))
    (if (local.get $st) (then (return (local.get $st))))
    (if (i64.le_s (global.get $size) (i64.const 0))
      (then
        (call $err_begin)
        (call $msg_cstr (i32.const 0x3300))
        (call $msg_i64 (global.get $size))
        (return (call $err_end))))
    ;; Look the output up once, here: its index goes into every late record.
    (local.set $late (call $output_index (i32.const 0x3240) (i32.const 4)))
    (if (i32.lt_s (local.get $late) (i32.const 0))
      (then
        (call $err_begin)
        (call $msg_cstr (i32.const 0x3280))
        (call $msg_status (local.get $late))
        (return (call $err_end))))
    ;; Value state "sum" (kind 1); the slot stays closed if this fails.
    (local.set $h (call $state_register (i32.const 0x36c0) (i32.const 3) (i32.const 1)))
    (if (i32.lt_s (local.get $h) (i32.const 0))
      (then (return (call $err_host (i32.const 0x3080) (local.get $h)))))
    (i32.store offset=4 (call $slot (local.get $op)) (local.get $h))
    (i32.store offset=8 (call $slot (local.get $op)) (local.get $late))
    (i64.store offset=16 (call $slot (local.get $op)) (global.get $size))
    (i32.store (call $slot (local.get $op)) (i32.const 1))
    (i32.const 0))

  (func (export "wstream_process") (param $op i32) (param $ptr i32) (param $len i32) (result i32)
    (local $st i32)
    (if (i32.eqz (call $kind_of (local.get $op))) (then (return (call $no_slot (i32.const 0x2240) (local.get $op)))))
    (if (i32.eqz (call $region (local.get $ptr) (local.get $len)))
      (then (return (call $bad_region (i32.const 0x2240) (local.get $ptr) (local.get $len)))))
    (call $begin (i32.const 0x3000) (i32.const 0x2c00))
    (local.set $st (call $check_batch (local.get $ptr) (local.get $len) (i32.const 0x2b40)))
    (if (local.get $st) (then (return (local.get $st))))
    (local.set $st (call $window_process (call $slot (local.get $op)) (local.get $ptr)))
    (if (local.get $st) (then (return (local.get $st))))
    (call $finish))

  (func (export "wstream_on_timer") (param $op i32) (param $ptr i32) (param $len i32) (result i32)
    (local $st i32)
    (if (i32.eqz (call $kind_of (local.get $op))) (then (return (call $no_slot (i32.const 0x2280) (local.get $op)))))
    (if (i32.eqz (call $region (local.get $ptr) (local.get $len)))
      (then (return (call $bad_region (i32.const 0x2280) (local.get $ptr) (local.get $len)))))
    (call $begin (i32.const 0x3000) (i32.const 0x2c40))
    (local.set $st (call $check_batch (local.get $ptr) (local.get $len) (i32.const 0x2b80)))
    (if (local.get $st) (then (return (local.get $st))))
    (local.set $st (call $window_on_timer (call $slot (local.get $op)) (local.get $ptr)))
    (if (local.get $st) (then (return (local.get $st))))
    (call $finish))

  (func (export "wstream_close") (param $op i32) (result i32)
    (if (i32.eqz (call $kind_of (local.get $op))) (then (return (call $no_slot (i32.const 0x22c0) (local.get $op)))))
    ;; The slot is closed whatever happens: the host never calls it again.
    (i32.store (call $slot (local.get $op)) (i32.const 0))
    (call $begin (i32.const 0x3000) (i32.const 0x2c80))
    (call $finish))

  ;; The checkpoint hooks have nothing to do: the sums are in keyed state,
  ;; which the host checkpoints, and no output is buffered across calls.
  (func (export "wstream_pre_barrier") (param $op i32) (param $id i64) (result i32)
    (if (i32.eqz (call $kind_of (local.get $op))) (then (return (call $no_slot (i32.const 0x2300) (local.get $op)))))
    (i32.const 0))
  (func (export "wstream_checkpoint_complete") (param $op i32) (param $id i64) (result i32)
    (if (i32.eqz (call $kind_of (local.get $op))) (then (return (call $no_slot (i32.const 0x2340) (local.get $op)))))
    (i32.const 0))
  (func (export "wstream_checkpoint_aborted") (param $op i32) (param $id i64) (result i32)
    (if (i32.eqz (call $kind_of (local.get $op))) (then (return (call $no_slot (i32.const 0x2380) (local.get $op)))))
    (i32.const 0))

  ;; ============================================================== operator

  ;; get_sum reads the sum of key in the window whose namespace is at ns
  ;; into the 8 bytes at 0x820. It returns 1 when found, 0 when absent
  ;; (0x820 then holds 0), or GUEST_ERROR after failing the call.
  (func $get_sum (param $h i32) (param $key i32) (param $kl i32) (param $ns i32) (result i32)
    (local $st i32)
    (i64.store (i32.const 0x820) (i64.const 0))
    (local.set $st (call $state_get (local.get $h) (local.get $key) (local.get $kl)
                                    (local.get $ns) (i32.const 8) (i32.const 0x820) (i32.const 8)))
    (if (i32.eq (local.get $st) (i32.const -1)) (then (return (i32.const 0))))
    (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_host (i32.const 0x30c0) (local.get $st)))))
    (if (i32.ne (local.get $st) (i32.const 8))
      (then
        (call $err_begin)
        (call $msg_cstr (i32.const 0x31c0))
        (call $msg_i64 (i64.extend_i32_u (local.get $st)))
        (call $msg_cstr (i32.const 0x3200))
        (return (call $err_end))))
    (i32.const 1))

  ;; window_process adds each record's value to the sum of its key and
  ;; window [start, end), start = ts rounded down (towards minus infinity) to
  ;; a multiple of size, and sets a timer at end-1. A record whose window
  ;; the watermark already passed (end-1 <= watermark) goes unchanged to
  ;; output "late".
  (func $window_process (param $s i32) (param $b i32) (result i32)
    (local $size i64) (local $wm i64) (local $n i32) (local $i i32) (local $p i32) (local $ts i64) (local $key i32)
    (local $kl i32) (local $val i32) (local $vl i32) (local $rem i64) (local $end i64) (local $st i32)
    (local.set $size (i64.load offset=16 (local.get $s)))
    (local.set $wm (call $current_watermark))
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
        (local.set $val (i32.add (local.get $key) (local.get $kl)))
        (local.set $p (i32.add (local.get $val) (local.get $vl)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        ;; The window's end; bounds beyond the int64 range are clamped.
        (local.set $rem (i64.rem_s (local.get $ts) (local.get $size)))
        (if (i64.lt_s (local.get $rem) (i64.const 0))
          (then (local.set $end (i64.sub (local.get $ts) (local.get $rem))))
          (else
            (local.set $end (i64.sub (local.get $ts) (local.get $rem)))
            (if (i64.gt_s (local.get $end) (i64.sub (i64.const 0x7fffffffffffffff) (local.get $size)))
              (then (local.set $end (i64.const 0x7fffffffffffffff)))
              (else (local.set $end (i64.add (local.get $end) (local.get $size)))))))
        (if (i64.le_s (i64.sub (local.get $end) (i64.const 1)) (local.get $wm))
          (then
            (local.set $st (call $emit (i32.load offset=8 (local.get $s)) (local.get $ts)
                                       (local.get $key) (local.get $kl) (local.get $val) (local.get $vl)))
            (if (local.get $st) (then (return (local.get $st))))
            (br $record)))
        (local.set $st (call $parse_int (local.get $val) (local.get $vl)))
        (if (local.get $st)
          (then
            (call $err_begin)
            (call $msg_cstr (i32.const 0x3480))
            (call $msg_quote (local.get $val) (local.get $vl))
            (call $msg_cstr (select (i32.const 0x34c0) (i32.const 0x3500) (i32.eq (local.get $st) (i32.const 1))))
            (return (call $err_end))))
        (i64.store (i32.const 0x828) (call $bswap64 (local.get $end)))
        (local.set $st (call $get_sum (i32.load offset=4 (local.get $s)) (local.get $key) (local.get $kl) (i32.const 0x828)))
        (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (local.get $st))))
        (i64.store (i32.const 0x820) (i64.add (i64.load (i32.const 0x820)) (global.get $parsed)))
        (local.set $st (call $state_put (i32.load offset=4 (local.get $s)) (local.get $key) (local.get $kl)
                                        (i32.const 0x828) (i32.const 8) (i32.const 0x820) (i32.const 8)))
        (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_host (i32.const 0x3100) (local.get $st)))))
        (local.set $st (call $timer_register (i32.const 0) (local.get $key) (local.get $kl) (i32.const 0x828) (i32.const 8)
                                             (i64.sub (local.get $end) (i64.const 1))))
        (if (i32.lt_s (local.get $st) (i32.const 0))
          (then
            (call $err_begin)
            (call $msg_cstr (i32.const 0x3180))
            (call $msg_i64 (i64.sub (local.get $end) (i64.const 1)))
            (call $msg_cstr (i32.const 0x2640))
            (call $msg_status (local.get $st))
            (return (call $err_end))))
        (br $record)))
    (i32.const 0))

  ;; window_on_timer emits key, "start,end,sum" at the timer's time for each
  ;; fired window and deletes its sum.
  (func $window_on_timer (param $s i32) (param $b i32) (result i32)
    (local $n i32) (local $i i32) (local $p i32) (local $key i32) (local $kl i32) (local $ns i32) (local $nl i32)
    (local $end i64) (local $len i32) (local $st i32)
    (local.set $n (i32.load (local.get $b)))
    (local.set $p (i32.add (local.get $b) (i32.const 4)))
    (block $done
      (loop $timer
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (call $at_record (i32.const 2) (local.get $i) (local.get $n) (local.get $p))
        (local.set $kl (i32.load offset=12 (local.get $p)))
        (local.set $nl (i32.load offset=16 (local.get $p)))
        (local.set $key (i32.add (local.get $p) (i32.const 20)))
        (local.set $ns (i32.add (local.get $key) (local.get $kl)))
        (if (i32.ne (local.get $nl) (i32.const 8))
          (then
            (call $err_begin)
            (call $msg_cstr (i32.const 0x3540))
            (call $msg_i64 (i64.extend_i32_u (local.get $nl)))
            (call $msg_cstr (i32.const 0x3580))
            (return (call $err_end))))
        (local.set $end (call $bswap64 (i64.load (local.get $ns))))
        (local.set $st (call $get_sum (i32.load offset=4 (local.get $s)) (local.get $key) (local.get $kl) (local.get $ns)))
        (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (local.get $st))))
        (if (local.get $st)
          (then
            (local.set $len (call $fmt_i64 (i64.sub (local.get $end) (i64.load offset=16 (local.get $s))) (i32.const 0x880)))
            (i32.store8 (i32.add (i32.const 0x880) (local.get $len)) (i32.const 44))
            (local.set $len (i32.add (local.get $len) (i32.const 1)))
            (local.set $len (i32.add (local.get $len) (call $fmt_i64 (local.get $end) (i32.add (i32.const 0x880) (local.get $len)))))
            (i32.store8 (i32.add (i32.const 0x880) (local.get $len)) (i32.const 44))
            (local.set $len (i32.add (local.get $len) (i32.const 1)))
            (local.set $len (i32.add (local.get $len) (call $fmt_i64 (i64.load (i32.const 0x820)) (i32.add (i32.const 0x880) (local.get $len)))))
            (local.set $st (call $emit (i32.const 0) (i64.load offset=4 (local.get $p)) (local.get $key) (local.get $kl)
                                       (i32.const 0x880) (local.get $len)))
            (if (local.get $st) (then (return (local.get $st))))
            (local.set $st (call $state_delete (i32.load offset=4 (local.get $s)) (local.get $key) (local.get $kl)
                                               (local.get $ns) (i32.const 8)))
            (if (i32.lt_s (local.get $st) (i32.const 0)) (then (return (call $err_host (i32.const 0x3140) (local.get $st)))))))
        (local.set $p (i32.add (local.get $ns) (local.get $nl)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $timer)))
    (i32.const 0))
)
