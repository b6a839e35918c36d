/*
 * wstream C guest SDK: the ABI exports, the host imports and the
 * freestanding support (heap, memcpy, formatting) a -nostdlib module needs.
 * See wstream.h for the API and abi/ABI.md for the contract.
 */
#include "wstream.h"

#define WS_EXPORT(name) __attribute__((export_name(name)))
#define WS_IMPORT(name) __attribute__((import_module("wstream"), import_name(name)))

#define BATCH_HEADER 4u
#define RECORD_HEADER 20u
#define FLUSH_THRESHOLD (64u << 10)
#define MAX_SLOTS 4096
#define MAX_NAME 256u
#define ERRMSG_CAP 2048u
#define INITIAL_GET_BUF 256u
#define INITIAL_PAGE (4u << 10)
/* One state_iter entry is at most a value (16 MiB), a namespace (the key
 * limit, 64 KiB, bounds it in practice) and its 8-byte header. */
#define MAX_PAGE (2u * (16u << 20) + 8u)
#define ABBREV 64u
/* What ws_quote quotes of a string before it writes "...". */
#define QUOTE_MAX 256u

/* ---- Host imports (abi/ABI.md) ----------------------------------------- */

WS_IMPORT("emit")
int32_t ws_host_emit(uint32_t port, int64_t ts, const void *key, uint32_t key_len, const void *val, uint32_t val_len);
WS_IMPORT("emit_batch") int32_t ws_host_emit_batch(const void *batch, uint32_t len);
WS_IMPORT("output_index") int32_t ws_host_output_index(const void *name, uint32_t len);
WS_IMPORT("state_register") int32_t ws_host_state_register(const void *name, uint32_t len, int32_t kind);
WS_IMPORT("state_get")
int32_t ws_host_state_get(int32_t h, const void *key, uint32_t key_len, const void *ns, uint32_t ns_len, void *out,
                          uint32_t out_cap);
WS_IMPORT("state_put")
int32_t ws_host_state_put(int32_t h, const void *key, uint32_t key_len, const void *ns, uint32_t ns_len,
                          const void *val, uint32_t val_len);
WS_IMPORT("state_delete")
int32_t ws_host_state_delete(int32_t h, const void *key, uint32_t key_len, const void *ns, uint32_t ns_len);
WS_IMPORT("state_iter")
int32_t ws_host_state_iter(int32_t h, const void *key, uint32_t key_len, const void *prefix, uint32_t prefix_len,
                           const void *after, int32_t after_len, void *out, uint32_t out_cap);
WS_IMPORT("timer_register")
int32_t ws_host_timer_register(int32_t domain, const void *key, uint32_t key_len, const void *ns, uint32_t ns_len,
                               int64_t ts);
WS_IMPORT("timer_delete")
int32_t ws_host_timer_delete(int32_t domain, const void *key, uint32_t key_len, const void *ns, uint32_t ns_len,
                             int64_t ts);
WS_IMPORT("current_watermark") int64_t ws_host_current_watermark(void);
WS_IMPORT("processing_time") int64_t ws_host_processing_time(void);
WS_IMPORT("log") void ws_host_log(int32_t level, const void *msg, uint32_t len);
/* The batched state imports (abi/ABI.md, "Batched state access"). A module
 * built with WSTREAM_UNBATCHED_STATE never calls them, and the linker then
 * leaves them out: it runs on hosts that lack them. */
WS_IMPORT("state_get_many")
int32_t ws_host_state_get_many(int32_t h, const void *req, uint32_t req_len, void *out, uint32_t out_cap);
WS_IMPORT("state_write_batch") int32_t ws_host_state_write_batch(const void *batch, uint32_t len);
WS_IMPORT("fail") void ws_host_fail(const void *msg, uint32_t len);
/* Optional: names ws_progress to the host (abi/ABI.md, progress_at). */
WS_IMPORT("progress_at") int32_t ws_host_progress_at(const void *ptr);
/* Optional: marks the records of a batch callback that are done (abi/ABI.md,
 * commit). */
WS_IMPORT("commit") int32_t ws_host_commit(uint32_t done);

/* The index, in the running wstream_process or wstream_on_timer call's
 * batch, of the record or timer being processed (0xFFFFFFFF between
 * records): in dead-letter mode the host reads it when the call fails, and
 * takes that record out instead of searching the batch. Its address is
 * given to the host, so every store reaches memory before the callback it
 * precedes. The state cache reads it as the current record's index. */
static uint32_t ws_progress = 0xFFFFFFFFu;
static int ws_progress_named;

/* ---- Freestanding support ---------------------------------------------- */

__attribute__((no_builtin)) void *memcpy(void *dst, const void *src, size_t n) {
	uint8_t *d = dst;
	const uint8_t *s = src;
	for (; n >= 32; n -= 32, d += 32, s += 32) {
		uint64_t a, b, c, e;
		__builtin_memcpy(&a, s, 8);
		__builtin_memcpy(&b, s + 8, 8);
		__builtin_memcpy(&c, s + 16, 8);
		__builtin_memcpy(&e, s + 24, 8);
		__builtin_memcpy(d, &a, 8);
		__builtin_memcpy(d + 8, &b, 8);
		__builtin_memcpy(d + 16, &c, 8);
		__builtin_memcpy(d + 24, &e, 8);
	}
	for (; n >= 8; n -= 8, d += 8, s += 8) {
		uint64_t w;
		__builtin_memcpy(&w, s, 8);
		__builtin_memcpy(d, &w, 8);
	}
	for (; n > 0; n--)
		*d++ = *s++;
	return dst;
}

__attribute__((no_builtin)) void *memmove(void *dst, const void *src, size_t n) {
	uint8_t *d = dst;
	const uint8_t *s = src;
	if (d == s || n == 0)
		return dst;
	if (d < s || d >= s + n)
		return memcpy(dst, src, n);
	while (n > 0) {
		n--;
		d[n] = s[n];
	}
	return dst;
}

__attribute__((no_builtin)) void *memset(void *dst, int c, size_t n) {
	uint8_t *d = dst;
	uint64_t w = (uint8_t)c * 0x0101010101010101ull;
	for (; n >= 8; n -= 8, d += 8)
		__builtin_memcpy(d, &w, 8);
	for (; n > 0; n--)
		*d++ = (uint8_t)c;
	return dst;
}

__attribute__((no_builtin)) int memcmp(const void *a, const void *b, size_t n) {
	const uint8_t *x = a, *y = b;
	for (size_t i = 0; i < n; i++)
		if (x[i] != y[i])
			return x[i] < y[i] ? -1 : 1;
	return 0;
}

__attribute__((no_builtin)) size_t strlen(const char *s) {
	const char *p = s;
	while (*p)
		p++;
	return (size_t)(p - s);
}

static inline uint32_t le32(const uint8_t *p) {
	uint32_t v;
	__builtin_memcpy(&v, p, 4);
	return v;
}

static inline uint64_t le64(const uint8_t *p) {
	uint64_t v;
	__builtin_memcpy(&v, p, 8);
	return v;
}

static inline void put32(uint8_t *p, uint32_t v) { __builtin_memcpy(p, &v, 4); }
static inline void put64(uint8_t *p, uint64_t v) { __builtin_memcpy(p, &v, 8); }

static inline void copy8(uint8_t *d, const uint8_t *s) {
	uint64_t w;
	__builtin_memcpy(&w, s, 8);
	__builtin_memcpy(d, &w, 8);
}

/* copy is memcpy with the copies of keys and values up to 32 bytes done
 * without a loop, by words that overlap at the end: under a host enforcing
 * call deadlines (wazero's WithCloseOnContextDone) every loop iteration
 * costs a call to a termination check, more than a short copy itself. */
static inline void copy(uint8_t *d, const uint8_t *s, uint32_t n) {
	if (n >= 8) {
		if (n > 32) {
			memcpy(d, s, n);
			return;
		}
		copy8(d, s);
		if (n > 16) {
			copy8(d + 8, s + 8);
			copy8(d + n - 16, s + n - 16);
		}
		copy8(d + n - 8, s + n - 8);
		return;
	}
	if (n >= 4) {
		uint32_t a, b;
		__builtin_memcpy(&a, s, 4);
		__builtin_memcpy(&b, s + n - 4, 4);
		__builtin_memcpy(d, &a, 4);
		__builtin_memcpy(d + n - 4, &b, 4);
		return;
	}
	if (n > 0) {
		d[0] = s[0];
		d[n / 2] = s[n / 2];
		d[n - 1] = s[n - 1];
	}
}

/*
 * The heap: power-of-two size classes with one free list each, carved from
 * linear memory past __heap_base and grown with memory.grow. Every block has
 * an 8-byte header (its class and whether it is in use); blocks keep their
 * class, so a freed block serves the next request of the same class. The
 * SDK allocates at open and when a buffer must grow, never per record.
 */
extern unsigned char __heap_base;

#define HEAP_CLASSES 28 /* 16 B .. 2 GiB */
#define BLOCK_HEADER 8u
#define BLOCK_USED 0x57534d55u /* "UMSW" */
#define BLOCK_FREE 0x57534d46u /* "FMSW" */

typedef struct block {
	uint32_t cls;
	uint32_t mark;
} block;

static struct {
	uintptr_t top, end;
	void *free[HEAP_CLASSES];
} heap;

static int size_class(size_t n) {
	size_t need = n + BLOCK_HEADER;
	int c = 0;
	while (((size_t)16 << c) < need) {
		c++;
		if (c >= HEAP_CLASSES)
			return -1;
	}
	return c;
}

void *ws_malloc(size_t n) {
	int c = size_class(n);
	if (c < 0)
		return 0;
	block *b = heap.free[c];
	if (b) {
		heap.free[c] = *(void **)(b + 1);
	} else {
		if (heap.top == 0) {
			heap.top = ((uintptr_t)&__heap_base + 15) & ~(uintptr_t)15;
			heap.end = (uintptr_t)__builtin_wasm_memory_size(0) * 65536u;
		}
		uint64_t size = (uint64_t)16 << c;
		uint64_t want = (uint64_t)heap.top + size;
		if (want > heap.end) {
			if (want > ((uint64_t)1 << 32))
				return 0;
			uint64_t pages = (want - heap.end + 65535) / 65536;
			if (__builtin_wasm_memory_grow(0, (size_t)pages) == (size_t)-1)
				return 0;
			heap.end += (uintptr_t)(pages * 65536);
		}
		b = (block *)heap.top;
		b->cls = (uint32_t)c;
		heap.top += (uintptr_t)size;
	}
	b->mark = BLOCK_USED;
	return b + 1;
}

void *ws_calloc(size_t count, size_t size) {
	if (size != 0 && count > (size_t)-1 / size)
		return 0;
	void *p = ws_malloc(count * size);
	if (p)
		memset(p, 0, count * size);
	return p;
}

static block *block_of(void *p) {
	block *b = (block *)p - 1;
	if (b->mark != BLOCK_USED)
		__builtin_trap(); /* a pointer ws_malloc did not return, or freed twice */
	return b;
}

void ws_free(void *p) {
	if (!p)
		return;
	block *b = block_of(p);
	b->mark = BLOCK_FREE;
	*(void **)p = heap.free[b->cls];
	heap.free[b->cls] = b;
}

void *ws_realloc(void *p, size_t n) {
	if (!p)
		return ws_malloc(n);
	block *b = block_of(p);
	size_t have = ((size_t)16 << b->cls) - BLOCK_HEADER;
	if (n <= have)
		return p;
	void *q = ws_malloc(n);
	if (!q)
		return 0;
	memcpy(q, p, have);
	ws_free(p);
	return q;
}

