/*
 * wstream C guest SDK: write wstream stream operators in C and compile them
 * to one freestanding WebAssembly module (clang --target=wasm32 -nostdlib).
 *
 * The SDK implements every export of the host<->guest ABI (abi/ABI.md) and
 * wraps every host import: operators see records, keyed state and timers.
 * A module lists its operators with WSTREAM_OPERATORS and may carry its job
 * plan with WSTREAM_PLAN:
 *
 *     static int upper_process(ws_ctx *ctx, const ws_record *r) { ... }
 *     static const ws_operator upper = { .name = "upper", .process = upper_process };
 *     WSTREAM_OPERATORS(&upper);
 *     WSTREAM_PLAN("{\"name\":\"mapfilter\", ...}");
 *
 * Conventions:
 *  - Functions returning int return WS_OK (0) or a negative WS_* status. When
 *    a call fails the SDK records a message that says what failed (naming the
 *    state, output or timer) and the host's verdict; a callback that returns
 *    that status fails with that message. Lookups (ws_value_get, ...) return
 *    1 when found, 0 when absent and a negative status on error.
 *  - Pointers handed to callbacks (record and timer bytes, state values) alias
 *    SDK or host buffers: they are valid for the duration stated on each
 *    function. Copy what must outlive it.
 *  - Everything runs on one thread: the host calls a module instance from
 *    one thread, one call at a time.
 */
#ifndef WSTREAM_H
#define WSTREAM_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this SDK implements (the wstream_abi_version export). */
#define WSTREAM_ABI_VERSION 1

/* Status codes (abi/ABI.md). */
enum {
	WS_OK = 0,
	WS_NOT_FOUND = -1,       /* no state entry for that key and namespace */
	WS_BAD_POINTER = -2,     /* a pointer/length pair lies outside guest memory */
	WS_BAD_HANDLE = -3,      /* unknown state handle or operator slot */
	WS_BAD_OUTPUT = -4,      /* unknown output index or output name */
	WS_BAD_ARGUMENT = -5,    /* malformed batch, bad kind or domain, empty name */
	WS_KEY_GROUP = -6,       /* the key belongs to a key group this subtask does not own */
	WS_NO_KEYED_STATE = -7,  /* keyed state or timers without a key-partitioned input */
	WS_STATE_ERROR = -8,     /* the state backend failed */
	WS_LIMIT = -9,           /* a size limit was exceeded */
	WS_UNKNOWN_OPERATOR = -10,
	WS_GUEST_ERROR = -11,    /* the guest failed (see ws_error) */
	WS_NOT_IN_CALLBACK = -12 /* a host call outside a callback */
};

/* Timer domains. */
enum { WS_EVENT_TIME = 0, WS_PROCESSING_TIME = 1 };

/* Log levels. */
enum { WS_LOG_DEBUG = 0, WS_LOG_INFO = 1, WS_LOG_WARN = 2, WS_LOG_ERROR = 3 };

/* Watermark bounds: INT64_MIN before the first watermark, INT64_MAX once
 * the input ended (every event-time timer fires then). */
#define WS_MIN_WATERMARK INT64_MIN
#define WS_MAX_WATERMARK INT64_MAX

/* An operator's view of the host, passed to every callback. */
typedef struct ws_ctx ws_ctx;

/* One input record. key and value alias the host's input batch: valid only
 * during the process call that received them. */
typedef struct ws_record {
	const uint8_t *key;
	uint32_t key_len;
	const uint8_t *value;
	uint32_t value_len;
	int64_t ts;     /* event time, milliseconds since the Unix epoch */
	uint32_t input; /* index of the input edge, in plan order; 0 for one input */
} ws_record;

/* A fired timer. key and ns are valid only during the on_timer call. */
typedef struct ws_timer {
	int32_t domain; /* WS_EVENT_TIME or WS_PROCESSING_TIME */
	int64_t ts;
	const uint8_t *key; /* the key the timer was registered under */
	uint32_t key_len;
	const uint8_t *ns; /* the namespace it was registered with */
	uint32_t ns_len;
} ws_timer;

