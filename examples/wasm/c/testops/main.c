/*
 * testops holds operators that exercise every part of the C SDK, for the
 * tests of examples/wasm/c: state, map iteration, timers, outputs,
 * configuration, checkpoint hooks and failures. It carries no plan.
 *
 *   identity  emits every record unchanged
 *   fail      fails on a record whose value equals config "on"
 *   route     value "side:..." goes to output "side", "direct:..." through
 *             the unbuffered emit, anything else to output 0; pre_barrier
 *             emits key "barrier" with the checkpoint id, the other hooks log
 *   badport   emits to output 5, which no vertex has
 *   mapops    commands on a map state "m" and a value state "v" of the
 *             record's key, one per record value (see mapops_process)
 *   timers    registers and deletes timers (see timers_process); on_timer
 *             emits key = timer key, value = "DOMAIN,NS", ts = timer time
 *   config    reads config members "n" (int64), "s" (string) and "b" (bool)
 *             in open and emits them on close
 */
#include "wstream.h"

static int equal(const uint8_t *a, uint32_t n, const char *s) {
	return strlen(s) == n && memcmp(a, s, n) == 0;
}

static int has_prefix(const uint8_t *a, uint32_t n, const char *p) {
	uint32_t m = (uint32_t)strlen(p);
	return n >= m && memcmp(a, p, m) == 0;
}

/* ---- identity ---- */

static int identity_process(ws_ctx *ctx, const ws_record *r) {
	ws_emit(ctx, r->key, r->key_len, r->value, r->value_len, r->ts);
	return 0;
}

static const ws_operator identity = {.name = "identity", .process = identity_process};

/* ---- fail ---- */

typedef struct on_config {
	char *on;
	uint32_t len;
} on_config;

static int on_open(ws_ctx *ctx) {
	on_config *c = ws_data(ctx);
	int found = ws_config_string(ctx, "on", &c->on, &c->len);
	if (found < 0)
		return found;
	if (!found)
		return ws_error(ctx, "config \"on\" is required");
	return 0;
}

static int fail_process(ws_ctx *ctx, const ws_record *r) {
	on_config *c = ws_data(ctx);
	ws_emit(ctx, r->key, r->key_len, r->value, r->value_len, r->ts);
	if (r->value_len == c->len && memcmp(r->value, c->on, c->len) == 0)
		return ws_errorf(ctx, "testops fail on record value \"%.*s\"", (int)r->value_len, (const char *)r->value);
	return 0;
}

static const ws_operator fail = {
	.name = "fail", .data_size = sizeof(on_config), .open = on_open, .process = fail_process};

/* ---- route ---- */

typedef struct route {
	uint32_t side;
} route;

static int route_open(ws_ctx *ctx) {
	route *rt = ws_data(ctx);
	int side = ws_output(ctx, "side");
	if (side < 0)
		return side;
	rt->side = (uint32_t)side;
	return 0;
}

static int route_process(ws_ctx *ctx, const ws_record *r) {
	route *rt = ws_data(ctx);
	if (has_prefix(r->value, r->value_len, "side:")) {
		ws_emit_to(ctx, rt->side, r->key, r->key_len, r->value, r->value_len, r->ts);
	} else if (has_prefix(r->value, r->value_len, "direct:")) {
		return ws_emit_unbuffered(ctx, 0, r->key, r->key_len, r->value, r->value_len, r->ts);
	} else {
		ws_emit(ctx, r->key, r->key_len, r->value, r->value_len, r->ts);
	}
	return 0;
}

static int route_pre_barrier(ws_ctx *ctx, int64_t id) {
	char buf[WS_INT64_DIGITS];
	ws_emit(ctx, "barrier", 7, buf, ws_format_int64(buf, id), id);
	return 0;
}

static int route_complete(ws_ctx *ctx, int64_t id) {
	ws_logf(ctx, WS_LOG_INFO, "checkpoint %lld complete", (long long)id);
	return 0;
}

static int route_aborted(ws_ctx *ctx, int64_t id) {
	if (id < 0)
		return ws_errorf(ctx, "negative checkpoint id %lld", (long long)id);
	ws_logf(ctx, WS_LOG_WARN, "checkpoint %lld aborted", (long long)id);
	return 0;
}

