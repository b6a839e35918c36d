;; bench-output: an output flood. For each of the first 100 records of every
;; input batch, wstream_process emits a ready-made batch of 5,000 records
;; (4-byte keys, empty values): up to 500,000 records and 12 MB per call,
;; under the quotas of 100,000 records per input record, 1,000,000 records
;; per call and 32 MiB of output per call. The output crosses a rebalance
;; edge to the sink, so that the host routes, copies and hands over every
;; record. The source never ends, so it does so call after call.
;;
;; Sustained misbehaviour for BenchmarkTenantFairness (bench/): the calls
;; are short, but the host work they cause (checking, routing and copying
;; the output into batches, the sink) is several times theirs; the worker
;; does it under the tenant's slot of the fair-share gate, and the garbage
;; it leaves is the process's to collect.
(module
  (import "wstream" "emit_batch" (func $emit_batch (param i32 i32) (result i32)))
  (memory (export "memory") 5)

  ;; Memory: 0x1000 the operator name (NUL-ended), 0x2000 the plan JSON
  ;; (NUL-ended), 0x20000 the batch of 5,000 records that wstream_open
  ;; writes (120,004 bytes), 0x40000 the argument arena.
  (data (i32.const 0x1000) "flood\00")
  (data (i32.const 0x2000)
    "{\"name\":\"bench-output\",\"parallelism\":2,"
    "\"vertices\":["
    "{\"id\":\"source\",\"kind\":\"source\",\"connector\":\"gen\",\"config\":{\"keys\":1000,\"words\":1,\"seed\":7}},"
    "{\"id\":\"op\",\"kind\":\"operator\",\"operator\":\"flood\"},"
    "{\"id\":\"sink\",\"kind\":\"sink\",\"connector\":\"discard\"}],"
    "\"edges\":["
    "{\"from\":\"source\",\"to\":\"op\",\"partition\":\"key\"},"
    "{\"from\":\"op\",\"to\":\"sink\",\"partition\":\"rebalance\"}]}\00")

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
  ;; One argument arena at 0x40000, memory grown to fit it.
  (func (export "wstream_alloc") (param $n i32) (result i32)
    (local $need i32)
    (local.set $need (i32.shr_u (i32.add (local.get $n) (i32.const 0x4ffff)) (i32.const 16)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then (if (i32.eq (memory.grow (i32.sub (local.get $need) (memory.size))) (i32.const -1))
        (then (return (i32.const 0))))))
    (i32.const 0x40000))

  ;; Writes the batch: count 5000, then records of port 0, ts 0, klen 4,
  ;; vlen 0 and key i (24 bytes each).
  (func (export "wstream_open") (param $op i32) (param $np i32) (param $nl i32) (param i32 i32) (result i32)
    (local $i i32) (local $r i32)
    (if (i32.eqz (call $is_op (local.get $np) (local.get $nl)))
      (then (return (i32.const -10))))
    (i32.store (i32.const 0x20000) (i32.const 5000))
    (local.set $r (i32.const 0x20004))
    (loop $l
      (i32.store (local.get $r) (i32.const 0))
      (i64.store (i32.add (local.get $r) (i32.const 4)) (i64.const 0))
      (i32.store (i32.add (local.get $r) (i32.const 12)) (i32.const 4))
      (i32.store (i32.add (local.get $r) (i32.const 16)) (i32.const 0))
      (i32.store (i32.add (local.get $r) (i32.const 20)) (local.get $i))
      (local.set $r (i32.add (local.get $r) (i32.const 24)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 5000))))
    (i32.const 0))

  ;; min(records, 100) emissions of the batch; a failed emission fails the
  ;; call.
  (func (export "wstream_process") (param $op i32) (param $b i32) (param $n i32) (result i32)
    (local $k i32) (local $st i32)
    (local.set $k (i32.load (local.get $b)))
    (if (i32.gt_u (local.get $k) (i32.const 100))
      (then (local.set $k (i32.const 100))))
    (block $done
      (loop $l
        (br_if $done (i32.eqz (local.get $k)))
        (local.set $st (call $emit_batch (i32.const 0x20000) (i32.const 120004)))
        (if (i32.lt_s (local.get $st) (i32.const 0))
          (then (return (local.get $st))))
        (local.set $k (i32.sub (local.get $k) (i32.const 1)))
        (br $l)))
    (i32.const 0))

  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32) (i32.const 0))

  (func (export "wstream_close") (param i32) (result i32) (i32.const 0))
)