/*
 * An operator: its name and callbacks. NULL callbacks are not implemented:
 * a missing open or close does nothing, a missing on_timer fails the call
 * when timers fire, missing checkpoint hooks are no-ops. Every callback
 * returns 0 on success; anything else fails the callback (and the job) with
 * the message recorded by ws_error/ws_errorf or by the failing SDK call.
 *
 * data_size bytes of zeroed memory are allocated per opened instance and
 * freed when it closes: ws_data(ctx) returns them (NULL when data_size is 0).
 */
typedef struct ws_operator {
	const char *name;
	uint32_t data_size;
	int (*open)(ws_ctx *ctx);                          /* register states, read config, look up outputs */
	int (*process)(ws_ctx *ctx, const ws_record *r);   /* once per input record */
	int (*on_timer)(ws_ctx *ctx, const ws_timer *t);   /* once per fired timer; the current key is t->key */
	int (*close)(ws_ctx *ctx);                         /* after the input and all timers; may emit */
	int (*pre_barrier)(ws_ctx *ctx, int64_t checkpoint);         /* flush buffered output before a barrier */
	int (*checkpoint_complete)(ws_ctx *ctx, int64_t checkpoint); /* e.g. commit a transaction */
	int (*checkpoint_aborted)(ws_ctx *ctx, int64_t checkpoint);
} ws_operator;

/* The module's operators: a NULL-terminated array defined by
 * WSTREAM_OPERATORS. Names must be unique, non-empty and at most 256 bytes. */
extern const ws_operator *const wstream_operators[];

#define WSTREAM_OPERATORS(...) \
	const ws_operator *const wstream_operators[] = {__VA_ARGS__, (const ws_operator *)0}

/* WSTREAM_PLAN(json) exports the module's job plan (the wstream_plan export);
 * flags and plan files given to `wstream deploy` override it. Use it once, at
 * file scope, with a string literal. */
#define WSTREAM_PLAN(json)                                                        \
	static const char ws_plan_json_[] = json;                                     \
	__attribute__((export_name("wstream_plan"))) int64_t ws_plan_export_(void) {  \
		return (int64_t)(((uint64_t)(uintptr_t)ws_plan_json_ << 32) |             \
		                 (uint64_t)(sizeof ws_plan_json_ - 1));                    \
	}                                                                             \
	typedef int ws_plan_defined_once_

/* ---- State migration ---------------------------------------------------- */

/*
 * A migration converts one value of a state whose layout version the plan
 * raised (abi/ABI.md, wstream_migrate): op and state name the operator and
 * the state (not NUL-terminated), version is the layout version the value
 * was written with, key, ns and value the entry. Set *out and *out_len to
 * the value in the current layout, in memory that stays valid until the
 * next call (for example a buffer the module keeps), and return 0; or call
 * ws_migrate_error and return non-zero: the restore fails (an upgrade rolls
 * back).
 */
typedef int (*ws_migrate_fn)(const char *op, uint32_t op_len, const char *state, uint32_t state_len, int32_t version,
                             const uint8_t *key, uint32_t key_len, const uint8_t *ns, uint32_t ns_len,
                             const uint8_t *value, uint32_t value_len, const uint8_t **out, uint32_t *out_len);

/* ws_migrate_error says why the migration in progress fails (NUL-terminated). */
void ws_migrate_error(const char *msg);

/* The body of the wstream_migrate export that WSTREAM_MIGRATE defines. */
int64_t ws_migrate_run_(ws_migrate_fn fn, uint32_t op_ptr, int32_t op_len, uint32_t state_ptr, int32_t state_len,
                        int32_t version, uint32_t key_ptr, int32_t key_len, uint32_t ns_ptr, int32_t ns_len,
                        uint32_t val_ptr, int32_t val_len);

/* WSTREAM_MIGRATE(fn) exports fn, a ws_migrate_fn, as wstream_migrate. Use it
 * once, at file scope. */