static const ws_operator route_op = {
	.name = "route",
	.data_size = sizeof(route),
	.open = route_open,
	.process = route_process,
	.pre_barrier = route_pre_barrier,
	.checkpoint_complete = route_complete,
	.checkpoint_aborted = route_aborted,
};

/* ---- badport ---- */

static int badport_process(ws_ctx *ctx, const ws_record *r) {
	ws_emit_to(ctx, 5, r->key, r->key_len, r->value, r->value_len, r->ts);
	return 0;
}

static const ws_operator badport = {.name = "badport", .process = badport_process};

/* ---- mapops ---- */

typedef struct mapops {
	ws_map_state m;
	ws_value_state v;
	uint8_t *big;
	uint32_t big_cap;
} mapops;

static int mapops_open(ws_ctx *ctx) {
	mapops *s = ws_data(ctx);
	int st = ws_map_state_get(ctx, "m", &s->m);
	if (st < 0)
		return st;
	if ((st = ws_value_state_get(ctx, "v", &s->v)) < 0)
		return st;
	/* The same name again is the same state. */
	ws_map_state again;
	if ((st = ws_map_state_get(ctx, "m", &again)) < 0)
		return st;
	if (again.h != s->m.h)
		return ws_errorf(ctx, "map state \"m\" registered twice: handles %d and %d", (int)s->m.h, (int)again.h);
	return 0;
}

/* A range visitor: emits every entry, up to limit entries (0: all). */
typedef struct lister {
	ws_ctx *ctx;
	const ws_record *r;
	uint32_t seen, limit;
	mapops *s;
	int nested;
} lister;

static int count_entry(void *arg, const uint8_t *k, uint32_t kl, const uint8_t *v, uint32_t vl) {
	(void)k, (void)kl, (void)v, (void)vl;
	(*(uint32_t *)arg)++;
	return 0;
}

static int list_entry(void *arg, const uint8_t *k, uint32_t kl, const uint8_t *v, uint32_t vl) {
	lister *l = arg;
	if (l->nested) {
		/* Count the entries sharing this entry's first byte, from inside
		 * the outer iteration. */
		uint32_t n = 0;
		int st = ws_map_range(l->ctx, l->s->m, k, kl ? 1 : 0, count_entry, &n);
		if (st < 0)
			return st;
		char buf[WS_INT64_DIGITS];
		ws_emit(l->ctx, k, kl, buf, ws_format_int64(buf, n), l->r->ts);
	} else {
		ws_emit(l->ctx, k, kl, v, vl, l->r->ts);
	}
	l->seen++;
	return l->limit && l->seen >= l->limit ? 1 : 0;
}

/* word splits s at spaces: the i-th word (0-based) of s into *w. */
static int word(const uint8_t *s, uint32_t n, int i, const uint8_t **w, uint32_t *wl) {
	uint32_t p = 0;
	for (int k = 0;; k++) {
		while (p < n && s[p] == ' ')
			p++;
		uint32_t start = p;
		while (p < n && s[p] != ' ')
			p++;
		if (k == i) {
			*w = s + start;
			*wl = p - start;
			return p > start;
		}
		if (p >= n)
			return 0;
	}
}

/*
 * Commands, in the record value:
 *   put K V    map put            del K   map delete
 *   get K      emits K=V or K=<absent>
 *   big K N    map put of N bytes 'x'
 *   list P     emits every entry whose key starts with P ("list" alone: all)
 *   first P N  emits the first N entries with prefix P
 *   nest       for every entry, emits how many entries share its first byte
 *   add NS D   adds D to the int64 value state under namespace NS, emits it
 *   inc NS D   the same with ws_value_add_int64_ns, emits "SUM" or "SUM new"
 *              when there was no value ("inc - D": the empty namespace,
 *              with ws_value_add_int64)
 *   vdel NS    deletes it        vraw NS X   stores the raw bytes X there
 *   unknown    uses a state that open did not register
 */