/* ---- Formatting ---------------------------------------------------------- */

uint32_t ws_format_int64(char *buf, int64_t v) {
	char tmp[WS_INT64_DIGITS];
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	uint32_t i = sizeof tmp;
	do {
		tmp[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		tmp[--i] = '-';
	uint32_t n = (uint32_t)sizeof tmp - i;
	for (uint32_t j = 0; j < n; j++)
		buf[j] = tmp[i + j];
	return n;
}

int ws_parse_int64(const uint8_t *s, uint32_t len, int64_t *out) {
	uint32_t i = 0;
	int neg = 0;
	if (len > 0 && s[0] == '-') {
		neg = 1;
		i = 1;
	}
	if (i == len)
		return 0;
	uint64_t limit = neg ? (uint64_t)1 << 63 : ((uint64_t)1 << 63) - 1;
	uint64_t v = 0;
	for (; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		uint64_t d = (uint64_t)(s[i] - '0');
		if (v > (limit - d) / 10)
			return 0;
		v = v * 10 + d;
	}
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return 1;
}

typedef struct sbuf {
	char *b;
	uint32_t cap; /* room for cap-1 bytes and a NUL */
	uint32_t n;
} sbuf;

static void sb_byte(sbuf *s, char c) {
	if (s->n + 1 < s->cap)
		s->b[s->n++] = c;
}

static void sb_bytes(sbuf *s, const void *p, uint32_t n) {
	const char *c = p;
	for (uint32_t i = 0; i < n; i++)
		sb_byte(s, c[i]);
}

static void sb_str(sbuf *s, const char *p) { sb_bytes(s, p, (uint32_t)strlen(p)); }

static void sb_u64(sbuf *s, uint64_t v, unsigned base) {
	char tmp[24];
	uint32_t i = sizeof tmp;
	do {
		tmp[--i] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v);
	sb_bytes(s, tmp + i, (uint32_t)sizeof tmp - i);
}

static void sb_i64(sbuf *s, int64_t v) {
	char tmp[WS_INT64_DIGITS];
	sb_bytes(s, tmp, ws_format_int64(tmp, v));
}

/* utf8_len is the length of the valid UTF-8 sequence at p (at most n
 * bytes), or 0 when p does not start one. */
static uint32_t utf8_len(const uint8_t *p, uint32_t n) {
	uint8_t c = p[0];
	uint32_t len;
	uint32_t min;
	uint32_t r;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF) {
		len = 2, min = 0x80, r = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		len = 3, min = 0x800, r = c & 0x0F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4, min = 0x10000, r = c & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (uint32_t i = 1; i < len; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		r = r << 6 | (p[i] & 0x3F);
	}
	if (r < min || r > 0x10FFFF || (r >= 0xD800 && r <= 0xDFFF))
		return 0;
	return len;
}

/* sb_quote writes b as a double-quoted string in the style of Go's %q,
 * cut after max bytes with "..." appended. */
static void sb_quote(sbuf *s, const uint8_t *b, uint32_t n, uint32_t max) {
	uint32_t lim = n > max ? max : n;
	sb_byte(s, '"');
	for (uint32_t i = 0; i < lim;) {
		uint8_t c = b[i];
		if (c >= 0x80) {
			uint32_t l = utf8_len(b + i, lim - i);
			if (l) {
				sb_bytes(s, b + i, l);
				i += l;
				continue;
			}
		}
		i++;
		switch (c) {
		case '"': sb_str(s, "\\\""); continue;
		case '\\': sb_str(s, "\\\\"); continue;
		case '\n': sb_str(s, "\\n"); continue;
		case '\r': sb_str(s, "\\r"); continue;
		case '\t': sb_str(s, "\\t"); continue;
		}
		if (c < 0x20 || c >= 0x7F) {
			sb_str(s, "\\x");
			sb_byte(s, "0123456789abcdef"[c >> 4]);
			sb_byte(s, "0123456789abcdef"[c & 15]);
			continue;
		}
		sb_byte(s, (char)c);
	}
	sb_byte(s, '"');
	if (n > max)
		sb_str(s, "...");
}

static void sb_vformat(sbuf *s, const char *f, va_list ap) {
	for (; *f; f++) {
		if (*f != '%') {
			sb_byte(s, *f);
			continue;
		}
		const char *spec = f++;
		int prec = -1;
		if (f[0] == '.' && f[1] == '*') {
			prec = va_arg(ap, int);
			f += 2;
		}
		int lng = 0; /* 0 int, 1 long, 2 long long, 3 size_t, 4 intmax_t */
		if (*f == 'l' && f[1] == 'l')
			lng = 2, f += 2;
		else if (*f == 'l')
			lng = 1, f++;
		else if (*f == 'z')
			lng = 3, f++;
		else if (*f == 'j')
			lng = 4, f++;
		switch (*f) {
		case 'd':
		case 'i': {
			int64_t v = lng == 0 ? va_arg(ap, int)
			            : lng == 1 ? va_arg(ap, long)
			            : lng == 3 ? (int64_t)va_arg(ap, size_t)
			            : lng == 4 ? va_arg(ap, intmax_t)
			                       : va_arg(ap, long long);
			sb_i64(s, v);
			break;
		}
		case 'u':
		case 'x': {
			uint64_t v = lng == 0 ? va_arg(ap, unsigned)
			             : lng == 1 ? va_arg(ap, unsigned long)
			             : lng == 3 ? va_arg(ap, size_t)
			             : lng == 4 ? (uint64_t)va_arg(ap, uintmax_t)
			                        : va_arg(ap, unsigned long long);
			sb_u64(s, v, *f == 'x' ? 16 : 10);
			break;
		}
		case 'c':
			sb_byte(s, (char)va_arg(ap, int));
			break;
		case 's': {
			const char *p = va_arg(ap, const char *);
			if (!p)
				p = "(null)";
			if (prec >= 0) {
				sb_bytes(s, p, (uint32_t)prec);
			} else {
				sb_str(s, p);
			}
			break;
		}
		case '%':
			sb_byte(s, '%');
			break;
		default:
			/* Unsupported: copy the conversion as written. */
			if (!*f)
				f--;
			sb_bytes(s, spec, (uint32_t)(f - spec + 1));
		}
	}
}

uint32_t ws_quote(char *buf, uint32_t cap, const void *b, uint32_t n) {
	sbuf s = {buf, cap, 0};
	sb_quote(&s, b, n, QUOTE_MAX);
	if (cap > 0)
		buf[s.n] = 0;
	return s.n;
}

uint32_t ws_vformat(char *buf, uint32_t cap, const char *fmt, va_list ap) {
	sbuf s = {buf, cap, 0};
	sb_vformat(&s, fmt, ap);
	if (cap > 0)
		buf[s.n] = 0;
	return s.n;
}

uint32_t ws_format(char *buf, uint32_t cap, const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	uint32_t n = ws_vformat(buf, cap, fmt, ap);
	va_end(ap);
	return n;
}

const char *ws_status_text(int st) {
	switch (st) {
	case WS_OK: return "ok";
	case WS_NOT_FOUND: return "not found";
	case WS_BAD_POINTER: return "pointer out of bounds";
	case WS_BAD_HANDLE: return "bad handle";
	case WS_BAD_OUTPUT: return "bad output";
	case WS_BAD_ARGUMENT: return "bad argument";
	case WS_KEY_GROUP: return "key group not owned by this subtask";
	case WS_NO_KEYED_STATE: return "keyed state outside a keyed context";
	case WS_STATE_ERROR: return "state backend error";
	case WS_LIMIT: return "limit exceeded";
	case WS_UNKNOWN_OPERATOR: return "unknown operator";
	case WS_GUEST_ERROR: return "guest error";
	case WS_NOT_IN_CALLBACK: return "host call outside a callback";
	}
	return "unknown status";
}

/* ---- Module state -------------------------------------------------------- */

typedef struct state_entry {
	const char *name;
	int32_t h;
	int32_t kind;
} state_entry;

typedef struct iter_scratch {
	uint8_t *page;
	uint32_t page_cap;
	uint8_t *after;
	uint32_t after_cap;
} iter_scratch;

/* ---- State cache: types ------------------------------------------------- */

/* Memory for the cache, bump-allocated in blocks that never move during a
 * callback, so that what the cache hands out (and the host was given the
 * address of) stays where it is. */
typedef struct sc_block {
	struct sc_block *prev;
	uint32_t cap, used;
} sc_block;

#define SC_GROUPS 8

/* A group caches state h at namespace ns for the keys of records [start,
 * start + n) of the callback's batch: req holds the state_get_many
 * requests, one per record, res the host's results (and values after
 * them). The result of record i's request names the request of the first
 * record with the same key, whose result is that key's entry: the cache
 * rewrites it on put and delete, with SC_DIRTY in its first field. */
typedef struct sc_group {
	int32_t h;
	uint32_t ns_len;
	const uint8_t *ns;
	uint32_t start, n;
	const uint8_t *req;
	uint8_t *res;
	int slow; /* creating it failed: (h, ns) goes to the host at once */
} sc_group;

typedef struct state_cache {
	sc_group g[SC_GROUPS];
	uint32_t ng;
	uint32_t last;   /* the group of the last access, + 1; 0 for none */
	uint32_t *dirty; /* group << 17 | request index, in the order first written */
	uint32_t ndirty, dirty_cap;
	sc_block *block; /* the newest block; older ones hang off prev */
	uint8_t *list;   /* write lists for the host */
	uint32_t list_cap;
	uint32_t room; /* value bytes per request a group's results leave room for */
	int err;       /* a write-back that failed before the end of the callback */
} state_cache;

struct ws_ctx {
	const ws_operator *op;
	void *data;
	char *name;
	uint8_t *config; /* NUL-terminated copy */
	uint32_t config_len;
	int opening;

	state_entry *states;
	uint32_t nstates, states_cap;

	int64_t wm;
	int wm_valid;

	uint8_t *get_buf;
	uint32_t get_cap;

	iter_scratch *iters;
	uint32_t niters, depth;

	/* The batch of the callback in progress, from the current record (or
	 * timer) on, and its count: what the state cache reads ahead, and where
	 * the current key is (cur_key). bp is 0 outside process and on_timer.
	 * The current record's index is ws_progress. The record loop stores
	 * only bp and ws_progress per record: each store is a bounds-checked
	 * write to linear memory, and the key, its length, the records left and
	 * the index were four more. */
	const uint8_t *bp, *be;
	uint32_t bcount;

	state_cache sc;
};

enum { STATE_VALUE = 1, STATE_MAP = 2 };

static struct {
	/* The argument arena (wstream_alloc): replaced only by a larger one. */
	uint8_t *arena;
	uint32_t arena_cap;

	ws_ctx **slots;
	uint32_t nslots;

	/* The callback's output: an abi batch of out_n records (the count is
	 * written at flush) for one emit_batch call. emit_err is the first emit
	 * failure of the callback, emit_msg its description. */
	uint8_t *out;
	uint32_t out_len, out_cap, out_n;
	int emit_err;
	char emit_msg[256];

	/* The message of the last failure in the callback. */
	char err[ERRMSG_CAP];
	uint32_t err_len;
} M;

static void set_errorv(const char *fmt, va_list ap) { M.err_len = ws_vformat(M.err, sizeof M.err, fmt, ap); }

__attribute__((format(printf, 1, 2))) static void set_error(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	set_errorv(fmt, ap);
	va_end(ap);
}

/* call_error records the failure of a host call on a named thing and
 * returns its status. */
static int call_error(const char *what, const char *name, int st) {
	if (name)
		set_error("%s \"%s\": %s", what, name, ws_status_text(st));
	else
		set_error("%s: %s", what, ws_status_text(st));
	return st;
}

__attribute__((format(printf, 1, 2))) static void host_failf(const char *fmt, ...) {
	char msg[ERRMSG_CAP];
	va_list ap;
	va_start(ap, fmt);
	uint32_t n = ws_vformat(msg, sizeof msg, fmt, ap);
	va_end(ap);
	ws_host_fail(msg, n);
}

int ws_error(ws_ctx *ctx, const char *msg) {
	(void)ctx;
	set_error("%s", msg);
	return WS_GUEST_ERROR;
}

int ws_errorf(ws_ctx *ctx, const char *fmt, ...) {
	(void)ctx;
	va_list ap;
	va_start(ap, fmt);
	set_errorv(fmt, ap);
	va_end(ap);
	return WS_GUEST_ERROR;
}

/* ---- Output -------------------------------------------------------------- */

static void reset_out(void) {
	M.out_len = 0;
	M.out_n = 0;
}

static int flush(void) {
	if (M.emit_err)
		return M.emit_err;
	if (M.out_n == 0)
		return WS_OK;
	uint32_t n = M.out_n;
	put32(M.out, n);
	int32_t st = ws_host_emit_batch(M.out, M.out_len);
	reset_out();
	if (st < 0) {
		M.emit_err = st;
		ws_format(M.emit_msg, sizeof M.emit_msg, "emitting %u records: %s", n, ws_status_text(st));
		return st;
	}
	return WS_OK;
}

static __attribute__((noinline)) int grow_out(uint64_t need) {
	uint64_t cap = (uint64_t)M.out_cap * 2;
	if (cap < need)
		cap = need;
	if (cap < (4u << 10))
		cap = 4u << 10;
	if (need > 0xFFFFFFFFu || cap > 0xFFFFFFFFu) {
		M.emit_err = WS_LIMIT;
		ws_format(M.emit_msg, sizeof M.emit_msg, "emit: a %llu-byte output batch exceeds 4 GiB",
		          (unsigned long long)need);
		return 0;
	}
	uint8_t *b = ws_realloc(M.out, (size_t)cap);
	if (!b) {
		M.emit_err = WS_LIMIT;
		ws_format(M.emit_msg, sizeof M.emit_msg, "emit: out of memory growing the output buffer to %llu bytes",
		          (unsigned long long)cap);
		return 0;
	}
	M.out = b;
	M.out_cap = (uint32_t)cap;
	return 1;
}

/* append adds a record header and key to the output buffer and returns
 * where its value_len value bytes go. A buffer that passed the threshold
 * goes to the host first, so a pointer returned stays valid until the next
 * append. */
static inline uint8_t *append(uint32_t port, const void *key, uint32_t kl, uint32_t vl, int64_t ts) {
	if (__builtin_expect(M.emit_err != 0, 0))
		return 0;
	if (__builtin_expect(M.out_len >= FLUSH_THRESHOLD, 0) && flush() < 0)
		return 0;
	uint32_t n = M.out_len ? M.out_len : BATCH_HEADER;
	uint64_t stop = (uint64_t)n + RECORD_HEADER + kl + vl;
	if (__builtin_expect(stop > M.out_cap, 0) && !grow_out(stop))
		return 0;
	uint8_t *p = M.out + n;
	put32(p, port);
	put64(p + 4, (uint64_t)ts);
	put32(p + 12, kl);
	put32(p + 16, vl);
	copy(p + RECORD_HEADER, key, kl);
	M.out_len = (uint32_t)stop;
	M.out_n++;
	return p + RECORD_HEADER + kl;
}

void ws_emit(ws_ctx *ctx, const void *key, uint32_t key_len, const void *value, uint32_t value_len, int64_t ts) {
	(void)ctx;
	uint8_t *v = append(0, key, key_len, value_len, ts);
	if (v)
		copy(v, value, value_len);
}

void ws_emit_to(ws_ctx *ctx, uint32_t output, const void *key, uint32_t key_len, const void *value,
                uint32_t value_len, int64_t ts) {
	(void)ctx;
	uint8_t *v = append(output, key, key_len, value_len, ts);
	if (v)
		copy(v, value, value_len);
}

uint8_t *ws_emit_reserve(ws_ctx *ctx, uint32_t output, const void *key, uint32_t key_len, uint32_t value_len,
                         int64_t ts) {
	(void)ctx;
	return append(output, key, key_len, value_len, ts);
}

int ws_emit_unbuffered(ws_ctx *ctx, uint32_t output, const void *key, uint32_t key_len, const void *value,
                       uint32_t value_len, int64_t ts) {
	(void)ctx;
	int st = flush();
	if (st < 0) {
		set_error("%s", M.emit_msg);
		return st;
	}
	st = ws_host_emit(output, ts, key, key_len, value, value_len);
	if (st < 0) {
		set_error("emit to output %u: %s", output, ws_status_text(st));
		return st;
	}
	return WS_OK;
}

int ws_output(ws_ctx *ctx, const char *name) {
	(void)ctx;
	int32_t st = ws_host_output_index(name, (uint32_t)strlen(name));
	if (st < 0)
		return call_error("output", name, st);
	return st;
}

/* ---- Context ------------------------------------------------------------- */

const char *ws_operator_name(const ws_ctx *ctx) { return ctx->name; }

void *ws_data(ws_ctx *ctx) { return ctx->data; }

const uint8_t *ws_config(const ws_ctx *ctx, uint32_t *len) {
	if (len)
		*len = ctx->config_len;
	return ctx->config;
}

/* cur_key returns the key of the record or timer in progress, and its
 * length, from its header in the batch: none outside process and on_timer. */
static inline const uint8_t *cur_key(const ws_ctx *c, uint32_t *len) {
	if (!c->bp) {
		*len = 0;
		return 0;
	}
	*len = le32(c->bp + 12);
	return c->bp + RECORD_HEADER;
}

const uint8_t *ws_key(const ws_ctx *ctx, uint32_t *len) {
	uint32_t n;
	const uint8_t *k = cur_key(ctx, &n);
	if (len)
		*len = n;
	return k;
}

int64_t ws_watermark(ws_ctx *ctx) {
	if (!ctx->wm_valid) {
		ctx->wm = ws_host_current_watermark();
		ctx->wm_valid = 1;
	}
	return ctx->wm;
}

int64_t ws_processing_time(ws_ctx *ctx) {
	(void)ctx;
	return ws_host_processing_time();
}

void ws_log(ws_ctx *ctx, int level, const char *msg) {
	(void)ctx;
	ws_host_log(level, msg, (uint32_t)strlen(msg));
}

void ws_log_bytes(ws_ctx *ctx, int level, const void *msg, uint32_t len) {
	(void)ctx;
	ws_host_log(level, msg, len);
}

void ws_logf(ws_ctx *ctx, int level, const char *fmt, ...) {
	(void)ctx;
	char msg[ERRMSG_CAP];
	va_list ap;
	va_start(ap, fmt);
	uint32_t n = ws_vformat(msg, sizeof msg, fmt, ap);
	va_end(ap);
	ws_host_log(level, msg, n);
}

/* ---- Config (a strict JSON reader for top-level members) --------------- */

typedef struct jp {
	const uint8_t *p, *end;
	int depth;
} jp;

#define JSON_MAX_DEPTH 128

static void j_ws(jp *j) {
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int j_lit(jp *j, const char *lit) {
	uint32_t n = (uint32_t)strlen(lit);
	if ((uint32_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0)
		return 0;
	j->p += n;
	return 1;
}

static int hexval(uint8_t c) {
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int j_hex4(jp *j, uint32_t *out) {
	if (j->end - j->p < 4)
		return 0;
	uint32_t v = 0;
	for (int i = 0; i < 4; i++) {
		int h = hexval(j->p[i]);
		if (h < 0)
			return 0;
		v = v << 4 | (uint32_t)h;
	}
	j->p += 4;
	*out = v;
	return 1;
}

static uint32_t utf8_put(uint8_t *d, uint32_t r) {
	if (r < 0x80) {
		d[0] = (uint8_t)r;
		return 1;
	}
	if (r < 0x800) {
		d[0] = (uint8_t)(0xC0 | r >> 6);
		d[1] = (uint8_t)(0x80 | (r & 0x3F));
		return 2;
	}
	if (r < 0x10000) {
		d[0] = (uint8_t)(0xE0 | r >> 12);
		d[1] = (uint8_t)(0x80 | (r >> 6 & 0x3F));
		d[2] = (uint8_t)(0x80 | (r & 0x3F));
		return 3;
	}
	d[0] = (uint8_t)(0xF0 | r >> 18);
	d[1] = (uint8_t)(0x80 | (r >> 12 & 0x3F));
	d[2] = (uint8_t)(0x80 | (r >> 6 & 0x3F));
	d[3] = (uint8_t)(0x80 | (r & 0x3F));
	return 4;
}

/* j_string reads a string at j->p (its opening quote) and, when out is not
 * NULL, writes its decoded bytes there (the decoded form is never longer
 * than the encoded one, so out needs the encoded length). Returns the
 * decoded length, or -1 when the string is malformed. */
static int64_t j_string(jp *j, uint8_t *out) {
	if (j->p >= j->end || *j->p != '"')
		return -1;
	j->p++;
	int64_t n = 0;
	while (j->p < j->end) {
		uint8_t c = *j->p++;
		if (c == '"')
			return n;
		if (c < 0x20)
			return -1;
		if (c != '\\') {
			if (out)
				out[n] = c;
			n++;
			continue;
		}
		if (j->p >= j->end)
			return -1;
		uint8_t e = *j->p++;
		uint8_t lit;
		switch (e) {
		case '"': lit = '"'; break;
		case '\\': lit = '\\'; break;
		case '/': lit = '/'; break;
		case 'b': lit = '\b'; break;
		case 'f': lit = '\f'; break;
		case 'n': lit = '\n'; break;
		case 'r': lit = '\r'; break;
		case 't': lit = '\t'; break;
		case 'u': {
			uint32_t r;
			if (!j_hex4(j, &r))
				return -1;
			if (r >= 0xD800 && r < 0xDC00) {
				/* A high surrogate: a low one must follow to make a pair. */
				const uint8_t *save = j->p;
				uint32_t lo;
				if (j->end - j->p >= 2 && j->p[0] == '\\' && j->p[1] == 'u') {
					j->p += 2;
					if (j_hex4(j, &lo) && lo >= 0xDC00 && lo < 0xE000) {
						r = 0x10000 + ((r - 0xD800) << 10) + (lo - 0xDC00);
					} else {
						j->p = save;
						r = 0xFFFD;
					}
				} else {
					r = 0xFFFD;
				}
			} else if (r >= 0xDC00 && r < 0xE000) {
				r = 0xFFFD;
			}
			uint8_t tmp[4];
			uint32_t l = utf8_put(tmp, r);
			if (out)
				memcpy(out + n, tmp, l);
			n += l;
			continue;
		}
		default:
			return -1;
		}
		if (out)
			out[n] = lit;
		n++;
	}
	return -1;
}

static int j_digits(jp *j) {
	const uint8_t *s = j->p;
	while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
		j->p++;
	return j->p > s;
}

static int j_number(jp *j) {
	if (j->p < j->end && *j->p == '-')
		j->p++;
	if (j->p < j->end && *j->p == '0') {
		j->p++;
	} else if (!j_digits(j)) {
		return 0;
	}
	if (j->p < j->end && *j->p == '.') {
		j->p++;
		if (!j_digits(j))
			return 0;
	}
	if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
		j->p++;
		if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
			j->p++;
		if (!j_digits(j))
			return 0;
	}
	return 1;
}

static int j_value(jp *j);

static int j_container(jp *j, uint8_t close, int object) {
	if (++j->depth > JSON_MAX_DEPTH)
		return 0;
	j->p++;
	j_ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		j->depth--;
		return 1;
	}
	for (;;) {
		if (object) {
			if (j_string(j, 0) < 0)
				return 0;
			j_ws(j);
			if (j->p >= j->end || *j->p != ':')
				return 0;
			j->p++;
			j_ws(j);
		}
		if (!j_value(j))
			return 0;
		j_ws(j);
		if (j->p >= j->end)
			return 0;
		if (*j->p == ',') {
			j->p++;
			j_ws(j);
			continue;
		}
		if (*j->p != close)
			return 0;
		j->p++;
		j->depth--;
		return 1;
	}
}

static int j_value(jp *j) {
	if (j->p >= j->end)
		return 0;
	switch (*j->p) {
	case '{': return j_container(j, '}', 1);
	case '[': return j_container(j, ']', 0);
	case '"': return j_string(j, 0) >= 0;
	case 't': return j_lit(j, "true");
	case 'f': return j_lit(j, "false");
	case 'n': return j_lit(j, "null");
	}
	return j_number(j);
}

enum { JSON_ABSENT = 0, JSON_FOUND = 1, JSON_MALFORMED = -1 };

/* config_member validates the configuration as a JSON object and finds its
 * top-level member (the last one of that name, as Go's encoding/json does).
 * *val..*end is the member's value. */
static int config_member(ws_ctx *c, const char *member, const uint8_t **val, const uint8_t **end) {
	jp j = {c->config, c->config + c->config_len, 0};
	uint32_t mlen = (uint32_t)strlen(member);
	int found = JSON_ABSENT;
	j_ws(&j);
	if (j.p == j.end)
		return JSON_ABSENT; /* empty configuration: keep the defaults */
	if (*j.p != '{')
		return JSON_MALFORMED;
	j.p++;
	j_ws(&j);
	if (j.p < j.end && *j.p == '}') {
		j.p++;
	} else {
		for (;;) {
			const uint8_t *kstart = j.p;
			int64_t klen = j_string(&j, 0);
			if (klen < 0)
				return JSON_MALFORMED;
			int match = 0;
			if (klen == mlen) {
				/* Decode the key again to compare it: keys are short. */
				uint8_t kbuf[MAX_NAME];
				jp k = {kstart, j.p, 0};
				if (mlen <= sizeof kbuf && j_string(&k, kbuf) == klen && memcmp(kbuf, member, mlen) == 0)
					match = 1;
			}
			j_ws(&j);
			if (j.p >= j.end || *j.p != ':')
				return JSON_MALFORMED;
			j.p++;
			j_ws(&j);
			const uint8_t *vstart = j.p;
			if (!j_value(&j))
				return JSON_MALFORMED;
			if (match) {
				*val = vstart;
				*end = j.p;
				found = JSON_FOUND;
			}
			j_ws(&j);
			if (j.p < j.end && *j.p == ',') {
				j.p++;
				j_ws(&j);
				continue;
			}
			if (j.p >= j.end || *j.p != '}')
				return JSON_MALFORMED;
			j.p++;
			break;
		}
	}
	j_ws(&j);
	if (j.p != j.end)
		return JSON_MALFORMED;
	if (found && *end - *val == 4 && memcmp(*val, "null", 4) == 0)
		return JSON_ABSENT;
	return found;
}

static const char *json_type(const uint8_t *v) {
	switch (*v) {
	case '{': return "an object";
	case '[': return "an array";
	case '"': return "a string";
	case 't':
	case 'f': return "a boolean";
	}
	return "a number";
}

static int config_error(ws_ctx *c, const char *member, const char *problem, const uint8_t *v) {
	sbuf s = {M.err, sizeof M.err, 0};
	sb_str(&s, "config ");
	sb_quote(&s, c->config, c->config_len, ABBREV);
	if (!v) {
		sb_str(&s, ": not a JSON object");
	} else {
		sb_str(&s, ": member \"");
		sb_str(&s, member);
		sb_str(&s, "\" is ");
		sb_str(&s, json_type(v));
		sb_str(&s, ", not ");
		sb_str(&s, problem);
	}
	M.err[s.n] = 0;
	M.err_len = s.n;
	return WS_BAD_ARGUMENT;
}

int ws_config_string(ws_ctx *ctx, const char *member, char **out, uint32_t *len) {
	const uint8_t *v = 0, *e = 0;
	int r = config_member(ctx, member, &v, &e);
	if (r == JSON_MALFORMED)
		return config_error(ctx, member, 0, 0);
	if (r == JSON_ABSENT)
		return 0;
	if (*v != '"')
		return config_error(ctx, member, "a string", v);
	char *s = ws_malloc((size_t)(e - v) + 1);
	if (!s) {
		set_error("config member \"%s\": out of memory", member);
		return WS_LIMIT;
	}
	jp j = {v, e, 0};
	int64_t n = j_string(&j, (uint8_t *)s);
	s[n] = 0;
	*out = s;
	if (len)
		*len = (uint32_t)n;
	return 1;
}

int ws_config_int64(ws_ctx *ctx, const char *member, int64_t *out) {
	const uint8_t *v = 0, *e = 0;
	int r = config_member(ctx, member, &v, &e);
	if (r == JSON_MALFORMED)
		return config_error(ctx, member, 0, 0);
	if (r == JSON_ABSENT)
		return 0;
	if (*v != '-' && (*v < '0' || *v > '9'))
		return config_error(ctx, member, "an integer", v);
	if (!ws_parse_int64(v, (uint32_t)(e - v), out)) {
		sbuf s = {M.err, sizeof M.err, 0};
		sb_str(&s, "config member \"");
		sb_str(&s, member);
		sb_str(&s, "\": ");
		sb_bytes(&s, v, (uint32_t)(e - v) > ABBREV ? ABBREV : (uint32_t)(e - v));
		sb_str(&s, " is not an integer that fits in 64 bits");
		M.err[s.n] = 0;
		M.err_len = s.n;
		return WS_BAD_ARGUMENT;
	}
	return 1;
}

int ws_config_bool(ws_ctx *ctx, const char *member, int *out) {
	const uint8_t *v = 0, *e = 0;
	int r = config_member(ctx, member, &v, &e);
	if (r == JSON_MALFORMED)
		return config_error(ctx, member, 0, 0);
	if (r == JSON_ABSENT)
		return 0;
	if (*v != 't' && *v != 'f')
		return config_error(ctx, member, "a boolean", v);
	*out = *v == 't';
	return 1;
}

/* ---- State --------------------------------------------------------------- */

static const char *kind_name(int32_t kind) { return kind == STATE_MAP ? "map" : "value"; }

static int state_lookup(ws_ctx *c, const char *name, int32_t kind, int32_t *h) {
	for (uint32_t i = 0; i < c->nstates; i++) {
		state_entry *e = &c->states[i];
		if (strlen(e->name) == strlen(name) && memcmp(e->name, name, strlen(name)) == 0) {
			if (e->kind != kind) {
				set_error("state \"%s\" is a %s state, not a %s state", name, kind_name(e->kind), kind_name(kind));
				return WS_BAD_ARGUMENT;
			}
			*h = e->h;
			return WS_OK;
		}
	}
	if (!c->opening) {
		set_error("%s state \"%s\" was not registered: call %s(ctx, \"%s\", ...) in open", kind_name(kind), name,
		          kind == STATE_MAP ? "ws_map_state_get" : "ws_value_state_get", name);
		return WS_BAD_HANDLE;
	}
	int32_t st = ws_host_state_register(name, (uint32_t)strlen(name), kind);
	if (st < 0) {
		set_error("registering %s state \"%s\": %s", kind_name(kind), name, ws_status_text(st));
		return st;
	}
	if (c->nstates == c->states_cap) {
		uint32_t cap = c->states_cap ? 2 * c->states_cap : 4;
		state_entry *s = ws_realloc(c->states, cap * sizeof *s);
		if (!s) {
			set_error("registering %s state \"%s\": out of memory", kind_name(kind), name);
			return WS_LIMIT;
		}
		c->states = s;
		c->states_cap = cap;
	}
	c->states[c->nstates++] = (state_entry){name, st, kind};
	*h = st;
	return WS_OK;
}

int ws_value_state_get(ws_ctx *ctx, const char *name, ws_value_state *out) {
	out->h = -1;
	out->name = name;
	return state_lookup(ctx, name, STATE_VALUE, &out->h);
}

int ws_map_state_get(ws_ctx *ctx, const char *name, ws_map_state *out) {
	out->h = -1;
	out->name = name;
	return state_lookup(ctx, name, STATE_MAP, &out->h);
}

static int unregistered(const char *what) {
	set_error("%s: state used before it was obtained in open", what);
	return WS_BAD_HANDLE;
}

/* ---- State cache ----------------------------------------------------------
 *
 * Two host calls per record add up, so state does not cross the ABI per get
 * and put (abi/ABI.md, "How the SDKs use them"). In process and on_timer,
 * the first access to a state at a namespace reads it for the keys of the
 * next SC_CHUNK records from the current one on, in one state_get_many
 * whose requests point at the keys in the batch; the host's results are the
 * cache, which later accesses index by record, without hashing or
 * comparing keys. Writes change the results and mark them dirty; dirty
 * entries go back in state_write_batch calls before a map iteration and
 * when the callback ends. Building with WSTREAM_UNBATCHED_STATE turns the
 * cache off: every state call then crosses the ABI at once, and the module
 * does not import the batched functions.
 */
#ifdef WSTREAM_UNBATCHED_STATE
#define SC_ENABLED 0
#else
#define SC_ENABLED 1
#endif

#define SC_MAX_KEY (64u << 10)   /* the ABI's key and namespace limit */
#define SC_MAX_VALUE (16u << 20) /* the ABI's value limit */
#define SC_MAX_LIST 65536u       /* entries of a state_get_many or state_write_batch */
/* Records a group reads ahead. The host reads them all, then writes back
 * those written: a few at a time, its state lookups stay in its caches. */
#ifndef SC_CHUNK
#define SC_CHUNK 256u
#endif
#define SC_FIRST_BLOCK (16u << 10)
#define SC_KEEP_BLOCK (1u << 20) /* a larger block is freed after the callback */
#define SC_FIRST_ROOM 16u
#define SC_MAX_ROOM 4096u
#define SC_DIRTY 0x80000000u
#define REQUEST_SIZE 16u
#define RESULT_SIZE 12u
#define WRITE_SIZE 28u

static __attribute__((noinline)) uint8_t *sc_new_block(state_cache *sc, uint32_t n) {
	uint64_t cap = sc->block ? (uint64_t)sc->block->cap * 2 : SC_FIRST_BLOCK;
	if (cap < n)
		cap = n;
	if (cap > ((uint64_t)1 << 31))
		return 0;
	sc_block *b = ws_malloc(sizeof *b + (size_t)cap);
	if (!b)
		return 0;
	b->prev = sc->block;
	b->cap = (uint32_t)cap;
	b->used = 0;
	sc->block = b;
	return (uint8_t *)(b + 1);
}

/* sc_room returns n free bytes without taking them (sc_take does). */
static inline uint8_t *sc_room(state_cache *sc, uint32_t n) {
	sc_block *b = sc->block;
	if (b && b->cap - b->used >= n)
		return (uint8_t *)(b + 1) + b->used;
	return sc_new_block(sc, n);
}

static inline void sc_take(state_cache *sc, uint32_t n) { sc->block->used += n; }

static inline uint8_t *sc_alloc(state_cache *sc, uint32_t n) {
	uint8_t *p = sc_room(sc, n);
	if (p)
		sc_take(sc, n);
	return p;
}

static inline uint32_t addr(const void *p) { return (uint32_t)(uintptr_t)p; }

/* sc_reset empties the cache after a callback, keeping its memory for the
 * next one (but no more than SC_KEEP_BLOCK of blocks). */
static void sc_reset(state_cache *sc) {
	sc->err = 0;
	sc->ng = 0;
	sc->last = 0;
	sc->ndirty = 0;
	sc_block *b = sc->block;
	if (b) {
		for (sc_block *p = b->prev; p;) {
			sc_block *q = p->prev;
			ws_free(p);
			p = q;
		}
		b->prev = 0;
		b->used = 0;
		if (b->cap > SC_KEEP_BLOCK) {
			ws_free(b);
			sc->block = 0;
		}
	}
	if (sc->list_cap > SC_KEEP_BLOCK) {
		ws_free(sc->list);
		sc->list = 0;
		sc->list_cap = 0;
	}
}

static void sc_free(state_cache *sc) {
	sc_reset(sc);
	ws_free(sc->block);
	ws_free(sc->dirty);
	ws_free(sc->list);
}

/* same compares n bytes; the short namespaces of the common case without
 * a loop. */
static inline int same(const uint8_t *a, const uint8_t *b, uint32_t n) {
	if (n <= 8) {
		if (n >= 4)
			return le32(a) == le32(b) && le32(a + n - 4) == le32(b + n - 4);
		return n == 0 || (a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1]);
	}
	if (n <= 16)
		return le64(a) == le64(b) && le64(a + n - 8) == le64(b + n - 8);
	return memcmp(a, b, n) == 0;
}

static inline int sc_same_ns(const sc_group *g, const uint8_t *ns, uint32_t nl) {
	return g->ns_len == nl && same(g->ns, ns, nl);
}

/* sc_open makes g the group of (h, ns) for the next SC_CHUNK records from
 * the current one on, read with one state_get_many. A group that cannot be
 * read is slow: its accesses go to the host at once, which reports what
 * went wrong. */
static sc_group *sc_open(ws_ctx *c, sc_group *g, int32_t h, const uint8_t *ns, uint32_t nl) {
	state_cache *sc = &c->sc;
	*g = (sc_group){h, nl, 0, ws_progress, 0, 0, 0, 1};
	uint32_t left = c->bcount - ws_progress;
	uint32_t n = left < SC_CHUNK ? left : SC_CHUNK;
	uint8_t *nsc = sc_alloc(sc, nl);
	uint8_t *req = sc_alloc(sc, REQUEST_SIZE * n);
	if ((!nsc && nl) || !req) {
		g->h = -1; /* out of memory: matches no access, which go to the host */
		return g;
	}
	copy(nsc, ns, nl);
	g->ns = nsc;
	const uint8_t *p = c->bp, *e = c->be;
	uint32_t k = 0;
	/* Unrolled: a loop iteration costs a termination check under a deadline. */
#pragma clang loop unroll_count(4)
	for (; k < n; k++) {
		/* Records past the current one are not checked yet: stop at a
		 * malformed one, which process reports when it gets there. */
		uint32_t left = (uint32_t)(e - p);
		if (left < RECORD_HEADER)
			break;
		uint32_t kl = le32(p + 12), vl = le32(p + 16);
		if ((uint64_t)kl + vl > left - RECORD_HEADER)
			break;
		uint8_t *r = req + REQUEST_SIZE * k;
		put32(r, addr(p + RECORD_HEADER));
		put32(r + 4, kl);
		put32(r + 8, addr(nsc));
		put32(r + 12, nl);
		p += RECORD_HEADER + kl + vl;
	}
	if (!sc->room)
		sc->room = SC_FIRST_ROOM;
	uint64_t cap = (uint64_t)k * (RESULT_SIZE + sc->room);
	uint8_t *res = cap < ((uint64_t)1 << 31) ? sc_room(sc, (uint32_t)cap) : 0;
	if (!res)
		return g;
	int32_t need = ws_host_state_get_many(h, req, REQUEST_SIZE * k, res, (uint32_t)cap);
	if (need < 0)
		return g;
	sc_take(sc, (uint32_t)cap);
	if ((uint32_t)need > cap && k) {
		/* Values were left out, to be read one by one: leave more room
		 * next time. */
		uint32_t per = ((uint32_t)need - RESULT_SIZE * k) / k + 1;
		sc->room = per < SC_MAX_ROOM ? per : SC_MAX_ROOM;
	}
	g->n = k;
	g->req = req;
	g->res = res;
	g->slow = 0;
	return g;
}

static int sc_flush(ws_ctx *c);

/* sc_group_for returns the group that caches (h, ns) for the current
 * record, creating it when there is room; 0 when the access must go to
 * the host at once. */
static sc_group *sc_group_for(ws_ctx *c, int32_t h, const uint8_t *ns, uint32_t nl) {
	state_cache *sc = &c->sc;
	if (sc->last) {
		sc_group *g = &sc->g[sc->last - 1];
		if (g->h == h && ws_progress - g->start < g->n && sc_same_ns(g, ns, nl))
			return g;
	}
	if (!c->bp)
		return 0;
	for (uint32_t i = 0; i < sc->ng; i++) {
		sc_group *g = &sc->g[i];
		if (g->h != h || !sc_same_ns(g, ns, nl))
			continue;
		if (g->slow)
			return 0;
		if (ws_progress - g->start >= g->n) {
			/* Past its records: the group moves on to the next ones. Its
			 * writes go back first, so that the host's answers include
			 * them. */
			int st = sc_flush(c);
			if (st < 0 && !sc->err)
				sc->err = st;
			if (sc_open(c, g, h, ns, nl)->slow)
				return 0;
		}
		sc->last = i + 1;
		return g;
	}
	if (sc->ng == SC_GROUPS)
		return 0;
	sc_group *g = sc_open(c, &sc->g[sc->ng++], h, ns, nl);
	if (g->slow)
		return 0;
	sc->last = sc->ng;
	return g;
}

/* sc_entry returns the result that is the current record's entry in g. */
static inline uint8_t *sc_entry(const sc_group *g) {
	uint32_t f = le32(g->res + RESULT_SIZE * (ws_progress - g->start)) & ~SC_DIRTY;
	return g->res + RESULT_SIZE * f;
}

static const char *state_name(ws_ctx *c, int32_t h) {
	for (uint32_t i = 0; i < c->nstates; i++)
		if (c->states[i].h == h)
			return c->states[i].name;
	return 0;
}

static int sc_write_back(ws_ctx *c, uint32_t len, int32_t h, int one) {
	int32_t st = ws_host_state_write_batch(c->sc.list, len);
	if (st < 0)
		return call_error("write back state", one ? state_name(c, h) : 0, st);
	return WS_OK;
}

/* sc_flush writes the dirty entries back to the host, in state_write_batch
 * calls of at most SC_MAX_LIST writes. */
static int sc_flush(ws_ctx *c) {
	if (!SC_ENABLED)
		return WS_OK; /* and the module does not import state_write_batch */
	state_cache *sc = &c->sc;
	uint32_t nd = sc->ndirty;
	sc->ndirty = 0;
	if (!nd)
		return WS_OK;
	uint32_t per = nd < SC_MAX_LIST ? nd : SC_MAX_LIST;
	if (WRITE_SIZE * per > sc->list_cap) {
		uint8_t *l = ws_malloc(WRITE_SIZE * per);
		if (!l) {
			set_error("write back state: out of memory for %u writes", per);
			return WS_LIMIT;
		}
		ws_free(sc->list);
		sc->list = l;
		sc->list_cap = WRITE_SIZE * per;
	}
	int32_t h = sc->g[sc->dirty[0] >> 17].h;
	int one = 1;
	uint32_t k = 0;
#pragma clang loop unroll_count(4)
	for (uint32_t d = 0; d < nd; d++) {
		if (k == SC_MAX_LIST) {
			int st = sc_write_back(c, WRITE_SIZE * k, h, one);
			if (st < 0)
				return st;
			k = 0;
		}
		const sc_group *g = &sc->g[sc->dirty[d] >> 17];
		uint32_t f = sc->dirty[d] & 0x1ffffu;
		uint8_t *r = g->res + RESULT_SIZE * f;
		const uint8_t *q = g->req + REQUEST_SIZE * f;
		uint8_t *w = sc->list + WRITE_SIZE * k++;
		put32(r, f); /* clean again */
		put32(w, (uint32_t)g->h);
		copy8(w + 4, q);     /* key_ptr, key_len */
		copy8(w + 12, q + 8); /* ns_ptr, ns_len */
		put32(w + 20, le32(r + 8));
		put32(w + 24, le32(r + 4)); /* vlen; -1 (NOT_FOUND) deletes */
		one &= g->h == h;
	}
	return sc_write_back(c, WRITE_SIZE * k, h, one);
}

/* ---- State: reads and writes ------------------------------------------- */

/* read_direct reads (current key, ns) of handle h with state_get into the
 * context's read buffer, growing it when the host reports a larger value. */
static int read_direct(ws_ctx *c, int32_t h, const char *name, const void *ns, uint32_t ns_len, const uint8_t **val,
                       uint32_t *len) {
	for (int attempt = 0;; attempt++) {
		uint32_t kl;
		const uint8_t *key = cur_key(c, &kl);
		int32_t n = ws_host_state_get(h, key, kl, ns, ns_len, c->get_buf, c->get_cap);
		if (n == WS_NOT_FOUND)
			return 0;
		if (n < 0)
			return call_error("get state", name, n);
		if ((uint32_t)n <= c->get_cap) {
			*val = c->get_buf;
			*len = (uint32_t)n;
			return 1;
		}
		if (attempt > 0) {
			/* The value cannot change between two calls of one callback. */
			set_error("get state \"%s\": host reported %d bytes after %u: %s", name, n, c->get_cap,
			          ws_status_text(WS_STATE_ERROR));
			return WS_STATE_ERROR;
		}
		uint32_t cap = 2 * c->get_cap > (uint32_t)n ? 2 * c->get_cap : (uint32_t)n;
		uint8_t *b = ws_malloc(cap);
		if (!b) {
			set_error("get state \"%s\": out of memory for a %d-byte value", name, n);
			return WS_LIMIT;
		}
		ws_free(c->get_buf);
		c->get_buf = b;
		c->get_cap = cap;
	}
}

/* state_read reads (current key, ns) of handle h: from the cache, or with
 * state_get for what the cache lacks. */
static int state_read(ws_ctx *c, int32_t h, const char *name, const void *ns, uint32_t ns_len, const uint8_t **val,
                      uint32_t *len) {
	*val = 0;
	*len = 0;
	if (h < 0)
		return unregistered("get state");
	sc_group *g = SC_ENABLED ? sc_group_for(c, h, ns, ns_len) : 0;
	if (!g)
		return read_direct(c, h, name, ns, ns_len, val, len);
	uint8_t *r = sc_entry(g);
	int32_t vlen = (int32_t)le32(r + 4);
	uint32_t vptr = le32(r + 8);
	if (vlen >= 0 && vptr) {
		*val = (const uint8_t *)(uintptr_t)vptr;
		*len = (uint32_t)vlen;
		return 1;
	}
	if (vlen == WS_NOT_FOUND)
		return 0;
	/* A value left out of the results, or a status: state_get reads the
	 * one, reports the other. */
	int found = read_direct(c, h, name, ns, ns_len, val, len);
	if (found <= 0)
		return found;
	uint8_t *v = sc_alloc(&c->sc, *len);
	if (!v && *len)
		return found; /* valid until the next read: what read_direct promises */
	copy(v, *val, *len);
	put32(r + 4, *len);
	put32(r + 8, addr(v));
	*val = v;
	return 1;
}

/* sc_dirty marks result r of group g dirty, for the write-back. */
static inline int sc_dirty(state_cache *sc, const sc_group *g, uint8_t *r, const char *what, const char *name) {
	uint32_t first = le32(r);
	if (first & SC_DIRTY)
		return WS_OK;
	if (sc->ndirty == sc->dirty_cap) {
		uint32_t cap = sc->dirty_cap ? 2 * sc->dirty_cap : 256;
		uint32_t *d = ws_realloc(sc->dirty, (size_t)cap * sizeof *d);
		if (!d) {
			set_error("%s \"%s\": out of memory", what, name);
			return WS_LIMIT;
		}
		sc->dirty = d;
		sc->dirty_cap = cap;
	}
	sc->dirty[sc->ndirty++] = (uint32_t)(g - sc->g) << 17 | first;
	put32(r, first | SC_DIRTY);
	return WS_OK;
}

/* state_write records a put (del 0) or a delete in the cache, for the
 * write-back, or makes it at once when the cache does not hold the entry;
 * sizes over the ABI's limits are refused at once. */
static int state_write(ws_ctx *c, int32_t h, const char *what, const char *name, const void *ns, uint32_t ns_len,
                       const void *val, uint32_t len, int del) {
	if (h < 0)
		return unregistered(what);
	sc_group *g = 0;
	uint32_t kl;
	const uint8_t *key = cur_key(c, &kl);
	if (SC_ENABLED) {
		if (kl > SC_MAX_KEY || ns_len > SC_MAX_KEY || (!del && len > SC_MAX_VALUE))
			return call_error(what, name, WS_LIMIT);
		g = sc_group_for(c, h, ns, ns_len);
	}
	if (!g) {
		int32_t st = del ? ws_host_state_delete(h, key, kl, ns, ns_len)
		                 : ws_host_state_put(h, key, kl, ns, ns_len, val, len);
		return st < 0 ? call_error(what, name, st) : WS_OK;
	}
	state_cache *sc = &c->sc;
	uint8_t *r = sc_entry(g);
	uint8_t *v = 0;
	if (!del) {
		v = sc_alloc(sc, len);
		if (!v) {
			set_error("%s \"%s\": out of memory for %u bytes", what, name, len);
			return WS_LIMIT;
		}
		copy(v, val, len);
	}
	int st = sc_dirty(sc, g, r, what, name);
	if (st < 0)
		return st;
	put32(r + 4, del ? (uint32_t)WS_NOT_FOUND : len);
	put32(r + 8, del ? 0 : addr(v));
	return WS_OK;
}

int ws_value_get_ns(ws_ctx *ctx, ws_value_state s, const void *ns, uint32_t ns_len, const uint8_t **val,
                    uint32_t *len) {
	return state_read(ctx, s.h, s.name, ns, ns_len, val, len);
}

int ws_value_get(ws_ctx *ctx, ws_value_state s, const uint8_t **val, uint32_t *len) {
	return state_read(ctx, s.h, s.name, 0, 0, val, len);
}

int ws_value_put_ns(ws_ctx *ctx, ws_value_state s, const void *ns, uint32_t ns_len, const void *val, uint32_t len) {
	return state_write(ctx, s.h, "put value state", s.name, ns, ns_len, val, len, 0);
}

int ws_value_put(ws_ctx *ctx, ws_value_state s, const void *val, uint32_t len) {
	return ws_value_put_ns(ctx, s, 0, 0, val, len);
}

int ws_value_delete_ns(ws_ctx *ctx, ws_value_state s, const void *ns, uint32_t ns_len) {
	return state_write(ctx, s.h, "delete value state", s.name, ns, ns_len, 0, 0, 1);
}

int ws_value_delete(ws_ctx *ctx, ws_value_state s) { return ws_value_delete_ns(ctx, s, 0, 0); }

int ws_value_get_int64_ns(ws_ctx *ctx, ws_value_state s, const void *ns, uint32_t ns_len, int64_t *v) {
	const uint8_t *b;
	uint32_t n;
	*v = 0;
	int r = state_read(ctx, s.h, s.name, ns, ns_len, &b, &n);
	if (r <= 0)
		return r;
	if (n != 8) {
		set_error("value state \"%s\" holds %u bytes, not an 8-byte int64: %s", s.name, n,
		          ws_status_text(WS_BAD_ARGUMENT));
		return WS_BAD_ARGUMENT;
	}
	*v = (int64_t)le64(b);
	return 1;
}

int ws_value_get_int64(ws_ctx *ctx, ws_value_state s, int64_t *v) { return ws_value_get_int64_ns(ctx, s, 0, 0, v); }

int ws_value_add_int64_ns(ws_ctx *ctx, ws_value_state s, const void *ns, uint32_t ns_len, int64_t delta,
                          int64_t *sum) {
	*sum = 0;
	if (s.h < 0)
		return unregistered("add to value state");
	sc_group *g = SC_ENABLED && ns_len <= SC_MAX_KEY ? sc_group_for(ctx, s.h, ns, ns_len) : 0;
	if (g) {
		/* The cached entry: read and written with one lookup. */
		uint8_t *r = sc_entry(g);
		int32_t vlen = (int32_t)le32(r + 4);
		uint32_t vptr = le32(r + 8);
		if ((vlen == 8 && vptr) || vlen == WS_NOT_FOUND) {
			uint8_t *v = sc_alloc(&ctx->sc, 8);
			if (!v) {
				set_error("add to value state \"%s\": out of memory", s.name);
				return WS_LIMIT;
			}
			int found = vlen == 8;
			uint64_t n = (found ? le64((const uint8_t *)(uintptr_t)vptr) : 0) + (uint64_t)delta;
			put64(v, n);
			int st = sc_dirty(&ctx->sc, g, r, "add to value state", s.name);
			if (st < 0)
				return st;
			put32(r + 4, 8);
			put32(r + 8, addr(v));
			*sum = (int64_t)n;
			return found;
		}
	}
	int64_t n;
	int found = ws_value_get_int64_ns(ctx, s, ns, ns_len, &n);
	if (found < 0)
		return found;
	n = (int64_t)((uint64_t)n + (uint64_t)delta);
	int st = ws_value_put_int64_ns(ctx, s, ns, ns_len, n);
	if (st < 0)
		return st;
	*sum = n;
	return found;
}

int ws_value_add_int64(ws_ctx *ctx, ws_value_state s, int64_t delta, int64_t *sum) {
	return ws_value_add_int64_ns(ctx, s, 0, 0, delta, sum);
}

int ws_value_put_int64_ns(ws_ctx *ctx, ws_value_state s, const void *ns, uint32_t ns_len, int64_t v) {
	uint8_t b[8];
	put64(b, (uint64_t)v);
	return ws_value_put_ns(ctx, s, ns, ns_len, b, 8);
}

int ws_value_put_int64(ws_ctx *ctx, ws_value_state s, int64_t v) { return ws_value_put_int64_ns(ctx, s, 0, 0, v); }

int ws_map_get(ws_ctx *ctx, ws_map_state m, const void *k, uint32_t k_len, const uint8_t **val, uint32_t *len) {
	return state_read(ctx, m.h, m.name, k, k_len, val, len);
}

int ws_map_put(ws_ctx *ctx, ws_map_state m, const void *k, uint32_t k_len, const void *val, uint32_t len) {
	return state_write(ctx, m.h, "put map state", m.name, k, k_len, val, len, 0);
}

int ws_map_delete(ws_ctx *ctx, ws_map_state m, const void *k, uint32_t k_len) {
	return state_write(ctx, m.h, "delete map state", m.name, k, k_len, 0, 0, 1);
}

static int malformed_page(const char *name, const char *what) {
	set_error("iterate map state \"%s\": %s", name, what);
	return WS_STATE_ERROR;
}

static int range_run(ws_ctx *c, iter_scratch *sc, ws_map_state m, const void *prefix, uint32_t prefix_len,
                     ws_map_fn fn, void *arg) {
	int32_t after_len = -1;
	uint32_t kl;
	const uint8_t *key = cur_key(c, &kl);
	for (;;) {
		int32_t n = ws_host_state_iter(m.h, key, kl, prefix, prefix_len, sc->after, after_len, sc->page, sc->page_cap);
		if (n == WS_LIMIT) {
			/* Not even one entry fits: grow and ask again from the same place. */
			if (sc->page_cap >= MAX_PAGE)
				return call_error("iterate map state", m.name, n);
			uint32_t cap = 2 * sc->page_cap < MAX_PAGE ? 2 * sc->page_cap : MAX_PAGE;
			uint8_t *p = ws_malloc(cap);
			if (!p) {
				set_error("iterate map state \"%s\": out of memory for a %u-byte page", m.name, cap);
				return WS_LIMIT;
			}
			ws_free(sc->page);
			sc->page = p;
			sc->page_cap = cap;
			continue;
		}
		if (n < 0)
			return call_error("iterate map state", m.name, n);
		if (n == 0)
			return WS_OK;
		if ((uint32_t)n > sc->page_cap)
			return malformed_page(m.name, "the host wrote past the page buffer");
		const uint8_t *b = sc->page, *end = sc->page + n;
		const uint8_t *last = 0;
		uint32_t last_len = 0;
		while (b < end) {
			if (end - b < 8)
				return malformed_page(m.name, "truncated entry header");
			uint64_t nl = le32(b), vl = le32(b + 4);
			if (8 + nl + vl > (uint64_t)(end - b))
				return malformed_page(m.name, "an entry overruns the page");
			last = b + 8;
			last_len = (uint32_t)nl;
			int r = fn(arg, b + 8, (uint32_t)nl, b + 8 + nl, (uint32_t)vl);
			if (r < 0)
				return r;
			if (r > 0)
				return WS_OK;
			b += 8 + nl + vl;
		}
		/* The next call writes into the page, which last points into. */
		if (last_len > sc->after_cap) {
			uint8_t *a = ws_malloc(last_len);
			if (!a) {
				set_error("iterate map state \"%s\": out of memory", m.name);
				return WS_LIMIT;
			}
			ws_free(sc->after);
			sc->after = a;
			sc->after_cap = last_len;
		}
		copy(sc->after, last, last_len);
		after_len = (int32_t)last_len;
	}
}

int ws_map_range(ws_ctx *ctx, ws_map_state m, const void *prefix, uint32_t prefix_len, ws_map_fn fn, void *arg) {
	if (m.h < 0)
		return unregistered("iterate map state");
	/* The host iterates its own state: hand it the cached writes first. */
	int fs = sc_flush(ctx);
	if (fs < 0)
		return fs;
	/* Each nesting depth pages through its own buffers, kept for later. */
	if (ctx->depth == ctx->niters) {
		iter_scratch *it = ws_realloc(ctx->iters, (ctx->niters + 1) * sizeof *it);
		uint8_t *page = ws_malloc(INITIAL_PAGE);
		if (!it || !page) {
			if (it)
				ctx->iters = it;
			ws_free(page);
			set_error("iterate map state \"%s\": out of memory", m.name);
			return WS_LIMIT;
		}
		ctx->iters = it;
		ctx->iters[ctx->niters++] = (iter_scratch){page, INITIAL_PAGE, 0, 0};
	}
	iter_scratch *sc = &ctx->iters[ctx->depth++];
	int r = range_run(ctx, sc, m, prefix, prefix_len, fn, arg);
	ctx->depth--;
	return r;
}

/* ---- Timers -------------------------------------------------------------- */

static const char *domain_name(int32_t d) {
	return d == WS_EVENT_TIME ? "event time" : d == WS_PROCESSING_TIME ? "processing time" : "unknown-domain";
}

int ws_timer_register(ws_ctx *ctx, int32_t domain, int64_t ts, const void *ns, uint32_t ns_len) {
	uint32_t kl;
	const uint8_t *key = cur_key(ctx, &kl);
	int32_t st = ws_host_timer_register(domain, key, kl, ns, ns_len, ts);
	if (st < 0) {
		set_error("register %s timer at %lld: %s", domain_name(domain), (long long)ts, ws_status_text(st));
		return st;
	}
	return WS_OK;
}

int ws_timer_delete(ws_ctx *ctx, int32_t domain, int64_t ts, const void *ns, uint32_t ns_len) {
	uint32_t kl;
	const uint8_t *key = cur_key(ctx, &kl);
	int32_t st = ws_host_timer_delete(domain, key, kl, ns, ns_len, ts);
	if (st < 0) {
		set_error("delete %s timer at %lld: %s", domain_name(domain), (long long)ts, ws_status_text(st));
		return st;
	}
	return WS_OK;
}

int ws_register_event_timer(ws_ctx *ctx, int64_t ts, const void *ns, uint32_t ns_len) {
	return ws_timer_register(ctx, WS_EVENT_TIME, ts, ns, ns_len);
}

int ws_register_processing_timer(ws_ctx *ctx, int64_t ts, const void *ns, uint32_t ns_len) {
	return ws_timer_register(ctx, WS_PROCESSING_TIME, ts, ns, ns_len);
}

int ws_delete_event_timer(ws_ctx *ctx, int64_t ts, const void *ns, uint32_t ns_len) {
	return ws_timer_delete(ctx, WS_EVENT_TIME, ts, ns, ns_len);
}

int ws_delete_processing_timer(ws_ctx *ctx, int64_t ts, const void *ns, uint32_t ns_len) {
	return ws_timer_delete(ctx, WS_PROCESSING_TIME, ts, ns, ns_len);
}

/* ---- Exports ------------------------------------------------------------- */

static void begin(ws_ctx *c) {
	c->bp = 0;
	c->wm_valid = 0;
	reset_out();
	M.emit_err = 0;
	M.err_len = 0;
	M.err[0] = 0;
}

/* what describes the failing item: the record or timer, or nothing. */
typedef struct what {
	int kind; /* 0 none, 1 record, 2 timer, 3 checkpoint */
	uint32_t index, count;
	int32_t domain;
	int64_t ts;
	const uint8_t *key;
	uint32_t key_len;
} what;

static int32_t fail_callback(ws_ctx *c, const char *phase, int rc, const what *w, const char *msg) {
	char buf[ERRMSG_CAP + 512];
	sbuf s = {buf, sizeof buf, 0};
	reset_out();
	sb_str(&s, "operator ");
	sb_quote(&s, (const uint8_t *)c->name, (uint32_t)strlen(c->name), MAX_NAME);
	sb_str(&s, ": ");
	sb_str(&s, phase);
	sb_str(&s, ": ");
	if (w && w->kind == 1) {
		sb_str(&s, "record ");
		sb_u64(&s, w->index, 10);
		sb_str(&s, " of ");
		sb_u64(&s, w->count, 10);
		sb_str(&s, " (key ");
		sb_quote(&s, w->key, w->key_len, ABBREV);
		sb_str(&s, "): ");
	} else if (w && w->kind == 2) {
		sb_str(&s, domain_name(w->domain));
		sb_str(&s, " timer at ");
		sb_i64(&s, w->ts);
		sb_str(&s, " (key ");
		sb_quote(&s, w->key, w->key_len, ABBREV);
		sb_str(&s, "): ");
	} else if (w && w->kind == 3) {
		sb_str(&s, "checkpoint ");
		sb_i64(&s, w->ts);
		sb_str(&s, ": ");
	}
	if (msg && *msg) {
		sb_str(&s, msg);
	} else {
		sb_str(&s, "callback returned ");
		sb_i64(&s, rc);
		if (rc < 0) {
			sb_str(&s, " (");
			sb_str(&s, ws_status_text(rc));
			sb_str(&s, ")");
		}
	}
	ws_host_fail(buf, s.n);
	return WS_GUEST_ERROR;
}

/* end finishes a callback: it reports rc != 0, or else hands the buffered
 * output to the host. */
static int32_t end(ws_ctx *c, const char *phase, int rc, const what *w) {
	c->bp = 0;
	/* The cached writes reach the host whether the callback succeeds or
	 * fails, as the unbatched calls would have. */
	int fs = sc_flush(c);
	if (fs == 0)
		fs = c->sc.err;
	sc_reset(&c->sc);
	if (rc != 0)
		return fail_callback(c, phase, rc, w, M.err);
	if (fs < 0)
		return fail_callback(c, phase, fs, 0, M.err);
	if (flush() < 0)
		return fail_callback(c, phase, M.emit_err, 0, M.emit_msg);
	return WS_OK;
}

static ws_ctx *slot(int32_t op) {
	if (op < 0 || (uint32_t)op >= M.nslots)
		return 0;
	return M.slots[op];
}

static int32_t no_slot(const char *export, int32_t op) {
	host_failf("%s: operator slot %d is not open", export, op);
	return WS_BAD_HANDLE;
}

/* region resolves a (ptr, len) pair the host passed: it must lie inside the
 * arena wstream_alloc returned. */
static int region(const char *export, uint32_t ptr, int32_t len, const uint8_t **out) {
	if (len == 0) {
		*out = M.arena;
		return 1;
	}
	uint32_t base = (uint32_t)(uintptr_t)M.arena;
	if (len < 0 || !M.arena || ptr < base || (uint64_t)(ptr - base) + (uint32_t)len > M.arena_cap) {
		host_failf("%s: region [%#x, +%d) lies outside the %u-byte argument arena returned by wstream_alloc",
		           export, ptr, len, M.arena_cap);
		return 0;
	}
	*out = (const uint8_t *)(uintptr_t)ptr;
	return 1;
}

static int32_t bad_batch(ws_ctx *c, const char *kind, const char *problem, uint32_t index, uint32_t off) {
	reset_out();
	c->bp = 0;
	sc_flush(c);
	sc_reset(&c->sc);
	if (off == 0)
		host_failf("operator \"%s\": %s batch from the host: malformed batch: %u bytes is %s", c->name, kind, index,
		           problem);
	else
		host_failf("operator \"%s\": %s batch from the host: malformed batch: record %u at offset %u: %s", c->name,
		           kind, index, off, problem);
	return WS_BAD_ARGUMENT;
}

static int32_t trailing(ws_ctx *c, const char *kind, uint32_t extra, uint32_t count) {
	reset_out();
	c->bp = 0;
	sc_flush(c);
	sc_reset(&c->sc);
	host_failf("operator \"%s\": %s batch from the host: malformed batch: %u trailing bytes after %u records", c->name,
	           kind, extra, count);
	return WS_BAD_ARGUMENT;
}

WS_EXPORT("wstream_abi_version") int32_t wstream_abi_version(void) { return WSTREAM_ABI_VERSION; }

WS_EXPORT("wstream_alloc") uint32_t wstream_alloc(int32_t size) {
	if (size < 0)
		return 0;
	if ((uint32_t)size > M.arena_cap || !M.arena) {
		/* Grow geometrically so that a host growing batches step by step
		 * does not reallocate on every step. */
		uint64_t cap = (uint64_t)M.arena_cap * 2;
		if (cap < (uint32_t)size)
			cap = (uint32_t)size;
		if (cap < (64u << 10))
			cap = 64u << 10;
		uint8_t *a = ws_malloc((size_t)cap);
		if (!a && cap > (uint32_t)size)
			a = ws_malloc((size_t)(cap = (uint32_t)size ? (uint32_t)size : 1));
		if (!a)
			return 0;
		ws_free(M.arena);
		M.arena = a;
		M.arena_cap = (uint32_t)cap;
	}
	return (uint32_t)(uintptr_t)M.arena;
}

static const ws_operator *find_operator(const uint8_t *name, uint32_t len) {
	for (const ws_operator *const *o = wstream_operators; *o; o++) {
		const char *n = (*o)->name;
		if (n && strlen(n) == len && memcmp(n, name, len) == 0)
			return *o;
	}
	return 0;
}

static void free_ctx(ws_ctx *c) {
	for (uint32_t i = 0; i < c->niters; i++) {
		ws_free(c->iters[i].page);
		ws_free(c->iters[i].after);
	}
	ws_free(c->iters);
	sc_free(&c->sc);
	ws_free(c->states);
	ws_free(c->get_buf);
	ws_free(c->config);
	ws_free(c->name);
	ws_free(c->data);
	ws_free(c);
}

static int32_t out_of_memory(const char *export, const char *what) {
	host_failf("%s: out of memory allocating %s", export, what);
	return WS_LIMIT;
}

WS_EXPORT("wstream_open")
int32_t wstream_open(int32_t op, uint32_t name_ptr, int32_t name_len, uint32_t cfg_ptr, int32_t cfg_len) {
	const uint8_t *name, *cfg;
	if (!region("wstream_open", name_ptr, name_len, &name) || !region("wstream_open", cfg_ptr, cfg_len, &cfg))
		return WS_BAD_POINTER;
	if (op < 0 || op >= MAX_SLOTS) {
		host_failf("wstream_open: operator slot %d is outside [0, %d)", op, MAX_SLOTS);
		return WS_BAD_HANDLE;
	}
	if (slot(op)) {
		host_failf("wstream_open: operator slot %d is already open (operator \"%s\")", op, M.slots[op]->name);
		return WS_BAD_HANDLE;
	}
	const ws_operator *o = find_operator(name, (uint32_t)name_len);
	if (!o) {
		char buf[ERRMSG_CAP];
		sbuf s = {buf, sizeof buf, 0};
		sb_str(&s, "wstream_open: the module has no operator ");
		sb_quote(&s, name, (uint32_t)name_len, MAX_NAME);
		sb_str(&s, "; it has [");
		for (const ws_operator *const *p = wstream_operators; *p; p++) {
			if (p != wstream_operators)
				sb_byte(&s, ' ');
			sb_quote(&s, (const uint8_t *)(*p)->name, (uint32_t)strlen((*p)->name), MAX_NAME);
		}
		sb_byte(&s, ']');
		ws_host_fail(buf, s.n);
		return WS_UNKNOWN_OPERATOR;
	}
	if ((uint32_t)op >= M.nslots) {
		uint32_t n = M.nslots ? M.nslots : 4;
		while (n <= (uint32_t)op)
			n *= 2;
		ws_ctx **s = ws_realloc(M.slots, n * sizeof *s);
		if (!s)
			return out_of_memory("wstream_open", "the slot table");
		for (uint32_t i = M.nslots; i < n; i++)
			s[i] = 0;
		M.slots = s;
		M.nslots = n;
	}
	if (!ws_progress_named) {
		ws_progress_named = 1;
		ws_host_progress_at(&ws_progress);
	}
	ws_ctx *c = ws_calloc(1, sizeof *c);
	if (!c)
		return out_of_memory("wstream_open", "the operator context");
	c->op = o;
	c->name = ws_malloc((size_t)name_len + 1);
	c->config = ws_malloc((size_t)cfg_len + 1);
	c->get_buf = ws_malloc(INITIAL_GET_BUF);
	c->get_cap = INITIAL_GET_BUF;
	c->data = o->data_size ? ws_calloc(1, o->data_size) : 0;
	if (!c->name || !c->config || !c->get_buf || (o->data_size && !c->data)) {
		free_ctx(c);
		return out_of_memory("wstream_open", "the operator context");
	}
	memcpy(c->name, name, (size_t)name_len);
	c->name[name_len] = 0;
	memcpy(c->config, cfg, (size_t)cfg_len);
	c->config[cfg_len] = 0;
	c->config_len = (uint32_t)cfg_len;

	begin(c);
	int rc = 0;
	if (o->open) {
		c->opening = 1;
		rc = o->open(c);
		c->opening = 0;
	}
	int32_t st = end(c, "open", rc, 0);
	if (st != WS_OK) {
		free_ctx(c);
		return st;
	}
	M.slots[op] = c;
	return WS_OK;
}

void ws_migrate_error(const char *msg) {
	uint32_t n = 0;
	while (msg[n])
		n++;
	ws_host_fail(msg, n);
}

int64_t ws_migrate_run_(ws_migrate_fn fn, uint32_t op_ptr, int32_t op_len, uint32_t state_ptr, int32_t state_len,
                        int32_t version, uint32_t key_ptr, int32_t key_len, uint32_t ns_ptr, int32_t ns_len,
                        uint32_t val_ptr, int32_t val_len) {
	const uint8_t *op, *state, *key, *ns, *val;
	if (!region("wstream_migrate", op_ptr, op_len, &op) || !region("wstream_migrate", state_ptr, state_len, &state) ||
	    !region("wstream_migrate", key_ptr, key_len, &key) || !region("wstream_migrate", ns_ptr, ns_len, &ns) ||
	    !region("wstream_migrate", val_ptr, val_len, &val))
		return WS_BAD_POINTER;
	const uint8_t *out = 0;
	uint32_t out_len = 0;
	int st = fn((const char *)op, (uint32_t)op_len, (const char *)state, (uint32_t)state_len, version, key,
	            (uint32_t)key_len, ns, (uint32_t)ns_len, val, (uint32_t)val_len, &out, &out_len);
	if (st != 0)
		return st < 0 ? st : WS_BAD_ARGUMENT;
	if (out_len == 0)
		return 0;
	return (int64_t)(((uint64_t)(uintptr_t)out << 32) | (uint64_t)out_len);
}

/* first_commit asks the host where the batch callback starting marks its
 * first commit point (commit): a record's index, or 0xFFFFFFFF for none. */
static uint32_t first_commit(void) {
	int32_t st = ws_host_commit(0);
	return st > 0 ? (uint32_t)st : 0xFFFFFFFFu;
}

/* commit_point marks a commit point before record (or timer) i: the cached
 * state writes and the buffered output of the records before it go to the
 * host, which keeps them should the callback fail later (dead-letter mode
 * then runs again only the records after it). It sets *next to the next
 * point the host asks for and returns 0, or a status with the error set. */
static __attribute__((noinline)) int commit_point(ws_ctx *c, uint32_t i, uint32_t *next) {
	ws_progress = 0xFFFFFFFFu; /* a failure in here is no record's */
	int st = sc_flush(c);
	if (st == 0)
		st = c->sc.err;
	if (st < 0)
		return st;
	if (flush() < 0) {
		set_error("%s", M.emit_msg);
		return M.emit_err;
	}
	int32_t r = ws_host_commit(i);
	if (r < 0) {
		set_error("commit point before record %u: %s", i, ws_status_text(r));
		return r;
	}
	*next = r > 0 ? i + (uint32_t)r : 0xFFFFFFFFu;
	return 0;
}

WS_EXPORT("wstream_process") int32_t wstream_process(int32_t op, uint32_t ptr, int32_t len) {
	ws_ctx *c = slot(op);
	if (!c)
		return no_slot("wstream_process", op);
	const uint8_t *b;
	if (!region("wstream_process", ptr, len, &b))
		return WS_BAD_POINTER;
	if ((uint32_t)len < BATCH_HEADER)
		return bad_batch(c, "input", "shorter than the 4-byte header", (uint32_t)len, 0);
	begin(c);
	int (*process)(ws_ctx *, const ws_record *) = c->op->process;
	const uint8_t *p = b + BATCH_HEADER, *e = b + len;
	uint32_t count = le32(b);
	c->be = e;
	c->bcount = count;
	if (count > 0 && !process) {
		set_error("%u records arrived but the operator has no process callback", count);
		return end(c, "process", WS_GUEST_ERROR, 0);
	}
	ws_record r;
	/* The records run in stretches between commit points (one stretch
	 * when the host asks for none), so that the record loop itself checks
	 * nothing more per record. */
	uint32_t i = 0, next = first_commit();
	for (;;) {
		uint32_t stop = next < count ? next : count;
		/* Unrolled: wazero's deadline checks (WithCloseOnContextDone) cost a call
		 * per loop iteration; four records per iteration pay a quarter of it. */
#pragma clang loop unroll_count(4)
		for (; i < stop; i++) {
			uint32_t left = (uint32_t)(e - p);
			if (left < RECORD_HEADER)
				return bad_batch(c, "input", "header truncated", i, (uint32_t)(p - b));
			uint32_t kl = le32(p + 12), vl = le32(p + 16);
			if ((uint64_t)kl + vl > left - RECORD_HEADER)
				return bad_batch(c, "input", "key and value overrun the batch", i, (uint32_t)(p - b));
			r.input = le32(p);
			r.ts = (int64_t)le64(p + 4);
			r.key = p + RECORD_HEADER;
			r.key_len = kl;
			r.value = r.key + kl;
			r.value_len = vl;
			c->bp = p;
			ws_progress = i;
			int rc = process(c, &r);
			if (__builtin_expect(rc != 0, 0)) {
				what w = {1, i, count, 0, 0, r.key, kl};
				return end(c, "process", rc, &w);
			}
			p = r.value + vl;
		}
		if (i >= count)
			break;
		int st = commit_point(c, i, &next);
		if (st < 0)
			return end(c, "process", st, 0);
	}
	/* A failure from here on is no record's. */
	ws_progress = 0xFFFFFFFFu;
	if (p != e)
		return trailing(c, "input", (uint32_t)(e - p), count);
	return end(c, "process", 0, 0);
}

WS_EXPORT("wstream_on_timer") int32_t wstream_on_timer(int32_t op, uint32_t ptr, int32_t len) {
	ws_ctx *c = slot(op);
	if (!c)
		return no_slot("wstream_on_timer", op);
	const uint8_t *b;
	if (!region("wstream_on_timer", ptr, len, &b))
		return WS_BAD_POINTER;
	if ((uint32_t)len < BATCH_HEADER)
		return bad_batch(c, "timer", "shorter than the 4-byte header", (uint32_t)len, 0);
	begin(c);
	uint32_t count = le32(b);
	if (count > 0 && !c->op->on_timer) {
		set_error("%u timers fired but the operator has no on_timer callback", count);
		return end(c, "on_timer", WS_GUEST_ERROR, 0);
	}
	const uint8_t *p = b + BATCH_HEADER, *e = b + len;
	c->be = e;
	c->bcount = count;
	ws_timer t;
	uint32_t next = first_commit();
	for (uint32_t i = 0; i < count; i++) {
		if (__builtin_expect(i == next, 0)) {
			int st = commit_point(c, i, &next);
			if (st < 0)
				return end(c, "on_timer", st, 0);
		}
		uint32_t left = (uint32_t)(e - p);
		if (left < RECORD_HEADER)
			return bad_batch(c, "timer", "header truncated", i, (uint32_t)(p - b));
		uint32_t kl = le32(p + 12), vl = le32(p + 16);
		if ((uint64_t)kl + vl > left - RECORD_HEADER)
			return bad_batch(c, "timer", "key and value overrun the batch", i, (uint32_t)(p - b));
		t.domain = (int32_t)le32(p);
		t.ts = (int64_t)le64(p + 4);
		t.key = p + RECORD_HEADER;
		t.key_len = kl;
		t.ns = t.key + kl;
		t.ns_len = vl;
		c->bp = p;
		ws_progress = i;
		int rc = c->op->on_timer(c, &t);
		if (rc != 0) {
			what w = {2, i, count, t.domain, t.ts, t.key, kl};
			return end(c, "on_timer", rc, &w);
		}
		p = t.ns + vl;
	}
	ws_progress = 0xFFFFFFFFu;
	if (p != e)
		return trailing(c, "timer", (uint32_t)(e - p), count);
	return end(c, "on_timer", 0, 0);
}

WS_EXPORT("wstream_close") int32_t wstream_close(int32_t op) {
	ws_ctx *c = slot(op);
	if (!c)
		return no_slot("wstream_close", op);
	/* The slot is gone whatever close does: the host never calls it again. */
	M.slots[op] = 0;
	begin(c);
	int rc = c->op->close ? c->op->close(c) : 0;
	int32_t st = end(c, "close", rc, 0);
	free_ctx(c);
	return st;
}

static int32_t checkpoint_hook(const char *export, const char *phase, int32_t op, int64_t id, int hook) {
	ws_ctx *c = slot(op);
	if (!c)
		return no_slot(export, op);
	int (*fn)(ws_ctx *, int64_t) = hook == 0   ? c->op->pre_barrier
	                               : hook == 1 ? c->op->checkpoint_complete
	                                           : c->op->checkpoint_aborted;
	if (!fn)
		return WS_OK;
	begin(c);
	int rc = fn(c, id);
	what w = {3, 0, 0, 0, id, 0, 0};
	return end(c, phase, rc, &w);
}

WS_EXPORT("wstream_pre_barrier") int32_t wstream_pre_barrier(int32_t op, int64_t id) {
	return checkpoint_hook("wstream_pre_barrier", "pre_barrier", op, id, 0);
}

WS_EXPORT("wstream_checkpoint_complete") int32_t wstream_checkpoint_complete(int32_t op, int64_t id) {
	return checkpoint_hook("wstream_checkpoint_complete", "checkpoint_complete", op, id, 1);
}

WS_EXPORT("wstream_checkpoint_aborted") int32_t wstream_checkpoint_aborted(int32_t op, int64_t id) {
	return checkpoint_hook("wstream_checkpoint_aborted", "checkpoint_aborted", op, id, 2);
}
