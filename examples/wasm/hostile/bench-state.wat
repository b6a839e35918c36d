;; bench-state: a state flood. For each of the first 256 records of every
;; input batch, wstream_process writes a distinct 16 KiB value (pseudo-random
;; bytes, so that it does not compress, with a counter in its first four
;; bytes) under the record's key and a namespace that cycles through 128
;; values: about 4.2 MB of state per call, under the quota of 32 MiB of state
;; writes per call. With 64 keys over two subtasks, a subtask holds at most
;; about 4,100 entries (64 MiB), under the tenant's state quota on disk,
;; which overwrites keep it under. The source never ends, so it does so call
;; after call.
;;
;; Sustained misbehaviour for BenchmarkTenantFairness (bench/): the writes
;; are cheap inside the call; flushing them to Pebble (under the tenant's
;; slot of the fair-share gate), Pebble's compactions (outside it) and the
;; write-back cache (bounded by the tenant's memory quota) are host work
;; and memory beyond the call.
(module
  (import "wstream" "state_register" (func $state_register (param i32 i32 i32) (result i32)))
  (import "wstream" "state_put" (func $state_put (param i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 4)

  ;; Memory: 0x100 the namespace (4 bytes), 0x1000 the operator name
  ;; (NUL-ended), 0x1100 the state name, 0x2000 the plan JSON (NUL-ended),
  ;; 0x20000 the 16 KiB value, 0x30000 the argument arena.
  (data (i32.const 0x1000) "flood\00")
  (data (i32.const 0x1100) "blob")
  (data (i32.const 0x2000)
    "{\"name\":\"bench-state\",\"parallelism\":2,"
    "\"vertices\":["
    "{\"id\":\"source\",\"kind\":\"source\",\"connector\":\"gen\",\"config\":{\"keys\":64,\"words\":1,\"seed\":7}},"
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
  ;; One argument arena at 0x30000, memory grown to fit it.
  (func (export "wstream_alloc") (param $n i32) (result i32)
    (local $need i32)
    (local.set $need (i32.shr_u (i32.add (local.get $n) (i32.const 0x3ffff)) (i32.const 16)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then (if (i32.eq (memory.grow (i32.sub (local.get $need) (memory.size))) (i32.const -1))
        (then (return (i32.const 0))))))
    (i32.const 0x30000))

  ;; The count of values written, which picks the namespace.
  (global $c (mut i32) (i32.const 0))

  ;; Registers value state "blob" (handle 0) and fills the value with
  ;; xorshift64 output.
  (func (export "wstream_open") (param $op i32) (param $np i32) (param $nl i32) (param i32 i32) (result i32)
    (local $h i32) (local $x i64) (local $p i32)
    (if (i32.eqz (call $is_op (local.get $np) (local.get $nl)))
      (then (return (i32.const -10))))
    (local.set $h (call $state_register (i32.const 0x1100) (i32.const 4) (i32.const 1)))
    (if (i32.lt_s (local.get $h) (i32.const 0))
      (then (return (local.get $h))))
    (local.set $x (i64.const 0x9e3779b97f4a7c15))
    (local.set $p (i32.const 0x20000))
    (loop $l
      (local.set $x (i64.xor (local.get $x) (i64.shl (local.get $x) (i64.const 13))))
      (local.set $x (i64.xor (local.get $x) (i64.shr_u (local.get $x) (i64.const 7))))
      (local.set $x (i64.xor (local.get $x) (i64.shl (local.get $x) (i64.const 17))))
      (i64.store (local.get $p) (local.get $x))
      (local.set $p (i32.add (local.get $p) (i32.const 8)))
      (br_if $l (i32.lt_u (local.get $p) (i32.const 0x24000))))
    (i32.const 0))

  ;; put(record key, namespace c mod 128, value) for the first 256 records;
  ;; a failed put fails the call. A record is port(4) ts(8) klen(4) vlen(4)
  ;; key value.
  (func (export "wstream_process") (param $op i32) (param $b i32) (param $n i32) (result i32)
    (local $k i32) (local $p i32) (local $klen i32) (local $st i32)
    (local.set $k (i32.load (local.get $b)))
    (if (i32.gt_u (local.get $k) (i32.const 256))
      (then (local.set $k (i32.const 256))))
    (local.set $p (i32.add (local.get $b) (i32.const 4)))
    (block $done
      (loop $l
        (br_if $done (i32.eqz (local.get $k)))
        (local.set $klen (i32.load (i32.add (local.get $p) (i32.const 12))))
        (i32.store (i32.const 0x20000) (global.get $c))
        (i32.store (i32.const 0x100) (i32.and (global.get $c) (i32.const 127)))
        (local.set $st (call $state_put (i32.const 0)
          (i32.add (local.get $p) (i32.const 20)) (local.get $klen)
          (i32.const 0x100) (i32.const 4)
          (i32.const 0x20000) (i32.const 16384)))
        (if (i32.lt_s (local.get $st) (i32.const 0))
          (then (return (local.get $st))))
        (global.set $c (i32.add (global.get $c) (i32.const 1)))
        (local.set $p (i32.add (i32.add (local.get $p) (i32.const 20))
          (i32.add (local.get $klen) (i32.load (i32.add (local.get $p) (i32.const 16))))))
        (local.set $k (i32.sub (local.get $k) (i32.const 1)))
        (br $l)))
    (i32.const 0))

  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32) (i32.const 0))

  (func (export "wstream_close") (param i32) (result i32) (i32.const 0))
)
