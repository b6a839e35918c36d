;; table-grow: wstream_process grows its table by 0xfffffff0 elements, then by
;; 2^27, then by 2^18; when a grow fails (-1) it fails the call, naming it.
;;
;; Attack: a table is host memory (8 bytes an element) outside every quota of
;; linear memory: 2^27 elements are 1 GiB, 0xfffffff0 are 32 GiB, which the
;; Go runtime cannot allocate, so the worker dies.
;; Answer: a tenant's tables get a maximum of at most the TableElements
;; admission limit (2^18), so every one of these grows returns -1, as the
;; core specification lets a grow fail; the job fails with "table.grow
;; refused".
(module
  (import "wstream" "fail" (func $fail (param i32 i32)))
  (memory (export "memory") 2)
  (table $t 1 funcref)
  (data (i32.const 0x1100) "table.grow refused\00")

  ;; Memory: 0x1000 the operator name (NUL-ended), 0x1100 other text,
  ;; 0x2000 the plan JSON (NUL-ended), 0x10000 the argument arena.
  (data (i32.const 0x1000) "tgrow\00")
  (data (i32.const 0x2000)
    "{\"name\":\"hostile-table-grow\",\"parallelism\":1,"
    "\"vertices\":["
    "{\"id\":\"source\",\"kind\":\"source\",\"connector\":\"gen\",\"config\":{\"count\":1,\"keys\":1}},"
    "{\"id\":\"op\",\"kind\":\"operator\",\"operator\":\"tgrow\"},"
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

  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (if (i32.eq (table.grow $t (ref.null func) (i32.const 0xfffffff0)) (i32.const -1))
      (then (call $fail (i32.const 0x1100) (i32.const 18)) (return (i32.const -1))))
    (if (i32.eq (table.grow $t (ref.null func) (i32.const 0x8000000)) (i32.const -1))
      (then (call $fail (i32.const 0x1100) (i32.const 18)) (return (i32.const -1))))
    (if (i32.eq (table.grow $t (ref.null func) (i32.const 0x40000)) (i32.const -1))
      (then (call $fail (i32.const 0x1100) (i32.const 18)) (return (i32.const -1))))
    (i32.const 0))

  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32) (i32.const 0))

  (func (export "wstream_close") (param i32) (result i32) (i32.const 0))
)
