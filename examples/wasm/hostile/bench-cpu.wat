;; bench-cpu: every wstream_process call spins for about 200 ms of wall clock
;; in pure integer arithmetic (an xorshift chain, looking at the clock once
;; per 100,000 steps), then returns without emitting anything. The source
;; never ends, so it does so call after call.
;;
;; Sustained misbehaviour for BenchmarkTenantFairness (bench/): the job
;; holds a core inside guest calls as long as it runs, far below the call
;; deadline, so no quota stops it. Only the fair-share gate bounds it.
(module
  (import "wstream" "processing_time" (func $processing_time (result i64)))
  (memory (export "memory") 2)

  ;; Memory: 0x100 the last xorshift state (stored, so that the chain is
  ;; observable), 0x1000 the operator name (NUL-ended), 0x2000 the plan JSON
  ;; (NUL-ended), 0x10000 the argument arena.
  (data (i32.const 0x1000) "spin\00")
  (data (i32.const 0x2000)
    "{\"name\":\"bench-cpu\",\"parallelism\":2,"
    "\"vertices\":["
    "{\"id\":\"source\",\"kind\":\"source\",\"connector\":\"gen\",\"config\":{\"keys\":1000,\"words\":1,\"seed\":7}},"
    "{\"id\":\"op\",\"kind\":\"operator\",\"operator\":\"spin\"},"
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

  ;; Spin until 200 ms have passed since the call began: chunks of 100,000
  ;; xorshift64 steps, the clock read between chunks.
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (local $end i64) (local $x i64) (local $i i32)
    (local.set $end (i64.add (call $processing_time) (i64.const 200)))
    (local.set $x (i64.or (i64.load (i32.const 0x100)) (i64.const 1)))
    (loop $chunk
      (local.set $i (i32.const 100000))
      (loop $step
        (local.set $x (i64.xor (local.get $x) (i64.shl (local.get $x) (i64.const 13))))
        (local.set $x (i64.xor (local.get $x) (i64.shr_u (local.get $x) (i64.const 7))))
        (local.set $x (i64.xor (local.get $x) (i64.shl (local.get $x) (i64.const 17))))
        (local.set $i (i32.sub (local.get $i) (i32.const 1)))
        (br_if $step (local.get $i)))
      (br_if $chunk (i64.lt_s (call $processing_time) (local.get $end))))
    (i64.store (i32.const 0x100) (local.get $x))
    (i32.const 0))

  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32) (i32.const 0))

  (func (export "wstream_close") (param i32) (result i32) (i32.const 0))
)