#define WSTREAM_MIGRATE(fn)                                                                                  \
	__attribute__((export_name("wstream_migrate"))) int64_t ws_migrate_export_(                              \
	    uint32_t a, int32_t b, uint32_t c, int32_t d, int32_t v, uint32_t e, int32_t f, uint32_t g, int32_t h, \
	    uint32_t i, int32_t j) {                                                                             \
		return ws_migrate_run_(fn, a, b, c, d, v, e, f, g, h, i, j);                                         \
	}                                                                                                        \
	typedef int ws_migrate_defined_once_

/* ---- Context ----------------------------------------------------------- */

/* The name the operator was opened under (NUL-terminated). */
const char *ws_operator_name(const ws_ctx *ctx);

/* The instance's data_size bytes (see ws_operator), or NULL. */
void *ws_data(ws_ctx *ctx);

/* The operator's configuration from the job plan (JSON by convention), len 0
 * when the plan gives none. NUL-terminated; valid while the operator is open. */
const uint8_t *ws_config(const ws_ctx *ctx, uint32_t *len);

/* Look up a top-level member of the JSON object configuration. They return 1
 * when found, 0 when the configuration is empty or lacks the member (or it
 * is null), and WS_BAD_ARGUMENT, with a message naming the member, when the
 * configuration is not a JSON object or the member has another type.
 * ws_config_string stores a NUL-terminated copy allocated with ws_malloc in
 * *out (free it with ws_free) and its length in *len (len may be NULL).
 * ws_config_int64 accepts integers only (no fraction or exponent). */
int ws_config_string(ws_ctx *ctx, const char *member, char **out, uint32_t *len);
int ws_config_int64(ws_ctx *ctx, const char *member, int64_t *out);
int ws_config_bool(ws_ctx *ctx, const char *member, int *out);

/* The current key: the record's in process, the timer's in on_timer, empty
 * elsewhere. Keyed state and timers act on it. */
const uint8_t *ws_key(const ws_ctx *ctx, uint32_t *len);

/* Buffered output. The record is copied into the SDK's output buffer, which
 * goes to the host in one emit_batch call when the callback returns, or
 * earlier once it passed 64 KiB. Errors (a bad output index, memory) fail
 * the callback when it returns. ws_emit sends to output 0. */
void ws_emit(ws_ctx *ctx, const void *key, uint32_t key_len, const void *value, uint32_t value_len, int64_t ts);
void ws_emit_to(ws_ctx *ctx, uint32_t output, const void *key, uint32_t key_len, const void *value,
                uint32_t value_len, int64_t ts);

/* ws_emit_reserve appends a record whose value the caller writes in place:
 * it returns a pointer to value_len bytes of the output buffer, valid until
 * the next emit or the end of the callback, or NULL when the buffer cannot
 * grow (the callback then fails). It saves a copy for operators that compute
 * the value. */
uint8_t *ws_emit_reserve(ws_ctx *ctx, uint32_t output, const void *key, uint32_t key_len, uint32_t value_len,
                         int64_t ts);

/* One emit host call per record, after flushing the buffered output so that
 * records keep their order; returns the host's status at once. The slow path. */
int ws_emit_unbuffered(ws_ctx *ctx, uint32_t output, const void *key, uint32_t key_len, const void *value,
                       uint32_t value_len, int64_t ts);

/* The index of the named output of this operator's vertex (its position in
 * the plan's "outputs", default ["main"]), or WS_BAD_OUTPUT. Look outputs up
 * in open and keep the index. */
int ws_output(ws_ctx *ctx, const char *name);

/* The event-time watermark (fetched once per callback) and the host's wall
 * clock, in milliseconds since the Unix epoch. */
int64_t ws_watermark(ws_ctx *ctx);
int64_t ws_processing_time(ws_ctx *ctx);

/* Write to the worker's log, tagged with operator and subtask. ws_logf
 * formats like ws_errorf (at most 2 KiB); ws_log_bytes writes len bytes as
 * they are, NULs included (the host keeps 64 KiB). */
