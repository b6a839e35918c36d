;; timer-flood-key: wstream_process registers event-time timers at 5000 for
;; ever, all for key "k", each with a new 4-byte namespace i, ignoring every
;; status. Pending timers are state, on disk.
;;
;; Attack: a timer flood on one key.
;; Answer: each registration is a state write of the call, and the
;; MaxStateBytesPerCall quota stops it ("wrote … bytes of state in one call,
;; over the quota of … of state writes per call
;; (--max-state-bytes-per-call)"), naming the operator; with the MaxTimersPerKey
;; count quota set, that quota stops it first.
(module
  (import "wstream" "timer_register" (func $timer_register (param i32 i32 i32 i32 i32 i64) (result i32)))
  (memory (export "memory") 2)

  ;; Memory: 0x1000 the operator name (NUL-ended), 0x1100 other text,
  ;; 0x2000 the plan JSON (NUL-ended), 0x10000 the argument arena.
  (data (i32.const 0x1000) "flood\00")
  (data (i32.const 0x1100) "k")
  (data (i32.const 0x2000)
    "{\"name\":\"hostile-timer-flood-key\",\"parallelism\":1,"
    "\"vertices\":["
    "{\"id\":\"source\",\"kind\":\"source\",\"connector\":\"gen\",\"config\":{\"count\":1,\"keys\":1}},"
    "{\"id\":\"op\",\"kind\":\"operator\",\"operator\":\"flood\"},"
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

  ;; The counter i is stored at 0 before each registration.
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (local $i i32)
    (loop $l
      (i32.store (i32.const 0) (local.get $i))
      (drop (call $timer_register (i32.const 0) (i32.const 0x1100) (i32.const 1) (i32.const 0) (i32.const 4) (i64.const 5000)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l))
    (i32.const 0))

  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32) (i32.const 0))

  (func (export "wstream_close") (param i32) (result i32) (i32.const 0))
)
