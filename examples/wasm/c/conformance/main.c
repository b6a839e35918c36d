/*
 * conformance is the C module of the conformance suite: the operator
 * "conform" of tests/conformance/SPEC.md, a command interpreter whose every
 * command exercises one part of the ABI through the C SDK. The same operator
 * exists in every guest language (the reference is
 * examples/wasm/go/conformance); the suite requires them all to answer
 * alike, and this one answers and fails with the Go module's messages. It
 * carries no plan. Build it with
 *
 *     clang --target=wasm32 -O2 -nostdlib -ffreestanding -I guest-sdk/c \
 *         -Wl,--no-entry -o conformance.wasm \
 *         examples/wasm/c/conformance/main.c guest-sdk/c/wstream.c
 */
#include "wstream.h"

/* States can only be registered in open: a fixed set, in SPEC order. */
static const char *const value_names[] = {"a", "b", "n", "big"};
static const char *const map_names[] = {"m", "p"};
#define NVALUES (sizeof value_names / sizeof value_names[0])
#define NMAPS (sizeof map_names / sizeof map_names[0])

#define MAX_TOKENS 4
#define MFILL_MAX 10000

/* A heap buffer that grows and is kept for later commands. */
typedef struct buf {
	uint8_t *b;
	uint32_t len, cap;
} buf;

typedef struct conform {
	ws_value_state values[NVALUES];
	ws_map_state maps[NMAPS];
	/* The checkpoint ids last passed to each hook, -1 before the first. */
	int64_t pre, complete, aborted;
	buf first, last, scratch;
} conform;

/* A token of a command: bytes of the record's value. */
typedef struct tok {
	const uint8_t *p;
	uint32_t n;
} tok;

static int grow(ws_ctx *ctx, buf *b, uint32_t n) {
	if (n <= b->cap)
		return 0;
	uint8_t *p = ws_realloc(b->b, n);
	if (!p)
		return ws_errorf(ctx, "out of memory for %u bytes", n);
	b->b = p;
	b->cap = n;
	return 0;
}

static int set(ws_ctx *ctx, buf *b, const uint8_t *p, uint32_t n) {
	int st = grow(ctx, b, n);
	if (st < 0)
		return st;
	memcpy(b->b, p, n);
	b->len = n;
	return 0;
}

static int is(tok t, const char *s) { return t.n == strlen(s) && memcmp(t.p, s, t.n) == 0; }

static int conform_open(ws_ctx *ctx) {
	conform *c = ws_data(ctx);
	for (uint32_t i = 0; i < NVALUES; i++) {
		int st = ws_value_state_get(ctx, value_names[i], &c->values[i]);
		if (st < 0)
			return st;
	}
	for (uint32_t i = 0; i < NMAPS; i++) {
		int st = ws_map_state_get(ctx, map_names[i], &c->maps[i]);
		if (st < 0)
			return st;
	}
	c->pre = c->complete = c->aborted = -1;
	return 0;
}

static int value_state(ws_ctx *ctx, conform *c, tok name, ws_value_state *out) {
	for (uint32_t i = 0; i < NVALUES; i++) {
		if (is(name, value_names[i])) {
			*out = c->values[i];
			return 0;
		}
	}
	char q[WS_QUOTE_CAP];
	ws_quote(q, sizeof q, name.p, name.n);
	return ws_errorf(ctx, "unknown state %s: not a value state of this operator", q);
}

static int map_state(ws_ctx *ctx, conform *c, tok name, ws_map_state *out) {
	for (uint32_t i = 0; i < NMAPS; i++) {
		if (is(name, map_names[i])) {
			*out = c->maps[i];
			return 0;
		}
	}
	char q[WS_QUOTE_CAP];
	ws_quote(q, sizeof q, name.p, name.n);
	return ws_errorf(ctx, "unknown state %s: not a map state of this operator", q);
}

/* args splits a command into its tokens, separated by one space (so two
 * spaces make an empty token), and checks that there are n. */
