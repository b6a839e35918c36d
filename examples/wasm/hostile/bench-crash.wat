;; bench-crash: a crash-restart loop. wstream_process traps (unreachable) on
;; the first batch of every attempt, and the plan asks for restarts for ever,
;; as often as a tenant may: an exponential backoff from 1 s capped at 1 s.
;; A tenant's restarts wait at least 1 s, and an unlimited fixed delay is
;; turned into a backoff up to 5 minutes, but a backoff whose cap equals its
;; 1 s delay is kept (coordinator/tenants.go, tenantRestart), so the job
;; fails and is deployed again (subtasks wired, state opened, the module
;; instantiated) about once a second, for ever.
;;
;; Sustained misbehaviour for BenchmarkTenantFairness (bench/): each attempt
;; is short, and its costs are mostly host work (coordinator, deployment,
;; channels, Pebble) outside the fair-share gate's slots; only
;; instantiation and the guest's calls go through the gate.
(module
  (memory (export "memory") 2)

  ;; Memory: 0x1000 the operator name (NUL-ended), 0x2000 the plan JSON
  ;; (NUL-ended), 0x10000 the argument arena.
  (data (i32.const 0x1000) "crash\00")
  (data (i32.const 0x2000)
    "{\"name\":\"bench-crash\",\"parallelism\":2,"
    "\"restart\":{\"strategy\":\"exponential-backoff\",\"delay\":1000,\"maxDelay\":1000},"
    "\"vertices\":["
    "{\"id\":\"source\",\"kind\":\"source\",\"connector\":\"gen\",\"config\":{\"keys\":1000,\"words\":1,\"seed\":7}},"
    "{\"id\":\"op\",\"kind\":\"operator\",\"operator\":\"crash\"},"
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

  ;; Traps on the first batch, so every attempt fails at once.
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    unreachable)

  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32) (i32.const 0))

  (func (export "wstream_close") (param i32) (result i32) (i32.const 0))
)