void ws_log(ws_ctx *ctx, int level, const char *msg);
void ws_log_bytes(ws_ctx *ctx, int level, const void *msg, uint32_t len);
void ws_logf(ws_ctx *ctx, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Record why the callback fails and return WS_GUEST_ERROR, for
 * `return ws_error(ctx, "...")`. The SDK prefixes the message with the
 * operator, the phase and, in process, the record's index and key:
 *   operator "count": process: record 3 of 10 (key "k"): MESSAGE
 * ws_errorf supports %d %i %u %x (with l, ll, z, j), %c, %s, %.*s and %%. */
int ws_error(ws_ctx *ctx, const char *msg);
int ws_errorf(ws_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- Keyed state --------------------------------------------------------- */

/* A state handle. Get it in open (the only place the host accepts new
 * states) and keep it in the instance data. */
typedef struct ws_value_state {
	int32_t h; /* the host's handle; -1 when unset */
	const char *name;
} ws_value_state;

typedef struct ws_map_state {
	int32_t h;
	const char *name;
} ws_map_state;

/* Register (in open) or look up (later) the state called name. The same
 * name again returns the same handle; a name of the other kind, or a new
 * name outside open, fails with a message saying which. name must stay
 * valid while the operator is open (a string literal). */
int ws_value_state_get(ws_ctx *ctx, const char *name, ws_value_state *out);
int ws_map_state_get(ws_ctx *ctx, const char *name, ws_map_state *out);

/* Value state of the current key: one value per namespace (the plain calls
 * use the empty namespace). ws_value_get stores a pointer to the value in
 * *val, valid until the callback returns, and returns 1, or 0 when there is
 * none. In process and on_timer state is cached for the callback and
 * written back to the host when it ends (abi/ABI.md, "How the SDKs use
 * them"): a put the host refuses then fails the callback, naming the state;
 * a key or namespace over 64 KiB or a value over 16 MiB fails at once with
 * WS_LIMIT. Integers are 8 bytes little-endian, like the Go
 * SDK's PutInt64: ws_value_get_int64 fails with WS_BAD_ARGUMENT on a value of
 * another size and stores 0 when there is none. ws_value_add_int64 is
 * ws_value_get_int64 and a put of the sum in one call: it stores value + d
 * (0 + d when there is none, wrapping on overflow), sets *sum to it and
 * returns 1, or 0 when there was no value; in process and on_timer it finds
 * the cached entry once. Deleting an absent value is not an error. */
int ws_value_get(ws_ctx *ctx, ws_value_state s, const uint8_t **val, uint32_t *len);
int ws_value_put(ws_ctx *ctx, ws_value_state s, const void *val, uint32_t len);
int ws_value_delete(ws_ctx *ctx, ws_value_state s);
int ws_value_get_int64(ws_ctx *ctx, ws_value_state s, int64_t *v);
int ws_value_put_int64(ws_ctx *ctx, ws_value_state s, int64_t v);
int ws_value_add_int64(ws_ctx *ctx, ws_value_state s, int64_t delta, int64_t *sum);

int ws_value_get_ns(ws_ctx *ctx, ws_value_state s, const void *ns, uint32_t ns_len, const uint8_t **val,
                    uint32_t *len);
int ws_value_put_ns(ws_ctx *ctx, ws_value_state s, const void *ns, uint32_t ns_len, const void *val, uint32_t len);
int ws_value_delete_ns(ws_ctx *ctx, ws_value_state s, const void *ns, uint32_t ns_len);
int ws_value_get_int64_ns(ws_ctx *ctx, ws_value_state s, const void *ns, uint32_t ns_len, int64_t *v);
int ws_value_put_int64_ns(ws_ctx *ctx, ws_value_state s, const void *ns, uint32_t ns_len, int64_t v);
int ws_value_add_int64_ns(ws_ctx *ctx, ws_value_state s, const void *ns, uint32_t ns_len, int64_t delta,
                          int64_t *sum);

/* Map state of the current key: a sorted map whose keys are state
 * namespaces. ws_map_get follows ws_value_get's rules. */
int ws_map_get(ws_ctx *ctx, ws_map_state m, const void *k, uint32_t k_len, const uint8_t **val, uint32_t *len);
int ws_map_put(ws_ctx *ctx, ws_map_state m, const void *k, uint32_t k_len, const void *val, uint32_t len);
int ws_map_delete(ws_ctx *ctx, ws_map_state m, const void *k, uint32_t k_len);

/* ws_map_range calls fn for every entry of the current key whose map key
 * starts with prefix (all for prefix_len 0), in map-key byte order. fn
 * returns 0 to go on, a positive value to stop (ws_map_range then returns
 * WS_OK) or a negative status to fail (ws_map_range returns it). k and v are
 * valid only during fn. Pages through the host's state_iter; fn may read and
 * write state and may nest ws_map_range. */
typedef int (*ws_map_fn)(void *arg, const uint8_t *k, uint32_t k_len, const uint8_t *v, uint32_t v_len);
int ws_map_range(ws_ctx *ctx, ws_map_state m, const void *prefix, uint32_t prefix_len, ws_map_fn fn, void *arg);

/* ---- Timers -------------------------------------------------------------- */

/* Timers of the current key. ns distinguishes timers of one key (for example
 * a window); registering the same (domain, key, ns, ts) twice makes one
 * timer; deleting an absent timer is not an error. */
int ws_timer_register(ws_ctx *ctx, int32_t domain, int64_t ts, const void *ns, uint32_t ns_len);
int ws_timer_delete(ws_ctx *ctx, int32_t domain, int64_t ts, const void *ns, uint32_t ns_len);
int ws_register_event_timer(ws_ctx *ctx, int64_t ts, const void *ns, uint32_t ns_len);
int ws_register_processing_timer(ws_ctx *ctx, int64_t ts, const void *ns, uint32_t ns_len);
int ws_delete_event_timer(ws_ctx *ctx, int64_t ts, const void *ns, uint32_t ns_len);
int ws_delete_processing_timer(ws_ctx *ctx, int64_t ts, const void *ns, uint32_t ns_len);

/* ---- Freestanding support ---------------------------------------------- */

/* The module's heap: linear memory grown with memory.grow. ws_malloc and
 * ws_realloc return NULL when memory cannot grow (the host's limit). */
void *ws_malloc(size_t n);
void *ws_calloc(size_t count, size_t size);
void *ws_realloc(void *p, size_t n);
void ws_free(void *p);

/* The decimal form of v in buf (at least WS_INT64_DIGITS bytes, not
 * NUL-terminated); returns its length. */
#define WS_INT64_DIGITS 20
uint32_t ws_format_int64(char *buf, int64_t v);

/* Parse a whole decimal integer (optional '-'); returns 1, or 0 when s is
 * empty, has other characters or overflows int64. */
int ws_parse_int64(const uint8_t *s, uint32_t len, int64_t *out);

/* vsnprintf-like formatting with ws_errorf's conversions; always
 * NUL-terminates when cap > 0 and returns the length written. */
uint32_t ws_vformat(char *buf, uint32_t cap, const char *fmt, va_list ap);
uint32_t ws_format(char *buf, uint32_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ws_quote writes the n bytes at b double-quoted and escaped in the style
 * of Go's %q (valid UTF-8 kept, other bytes as \xNN), the first 256 bytes
 * and then "...", for messages about record keys and values: pass the
 * result to ws_errorf's %s. It NUL-terminates when cap > 0 and returns the
 * length written; WS_QUOTE_CAP bytes always hold the whole result. */
#define WS_QUOTE_CAP (2u + 256u * 4u + 3u + 1u)
uint32_t ws_quote(char *buf, uint32_t cap, const void *b, uint32_t n);

/* A short text for a status code ("not found", "bad output", ...). */
const char *ws_status_text(int status);

/* The C library functions the compiler may call on its own. */
void *memcpy(void *dst, const void *src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);

#ifdef __cplusplus
}
#endif

#endif /* WSTREAM_H */