static int args(ws_ctx *ctx, const ws_record *r, tok *t, uint32_t n) {
	uint32_t got = 0, start = 0;
	for (uint32_t i = 0; i <= r->value_len; i++) {
		if (i < r->value_len && r->value[i] != ' ')
			continue;
		if (got < n)
			t[got] = (tok){r->value + start, i - start};
		got++;
		start = i + 1;
	}
	if (got != n) {
		char q[WS_QUOTE_CAP];
		ws_quote(q, sizeof q, r->value, r->value_len);
		return ws_errorf(ctx, "command %s: want %u tokens, got %u", q, n, got);
	}
	return 0;
}

/* number parses a non-negative decimal int64 as Go's strconv.ParseInt
 * (base 10) and a check for >= 0 do: an optional sign, then digits. */
static int number(ws_ctx *ctx, tok t, int64_t *out) {
	const uint8_t *s = t.p;
	uint32_t n = t.n;
	int neg = 0;
	if (n > 0 && (s[0] == '+' || s[0] == '-')) {
		neg = s[0] == '-';
		s++;
		n--;
	}
	uint64_t v = 0;
	int ok = n > 0;
	for (uint32_t i = 0; ok && i < n; i++) {
		if (s[i] < '0' || s[i] > '9' || v > ((uint64_t)INT64_MAX - (uint64_t)(s[i] - '0')) / 10)
			ok = 0;
		else
			v = v * 10 + (uint64_t)(s[i] - '0');
	}
	/* "-0" is 0; any other negative number is refused. */
	if (!ok || (neg && v != 0)) {
		char q[WS_QUOTE_CAP];
		ws_quote(q, sizeof q, t.p, t.n);
		return ws_errorf(ctx, "%s is not a non-negative decimal integer", q);
	}
	*out = (int64_t)v;
	return 0;
}

/* reply emits the command's reply: prefix then n bytes of v, on output 0
 * with the record's key and timestamp. */
static void reply(ws_ctx *ctx, const ws_record *r, const char *prefix, const void *v, uint32_t n) {
	uint32_t pl = (uint32_t)strlen(prefix);
	uint8_t *out = ws_emit_reserve(ctx, 0, r->key, r->key_len, pl + n, r->ts);
	if (out) {
		memcpy(out, prefix, pl);
		memcpy(out + pl, v, n);
	}
}

static void reply_int(ws_ctx *ctx, const ws_record *r, const char *prefix, int64_t v) {
	char d[WS_INT64_DIGITS];
	reply(ctx, r, prefix, d, ws_format_int64(d, v));
}

/* found replies to a state lookup: "=V", or "missing". */
static int found(ws_ctx *ctx, const ws_record *r, int st, const uint8_t *v, uint32_t n) {
	if (st < 0)
		return st;
	if (st == 0)
		reply(ctx, r, "missing", 0, 0);
	else
		reply(ctx, r, "=", v, n);
	return 0;
}

static int ok(ws_ctx *ctx, const ws_record *r, int st) {
	if (st < 0)
		return st;
	reply(ctx, r, "ok", 0, 0);
	return 0;
}