static int mapops_process(ws_ctx *ctx, const ws_record *r) {
	mapops *s = ws_data(ctx);
	const uint8_t *cmd, *a = 0, *b = 0;
	uint32_t cl, al = 0, bl = 0;
	if (!word(r->value, r->value_len, 0, &cmd, &cl))
		return ws_error(ctx, "empty command");
	word(r->value, r->value_len, 1, &a, &al);
	word(r->value, r->value_len, 2, &b, &bl);
	if (equal(cmd, cl, "put"))
		return ws_map_put(ctx, s->m, a, al, b, bl);
	if (equal(cmd, cl, "del"))
		return ws_map_delete(ctx, s->m, a, al);
	if (equal(cmd, cl, "get")) {
		const uint8_t *v;
		uint32_t vl;
		int found = ws_map_get(ctx, s->m, a, al, &v, &vl);
		if (found < 0)
			return found;
		if (found)
			ws_emit(ctx, a, al, v, vl, r->ts);
		else
			ws_emit(ctx, a, al, "<absent>", 8, r->ts);
		return 0;
	}
	if (equal(cmd, cl, "big")) {
		int64_t n;
		if (!ws_parse_int64(b, bl, &n) || n < 0 || n > (64 << 20))
			return ws_errorf(ctx, "big: bad size \"%.*s\"", (int)bl, (const char *)b);
		if ((uint64_t)n > s->big_cap) {
			uint8_t *p = ws_realloc(s->big, (size_t)n);
			if (!p)
				return ws_error(ctx, "big: out of memory");
			s->big = p;
			s->big_cap = (uint32_t)n;
		}
		memset(s->big, 'x', (size_t)n);
		return ws_map_put(ctx, s->m, a, al, s->big, (uint32_t)n);
	}
	if (equal(cmd, cl, "list") || equal(cmd, cl, "first") || equal(cmd, cl, "nest")) {
		lister l = {ctx, r, 0, 0, s, equal(cmd, cl, "nest")};
		if (equal(cmd, cl, "first")) {
			int64_t n;
			if (!ws_parse_int64(b, bl, &n) || n <= 0)
				return ws_errorf(ctx, "first: bad count \"%.*s\"", (int)bl, (const char *)b);
			l.limit = (uint32_t)n;
		}
		if (l.nested)
			al = 0;
		return ws_map_range(ctx, s->m, a, al, list_entry, &l);
	}
	if (equal(cmd, cl, "add")) {
		int64_t d, v;
		if (!ws_parse_int64(b, bl, &d))
			return ws_errorf(ctx, "add: \"%.*s\" is not a decimal integer", (int)bl, (const char *)b);
		int found = ws_value_get_int64_ns(ctx, s->v, a, al, &v);
		if (found < 0)
			return found;
		int st = ws_value_put_int64_ns(ctx, s->v, a, al, v + d);
		if (st < 0)
			return st;
		char buf[WS_INT64_DIGITS];
		ws_emit(ctx, a, al, buf, ws_format_int64(buf, v + d), r->ts);
		return 0;
	}
	if (equal(cmd, cl, "inc")) {
		int64_t d, v;
		if (!ws_parse_int64(b, bl, &d))
			return ws_errorf(ctx, "inc: \"%.*s\" is not a decimal integer", (int)bl, (const char *)b);
		int found = equal(a, al, "-") ? ws_value_add_int64(ctx, s->v, d, &v)
		                              : ws_value_add_int64_ns(ctx, s->v, a, al, d, &v);
		if (found < 0)
			return found;
		char buf[WS_INT64_DIGITS + 4];
		uint32_t n = ws_format(buf, sizeof buf, "%lld%s", (long long)v, found ? "" : " new");
		ws_emit(ctx, a, al, buf, n, r->ts);
		return 0;
	}
	if (equal(cmd, cl, "vdel"))
		return ws_value_delete_ns(ctx, s->v, a, al);
	if (equal(cmd, cl, "vraw"))
		return ws_value_put_ns(ctx, s->v, a, al, b, bl);
	if (equal(cmd, cl, "unknown")) {
		ws_value_state other;
		return ws_value_state_get(ctx, "other", &other);
	}
	return ws_errorf(ctx, "unknown command \"%.*s\"", (int)cl, (const char *)cmd);
}

static int mapops_close(ws_ctx *ctx) {
	mapops *s = ws_data(ctx);
	ws_free(s->big);
	s->big = 0;
	return 0;
}

