;; reserved-stop: exports a global named wstream:stop, the name of the stop
;; flag that the host's instrumentation adds, and wstream_process runs a call
;; tree 40 levels deep without a single loop (2^40 calls).
;;
;; Attack: make the instrumentation refuse the module, so that the host runs
;; it with wazero's own checks, which stop a guest only at loop headers: the
;; call tree outlives its deadline by hours and holds its thread, so that no
;; garbage collection of the worker can finish and it stops heartbeating.
;; Answer: a tenant's module exporting a reserved name is refused before it
;; is compiled: "export section, export N: the name "wstream:stop" is
;; reserved for the host's instrumentation".
(module
  (memory (export "memory") 2)
  (global (export "wstream:stop") (mut i32) (i32.const 0))

  ;; Memory: 0x1000 the operator name (NUL-ended), 0x1100 other text,
  ;; 0x2000 the plan JSON (NUL-ended), 0x10000 the argument arena.
  (data (i32.const 0x1000) "tree\00")
  (data (i32.const 0x2000)
    "{\"name\":\"hostile-reserved-stop\",\"parallelism\":1,"
    "\"vertices\":["
    "{\"id\":\"source\",\"kind\":\"source\",\"connector\":\"gen\",\"config\":{\"count\":1,\"keys\":1}},"
    "{\"id\":\"op\",\"kind\":\"operator\",\"operator\":\"tree\"},"
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

  (func $tree (param $d i32)
    (if (local.get $d) (then
      (call $tree (i32.sub (local.get $d) (i32.const 1)))
      (call $tree (i32.sub (local.get $d) (i32.const 1))))))

  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (call $tree (i32.const 40))
    (i32.const 0))

  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32) (i32.const 0))

  (func (export "wstream_close") (param i32) (result i32) (i32.const 0))
)