static int cmd_value(ws_ctx *ctx, conform *c, const ws_record *r, tok verb) {
	tok t[MAX_TOKENS];
	ws_value_state s;
	int st;
	if (is(verb, "put")) {
		if ((st = args(ctx, r, t, 3)) < 0 || (st = value_state(ctx, c, t[1], &s)) < 0)
			return st;
		return ok(ctx, r, ws_value_put(ctx, s, t[2].p, t[2].n));
	}
	if ((st = args(ctx, r, t, is(verb, "big") ? 3 : 2)) < 0 || (st = value_state(ctx, c, t[1], &s)) < 0)
		return st;
	if (is(verb, "del"))
		return ok(ctx, r, ws_value_delete(ctx, s));
	const uint8_t *v;
	uint32_t n;
	if (is(verb, "get")) {
		st = ws_value_get(ctx, s, &v, &n);
		return found(ctx, r, st, v, n);
	}
	if (is(verb, "inc")) {
		int64_t i;
		if ((st = ws_value_get_int64(ctx, s, &i)) < 0)
			return st;
		i = (int64_t)((uint64_t)i + 1); /* wraps around like Go's n++ */
		if ((st = ws_value_put_int64(ctx, s, i)) < 0)
			return st;
		reply_int(ctx, r, "=", i);
		return 0;
	}
	/* big S N: a value of N bytes 'a' + i % 26, read back. */
	int64_t size;
	if ((st = number(ctx, t[2], &size)) < 0)
		return st;
	if (size > (int64_t)UINT32_MAX)
		return ws_errorf(ctx, "big: %lld bytes do not fit in 32-bit memory", (long long)size);
	if ((st = grow(ctx, &c->scratch, (uint32_t)size)) < 0)
		return st;
	uint8_t *b = c->scratch.b;
	for (uint32_t i = 0; i < (uint32_t)size; i++)
		b[i] = (uint8_t)('a' + i % 26);
	if ((st = ws_value_put(ctx, s, b, (uint32_t)size)) < 0)
		return st;
	if ((st = ws_value_get(ctx, s, &v, &n)) < 0)
		return st;
	/* Absent reads as empty, as Go's nil: equal to a 0-byte value. */
	if (n != (uint32_t)size || (n > 0 && memcmp(v, b, n) != 0)) {
		reply(ctx, r, "mismatch", 0, 0);
		return 0;
	}
	reply_int(ctx, r, "ok ", size);
	return 0;
}

/* scan collects what mscan replies: the count, the first and the last
 * namespace. */
typedef struct scan {
	ws_ctx *ctx;
	conform *c;
	int64_t n;
} scan;

static int scan_entry(void *arg, const uint8_t *k, uint32_t k_len, const uint8_t *v, uint32_t v_len) {
	(void)v;
	(void)v_len;
	scan *s = arg;
	int st;
	if (s->n == 0 && (st = set(s->ctx, &s->c->first, k, k_len)) < 0)
		return st;
	if ((st = set(s->ctx, &s->c->last, k, k_len)) < 0)
		return st;
	s->n++;
	return 0;
}

static int cmd_map(ws_ctx *ctx, conform *c, const ws_record *r, tok verb) {
	tok t[MAX_TOKENS];
	ws_map_state m;
	int st;
	int is_put = is(verb, "mput");
	if ((st = args(ctx, r, t, is_put ? 4 : 3)) < 0 || (st = map_state(ctx, c, t[1], &m)) < 0)
		return st;
	if (is_put)
		return ok(ctx, r, ws_map_put(ctx, m, t[2].p, t[2].n, t[3].p, t[3].n));
	if (is(verb, "mdel"))
		return ok(ctx, r, ws_map_delete(ctx, m, t[2].p, t[2].n));
	if (is(verb, "mget")) {
		const uint8_t *v;
		uint32_t n;
		st = ws_map_get(ctx, m, t[2].p, t[2].n, &v, &n);
		return found(ctx, r, st, v, n);
	}
	if (is(verb, "mfill")) {
		int64_t n;
		if ((st = number(ctx, t[2], &n)) < 0)
			return st;
		if (n > MFILL_MAX)
			return ws_errorf(ctx, "mfill: %lld entries, at most %d", (long long)n, MFILL_MAX);
		for (int64_t i = 0; i < n; i++) {
			char k[5] = {'k', (char)('0' + i / 1000), (char)('0' + i / 100 % 10), (char)('0' + i / 10 % 10),
			             (char)('0' + i % 10)};
			char v[1 + WS_INT64_DIGITS] = {'v'};
			uint32_t vl = 1 + ws_format_int64(v + 1, i);
			if ((st = ws_map_put(ctx, m, k, sizeof k, v, vl)) < 0)
				return st;
		}
		return ok(ctx, r, 0);
	}
	/* mscan S P: "-" for every entry. */
	tok p = t[2];
	if (is(p, "-"))
		p.n = 0;
	scan s = {ctx, c, 0};
	if ((st = ws_map_range(ctx, m, p.p, p.n, scan_entry, &s)) < 0)
		return st;
	if (s.n == 0) {
		reply(ctx, r, "n=0", 0, 0);
		return 0;
	}
	char d[WS_INT64_DIGITS];
	uint32_t dl = ws_format_int64(d, s.n);
	uint32_t fl = c->first.len, ll = c->last.len;
	uint8_t *out = ws_emit_reserve(ctx, 0, r->key, r->key_len, 2 + dl + 7 + fl + 6 + ll, r->ts);
	if (out) {
		memcpy(out, "n=", 2);
		memcpy(out += 2, d, dl);
		memcpy(out += dl, " first=", 7);
		memcpy(out += 7, c->first.b, fl);
		memcpy(out += fl, " last=", 6);
		memcpy(out + 6, c->last.b, ll);
	}
	return 0;
}