static const ws_operator mapops_op = {
	.name = "mapops",
	.data_size = sizeof(mapops),
	.open = mapops_open,
	.process = mapops_process,
	.close = mapops_close,
};

/* ---- timers ---- */

/*
 * Commands, in the record value: "ev TS NS" and "pt TS NS" register an
 * event-time or processing-time timer of the record's key, "del TS NS"
 * deletes an event-time one, "now" emits "WATERMARK,PROCESSING_TIME".
 */
static int timers_process(ws_ctx *ctx, const ws_record *r) {
	const uint8_t *cmd, *ts = 0, *ns = 0;
	uint32_t cl, tl = 0, nl = 0;
	if (!word(r->value, r->value_len, 0, &cmd, &cl))
		return ws_error(ctx, "empty command");
	if (equal(cmd, cl, "now")) {
		char buf[2 * WS_INT64_DIGITS + 2];
		uint32_t n = ws_format(buf, sizeof buf, "%lld,%lld", (long long)ws_watermark(ctx),
		                       (long long)ws_processing_time(ctx));
		ws_emit(ctx, r->key, r->key_len, buf, n, r->ts);
		return 0;
	}
	word(r->value, r->value_len, 1, &ts, &tl);
	word(r->value, r->value_len, 2, &ns, &nl);
	int64_t t;
	if (!ws_parse_int64(ts, tl, &t))
		return ws_errorf(ctx, "bad time \"%.*s\"", (int)tl, (const char *)ts);
	if (equal(cmd, cl, "ev"))
		return ws_register_event_timer(ctx, t, ns, nl);
	if (equal(cmd, cl, "pt"))
		return ws_register_processing_timer(ctx, t, ns, nl);
	if (equal(cmd, cl, "del"))
		return ws_delete_event_timer(ctx, t, ns, nl);
	return ws_errorf(ctx, "unknown command \"%.*s\"", (int)cl, (const char *)cmd);
}

static int timers_on_timer(ws_ctx *ctx, const ws_timer *t) {
	uint32_t kl;
	const uint8_t *key = ws_key(ctx, &kl);
	if (kl != t->key_len || memcmp(key, t->key, kl) != 0)
		return ws_error(ctx, "the current key is not the timer's key");
	char buf[300];
	uint32_t n = ws_format(buf, sizeof buf, "%d,%.*s", (int)t->domain, (int)t->ns_len, (const char *)t->ns);
	ws_emit(ctx, t->key, t->key_len, buf, n, t->ts);
	if (t->ns_len == 4 && memcmp(t->ns, "boom", 4) == 0)
		return ws_error(ctx, "timer boom");
	return 0;
}

static const ws_operator timers = {.name = "timers", .process = timers_process, .on_timer = timers_on_timer};

/* ---- config ---- */

typedef struct config {
	int64_t n;
	char *s;
	uint32_t sl;
	int b;
	int has_n, has_s, has_b;
} config;

static int config_open(ws_ctx *ctx) {
	config *c = ws_data(ctx);
	if ((c->has_n = ws_config_int64(ctx, "n", &c->n)) < 0)
		return c->has_n;
	if ((c->has_s = ws_config_string(ctx, "s", &c->s, &c->sl)) < 0)
		return c->has_s;
	if ((c->has_b = ws_config_bool(ctx, "b", &c->b)) < 0)
		return c->has_b;
	return 0;
}

static int config_close(ws_ctx *ctx) {
	config *c = ws_data(ctx);
	uint32_t cl;
	const uint8_t *raw = ws_config(ctx, &cl);
	char buf[1024];
	uint32_t n = ws_format(buf, sizeof buf, "n=%s%lld s=%s%.*s b=%s%d", c->has_n ? "" : "-", (long long)c->n,
	                       c->has_s ? "" : "-", (int)c->sl, c->s ? c->s : "", c->has_b ? "" : "-", c->b);
	ws_emit(ctx, raw, cl, buf, n, 0);
	ws_free(c->s);
	return 0;
}

static const ws_operator config_op = {
	.name = "config", .data_size = sizeof(config), .open = config_open, .close = config_close};

WSTREAM_OPERATORS(&identity, &fail, &route_op, &badport, &mapops_op, &timers, &config_op);
