;; timer-cascade-processing: the processing-time twin of timer-cascade.wat.
;; wstream_process registers a processing-time timer due now for the record's
;; key; wstream_on_timer registers it again at the current wall clock every time
;; it fires. The source never ends (gen without a count, 20 records/s), so only
;; the cascade can end the job.
;;
;; Attack: a timer cascade in processing time, which fires between input
;; batches.
;; Answer: the MaxCascadedTimers quota fails the job, naming the operator and
;; processing time.
(module
  (import "wstream" "timer_register" (func $timer_register (param i32 i32 i32 i32 i32 i64) (result i32)))
  (import "wstream" "processing_time" (func $processing_time (result i64)))
  (import "wstream" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 2)

  ;; Memory: 0x1000 the operator name (NUL-ended), 0x1100 other text,
  ;; 0x2000 the plan JSON (NUL-ended), 0x10000 the argument arena.
  (data (i32.const 0x1000) "cascade\00")
  (data (i32.const 0x1100) "cascading")
  (data (i32.const 0x2000)
    "{\"name\":\"hostile-timer-cascade-processing\",\"parallelism\":1,"
    "\"vertices\":["
    "{\"id\":\"source\",\"kind\":\"source\",\"connector\":\"gen\",\"config\":{\"keys\":1,\"rate\":20}},"
    "{\"id\":\"op\",\"kind\":\"operator\",\"operator\":\"cascade\"},"
    "{\"id\":\"sink\",\"kind\":\"sink\",\"connector\":\"discard\"}],"
    "\"edges\":["
    "{\"from\":\"source\",\"to\":\"op\",\"partition\":\"key\"},"
    "{\"from\":\"op\",\"to\":\"sink\"}]}\00")

  (func $strlen (param $p i32) (result i32)
    (local $i i32)
    (block $done
      (loop $l
        (br_if $done (i32.eqz (i32.load8_u (i32.add (local.get $p) (local.get $i)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l)))
    (local.get $i))

  ;; $is_op says whether the name [p, p+n) is the operator name at 0x1000.
  (func $is_op (param $p i32) (param $n i32) (result i32)
    (local $i i32)
    (if (i32.ne (local.get $n) (call $strlen (i32.const 0x1000)))
      (then (return (i32.const 0))))
    (block $done
      (loop $l
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (if (i32.ne (i32.load8_u (i32.add (local.get $p) (local.get $i)))
                    (i32.load8_u (i32.add (i32.const 0x1000) (local.get $i))))
          (then (return (i32.const 0))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l)))
    (i32.const 1))

  (func (export "wstream_abi_version") (result i32) (i32.const 1))

  ;; wstream_plan returns (ptr << 32) | len of the plan JSON.
  (func (export "wstream_plan") (result i64)
    (i64.or (i64.shl (i64.const 0x2000) (i64.const 32))
            (i64.extend_i32_u (call $strlen (i32.const 0x2000)))))

  ;; One argument arena at 0x10000, memory grown to fit it.
  (func (export "wstream_alloc") (param $n i32) (result i32)
    (local $need i32)
    (local.set $need (i32.shr_u (i32.add (local.get $n) (i32.const 131071)) (i32.const 16)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then (if (i32.eq (memory.grow (i32.sub (local.get $need) (memory.size))) (i32.const -1))
        (then (return (i32.const 0))))))
    (i32.const 0x10000))

  (func (export "wstream_open") (param $op i32) (param $np i32) (param $nl i32) (param i32 i32) (result i32)
    (if (result i32) (call $is_op (local.get $np) (local.get $nl))
      (then (i32.const 0))
      (else (i32.const -10))))

  (func (export "wstream_process") (param $op i32) (param $b i32) (param $n i32) (result i32)
    (if (i32.eqz (i32.load (local.get $b)))
      (then (return (i32.const 0))))
    (call $timer_register (i32.const 1)
      (i32.add (local.get $b) (i32.const 24)) (i32.load (i32.add (local.get $b) (i32.const 16)))
      (i32.const 0) (i32.const 0) (call $processing_time)))

  ;; On every timer, register the timer it fired again: for processing time
  ;; at the current wall clock, for event time at its own time, both already
  ;; due. The timer's key is at b+24 (length at b+16), its domain at b+4.
  ;; The first call logs "cascading", so that a test can tell the cascade
  ;; has begun.
  (global $logged (mut i32) (i32.const 0))
  (func (export "wstream_on_timer") (param $op i32) (param $b i32) (param $n i32) (result i32)
    (local $domain i32) (local $ts i64)
    (if (i32.eqz (global.get $logged))
      (then
        (global.set $logged (i32.const 1))
        (call $log (i32.const 1) (i32.const 0x1100) (i32.const 9))))
    (local.set $domain (i32.load (i32.add (local.get $b) (i32.const 4))))
    (local.set $ts (i64.load (i32.add (local.get $b) (i32.const 8))))
    (if (i32.eq (local.get $domain) (i32.const 1))
      (then (local.set $ts (call $processing_time))))
    (call $timer_register (local.get $domain)
      (i32.add (local.get $b) (i32.const 24)) (i32.load (i32.add (local.get $b) (i32.const 16)))
      (i32.const 0) (i32.const 0) (local.get $ts)))

  (func (export "wstream_close") (param i32) (result i32) (i32.const 0))
)