static int cmd_emit(ws_ctx *ctx, conform *c, const ws_record *r) {
	tok t[MAX_TOKENS];
	int st;
	if ((st = args(ctx, r, t, 3)) < 0)
		return st;
	/* ws_output takes a C string: a name with a NUL can be no output. */
	int out = WS_BAD_OUTPUT, nul = 0;
	for (uint32_t i = 0; i < t[1].n; i++)
		nul |= t[1].p[i] == 0;
	if (!nul) {
		if ((st = grow(ctx, &c->scratch, t[1].n + 1)) < 0)
			return st;
		memcpy(c->scratch.b, t[1].p, t[1].n);
		c->scratch.b[t[1].n] = 0;
		out = ws_output(ctx, (const char *)c->scratch.b);
	}
	if (out == WS_BAD_OUTPUT) {
		reply(ctx, r, "bad output ", t[1].p, t[1].n);
		return 0;
	}
	if (out < 0)
		return out;
	ws_emit_to(ctx, (uint32_t)out, r->key, r->key_len, t[2].p, t[2].n, r->ts);
	return ok(ctx, r, 0);
}

static int cmd_timer(ws_ctx *ctx, const ws_record *r, tok verb) {
	tok t[MAX_TOKENS];
	int st;
	if ((st = args(ctx, r, t, 3)) < 0)
		return st;
	int32_t domain;
	if (is(t[1], "event")) {
		domain = WS_EVENT_TIME;
	} else if (is(t[1], "proc")) {
		domain = WS_PROCESSING_TIME;
	} else {
		char q[WS_QUOTE_CAP];
		ws_quote(q, sizeof q, t[1].p, t[1].n);
		return ws_errorf(ctx, "unknown time domain %s", q);
	}
	int64_t ts;
	if ((st = number(ctx, t[2], &ts)) < 0)
		return st;
	if (is(verb, "timer"))
		return ok(ctx, r, ws_timer_register(ctx, domain, ts, "t", 1));
	return ok(ctx, r, ws_timer_delete(ctx, domain, ts, "t", 1));
}

/* tinc S TS: an event-time timer at TS whose namespace "inc:S" makes
 * on_timer count in value state S. */
static int cmd_tinc(ws_ctx *ctx, conform *c, const ws_record *r) {
	tok t[MAX_TOKENS];
	ws_value_state s;
	int64_t ts;
	int st;
	if ((st = args(ctx, r, t, 3)) < 0 || (st = value_state(ctx, c, t[1], &s)) < 0 || (st = number(ctx, t[2], &ts)) < 0)
		return st;
	uint8_t ns[4 + 16];
	memcpy(ns, "inc:", 4);
	memcpy(ns + 4, t[1].p, t[1].n); /* a state name: at most 3 bytes */
	return ok(ctx, r, ws_register_event_timer(ctx, ts, ns, 4 + t[1].n));
}

