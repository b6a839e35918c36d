;; bench-timer: a timer flood. For each of the first 256 records of every
;; input batch, wstream_process registers 100 processing-time timers under
;; the record's key (namespaces 0 to 99, one byte each) at the next multiple
;; of 100 ms; wstream_on_timer re-arms every timer it is given at the next
;; multiple of 100 ms after the wall clock, always in the future, so no
;; cascade builds up. With 64 keys over two subtasks a subtask keeps about
;; 3,200 timers pending, each firing ten times a second: far under the
;; quotas of 10,000 pending timers per key and 200,000 per subtask, so the
;; job runs for ever.
;;
;; Sustained misbehaviour for BenchmarkTenantFairness (bench/): registering
;; costs host calls inside the guest's calls, but keeping, ordering and
;; firing the timers (and writing them to Pebble) is host work beyond the
;; calls, which the worker does under the tenant's slot of the fair-share
;; gate.
(module
  (import "wstream" "timer_register" (func $timer_register (param i32 i32 i32 i32 i32 i64) (result i32)))
  (import "wstream" "processing_time" (func $processing_time (result i64)))
  (memory (export "memory") 2)

  ;; Memory: 0x200 the namespaces, bytes 0 to 99 (wstream_open writes
  ;; them), 0x1000 the operator name (NUL-ended), 0x2000 the plan JSON
  ;; (NUL-ended), 0x10000 the argument arena.
  (data (i32.const 0x1000) "flood\00")
  (data (i32.const 0x2000)
    "{\"name\":\"bench-timer\",\"parallelism\":2,"
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
  ;; One argument arena at 0x10000, memory grown to fit it.
  (func (export "wstream_alloc") (param $n i32) (result i32)
    (local $need i32)
    (local.set $need (i32.shr_u (i32.add (local.get $n) (i32.const 131071)) (i32.const 16)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then (if (i32.eq (memory.grow (i32.sub (local.get $need) (memory.size))) (i32.const -1))
        (then (return (i32.const 0))))))
    (i32.const 0x10000))

  (func (export "wstream_open") (param $op i32) (param $np i32) (param $nl i32) (param i32 i32) (result i32)
    (local $i i32)
    (if (i32.eqz (call $is_op (local.get $np) (local.get $nl)))
      (then (return (i32.const -10))))
    (loop $l
      (i32.store8 (i32.add (i32.const 0x200) (local.get $i)) (local.get $i))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 100))))
    (i32.const 0))

  ;; $next is the first multiple of 100 ms after the wall clock.
  (func $next (result i64)
    (i64.mul (i64.add (i64.div_s (call $processing_time) (i64.const 100)) (i64.const 1)) (i64.const 100)))

  ;; $arm registers 100 processing-time timers for the key [k, k+klen) at ts.
  (func $arm (param $k i32) (param $klen i32) (param $ts i64) (result i32)
    (local $j i32) (local $st i32)
    (loop $l
      (local.set $st (call $timer_register (i32.const 1) (local.get $k) (local.get $klen)
        (i32.add (i32.const 0x200) (local.get $j)) (i32.const 1) (local.get $ts)))
      (if (i32.lt_s (local.get $st) (i32.const 0))
        (then (return (local.get $st))))
      (local.set $j (i32.add (local.get $j) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $j) (i32.const 100))))
    (i32.const 0))

  ;; 100 timers for each of the first 256 records; a failed registration
  ;; fails the call. A record is port(4) ts(8) klen(4) vlen(4) key value.
  (func (export "wstream_process") (param $op i32) (param $b i32) (param $n i32) (result i32)
    (local $k i32) (local $p i32) (local $klen i32) (local $st i32) (local $ts i64)
    (local.set $ts (call $next))
    (local.set $k (i32.load (local.get $b)))
    (if (i32.gt_u (local.get $k) (i32.const 256))
      (then (local.set $k (i32.const 256))))
    (local.set $p (i32.add (local.get $b) (i32.const 4)))
    (block $done
      (loop $l
        (br_if $done (i32.eqz (local.get $k)))
        (local.set $klen (i32.load (i32.add (local.get $p) (i32.const 12))))
        (local.set $st (call $arm (i32.add (local.get $p) (i32.const 20)) (local.get $klen) (local.get $ts)))
        (if (i32.lt_s (local.get $st) (i32.const 0))
          (then (return (local.get $st))))
        (local.set $p (i32.add (i32.add (local.get $p) (i32.const 20))
          (i32.add (local.get $klen) (i32.load (i32.add (local.get $p) (i32.const 16))))))
        (local.set $k (i32.sub (local.get $k) (i32.const 1)))
        (br $l)))
    (i32.const 0))

  ;; Re-arms every fired timer (domain, key and namespace as given) at the
  ;; next multiple of 100 ms. A timer is port=domain(4) ts(8) klen(4)
  ;; vlen(4) key namespace.
  (func (export "wstream_on_timer") (param $op i32) (param $b i32) (param $n i32) (result i32)
    (local $k i32) (local $p i32) (local $klen i32) (local $nlen i32) (local $st i32) (local $ts i64)
    (local.set $ts (call $next))
    (local.set $k (i32.load (local.get $b)))
    (local.set $p (i32.add (local.get $b) (i32.const 4)))
    (block $done
      (loop $l
        (br_if $done (i32.eqz (local.get $k)))
        (local.set $klen (i32.load (i32.add (local.get $p) (i32.const 12))))
        (local.set $nlen (i32.load (i32.add (local.get $p) (i32.const 16))))
        (local.set $st (call $timer_register (i32.load (local.get $p))
          (i32.add (local.get $p) (i32.const 20)) (local.get $klen)
          (i32.add (i32.add (local.get $p) (i32.const 20)) (local.get $klen)) (local.get $nlen)
          (local.get $ts)))
        (if (i32.lt_s (local.get $st) (i32.const 0))
          (then (return (local.get $st))))
        (local.set $p (i32.add (i32.add (local.get $p) (i32.const 20)) (i32.add (local.get $klen) (local.get $nlen))))
        (local.set $k (i32.sub (local.get $k) (i32.const 1)))
        (br $l)))
    (i32.const 0))

  (func (export "wstream_close") (param i32) (result i32) (i32.const 0))
)