static int conform_process(ws_ctx *ctx, const ws_record *r) {
	conform *c = ws_data(ctx);
	tok verb = {r->value, 0};
	while (verb.n < r->value_len && r->value[verb.n] != ' ')
		verb.n++;
	tok t[MAX_TOKENS];
	int st;
	if (is(verb, "put") || is(verb, "get") || is(verb, "del") || is(verb, "inc") || is(verb, "big"))
		return cmd_value(ctx, c, r, verb);
	if (is(verb, "mput") || is(verb, "mget") || is(verb, "mdel") || is(verb, "mfill") || is(verb, "mscan"))
		return cmd_map(ctx, c, r, verb);
	if (is(verb, "emit"))
		return cmd_emit(ctx, c, r);
	if (is(verb, "batch")) {
		int64_t n;
		if ((st = args(ctx, r, t, 2)) < 0 || (st = number(ctx, t[1], &n)) < 0)
			return st;
		char v[1 + WS_INT64_DIGITS] = {'r'};
		for (int64_t i = 0; i < n; i++)
			ws_emit(ctx, r->key, r->key_len, v, 1 + ws_format_int64(v + 1, i), r->ts);
		return ok(ctx, r, 0);
	}
	if (is(verb, "timer") || is(verb, "untimer"))
		return cmd_timer(ctx, r, verb);
	if (is(verb, "tinc"))
		return cmd_tinc(ctx, c, r);
	if (is(verb, "wm")) {
		reply_int(ctx, r, "wm=", ws_watermark(ctx));
		return 0;
	}
	if (is(verb, "ptime")) {
		reply(ctx, r, ws_processing_time(ctx) > 0 ? "ptime ok" : "ptime bad", 0, 0);
		return 0;
	}
	if (is(verb, "log")) {
		if ((st = args(ctx, r, t, 2)) < 0)
			return st;
		ws_log_bytes(ctx, WS_LOG_INFO, t[1].p, t[1].n);
		return ok(ctx, r, 0);
	}
	if (is(verb, "config")) {
		uint32_t n;
		const uint8_t *cfg = ws_config(ctx, &n);
		reply(ctx, r, "config=", cfg, n);
		return 0;
	}
	if (is(verb, "hooks")) {
		char b[3 * WS_INT64_DIGITS + 32];
		uint32_t n = ws_format(b, sizeof b, "pre=%lld complete=%lld aborted=%lld", (long long)c->pre,
		                       (long long)c->complete, (long long)c->aborted);
		reply(ctx, r, "", b, n);
		return 0;
	}
	if (is(verb, "fail")) {
		if ((st = args(ctx, r, t, 2)) < 0)
			return st;
		return ws_errorf(ctx, "conform: fail %.*s", (int)t[1].n, (const char *)t[1].p);
	}
	char q[WS_QUOTE_CAP];
	ws_quote(q, sizeof q, r->value, r->value_len);
	return ws_errorf(ctx, "unknown command %s", q);
}

static int conform_on_timer(ws_ctx *ctx, const ws_timer *t) {
	char b[64];
	uint32_t n = ws_format(b, sizeof b, "fired %s %lld ns=", t->domain == WS_PROCESSING_TIME ? "proc" : "event",
	                       (long long)t->ts);
	/* A timer of tinc counts in its value state. */
	char count[2 + WS_INT64_DIGITS];
	uint32_t cn = 0;
	if (t->ns_len >= 4 && memcmp(t->ns, "inc:", 4) == 0) {
		conform *c = ws_data(ctx);
		ws_value_state s;
		int64_t i;
		int st;
		if ((st = value_state(ctx, c, (tok){t->ns + 4, t->ns_len - 4}, &s)) < 0 ||
		    (st = ws_value_get_int64(ctx, s, &i)) < 0)
			return st;
		i = (int64_t)((uint64_t)i + 1);
		if ((st = ws_value_put_int64(ctx, s, i)) < 0)
			return st;
		count[0] = ' ';
		count[1] = '=';
		cn = 2 + ws_format_int64(count + 2, i);
	}
	uint8_t *out = ws_emit_reserve(ctx, 0, t->key, t->key_len, n + t->ns_len + cn, t->ts);
	if (out) {
		memcpy(out, b, n);
		memcpy(out + n, t->ns, t->ns_len);
		memcpy(out + n + t->ns_len, count, cn);
	}
	return 0;
}

static int conform_pre_barrier(ws_ctx *ctx, int64_t id) {
	conform *c = ws_data(ctx);
	c->pre = id;
	char b[4 + WS_INT64_DIGITS] = "pre ";
	ws_emit(ctx, 0, 0, b, 4 + ws_format_int64(b + 4, id), 0);
	return 0;
}

static int conform_checkpoint_complete(ws_ctx *ctx, int64_t id) {
	((conform *)ws_data(ctx))->complete = id;
	return 0;
}

static int conform_checkpoint_aborted(ws_ctx *ctx, int64_t id) {
	((conform *)ws_data(ctx))->aborted = id;
	return 0;
}

static int conform_close(ws_ctx *ctx) {
	conform *c = ws_data(ctx);
	ws_emit(ctx, 0, 0, "close", 5, 0);
	ws_free(c->first.b);
	ws_free(c->last.b);
	ws_free(c->scratch.b);
	c->first = c->last = c->scratch = (buf){0, 0, 0};
	return 0;
}

static const ws_operator conform_op = {
	.name = "conform",
	.data_size = sizeof(conform),
	.open = conform_open,
	.process = conform_process,
	.on_timer = conform_on_timer,
	.close = conform_close,
	.pre_barrier = conform_pre_barrier,
	.checkpoint_complete = conform_checkpoint_complete,
	.checkpoint_aborted = conform_checkpoint_aborted,
};

WSTREAM_OPERATORS(&conform_op);

/* SPEC.md, "State migration". */
static uint8_t *migrated;

static int eq(const char *a, uint32_t n, const char *lit) {
	uint32_t i = 0;
	for (; i < n && lit[i]; i++)
		if (a[i] != lit[i])
			return 0;
	return i == n && !lit[i];
}

static int conform_migrate(const char *op, uint32_t op_len, const char *state, uint32_t state_len, int32_t version,
                           const uint8_t *key, uint32_t key_len, const uint8_t *ns, uint32_t ns_len,
                           const uint8_t *value, uint32_t value_len, const uint8_t **out, uint32_t *out_len) {
	if (!eq(op, op_len, "conform") || eq(state, state_len, "fail")) {
		ws_migrate_error("migration refused");
		return -1;
	}
	if (!eq(state, state_len, "m")) {
		ws_migrate_error("no migration for this state");
		return -1;
	}
	char v[24];
	uint32_t vn = 0;
	uint32_t u = version < 0 ? 0 : (uint32_t)version;
	char rev[12];
	uint32_t rn = 0;
	do {
		rev[rn++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	while (rn)
		v[vn++] = rev[--rn];
	uint32_t n = 2 + vn + 1 + key_len + 1 + ns_len + 1 + value_len;
	uint8_t *b = ws_realloc(migrated, n);
	if (!b) {
		ws_migrate_error("out of memory");
		return -1;
	}
	migrated = b;
	uint32_t at = 0;
	b[at++] = 'm';
	b[at++] = '|';
	for (uint32_t i = 0; i < vn; i++)
		b[at++] = (uint8_t)v[i];
	b[at++] = '|';
	for (uint32_t i = 0; i < key_len; i++)
		b[at++] = key[i];
	b[at++] = '|';
	for (uint32_t i = 0; i < ns_len; i++)
		b[at++] = ns[i];
	b[at++] = '|';
	for (uint32_t i = 0; i < value_len; i++)
		b[at++] = value[i];
	*out = b;
	*out_len = at;
	return 0;
}

WSTREAM_MIGRATE(conform_migrate);
