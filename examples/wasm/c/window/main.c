/*
 * window is a WebAssembly operator module with an event-time tumbling-window
 * sum: the operator "window" sums the decimal values of each key per window
 * of config "size" milliseconds and emits one record per key and window when
 * the watermark passes the window's end. Records for windows the watermark
 * already passed go unchanged to the second output, "late". It is the C twin
 * of examples/wasm/go/window: same plan, same state (value state "sum", an
 * int64 8 bytes little-endian, under namespace = the window end 8 bytes
 * big-endian), same timers and the same records, so a savepoint of one
 * restores into the other. Build it with
 *
 *     clang --target=wasm32 -O2 -nostdlib -ffreestanding -I guest-sdk/c \
 *         -Wl,--no-entry -o window.wasm \
 *         examples/wasm/c/window/main.c guest-sdk/c/wstream.c
 */
#include "wstream.h"

WSTREAM_PLAN("{\"name\":\"window\",\"maxParallelism\":128,\"parallelism\":2,\n"
             " \"vertices\":[\n"
             "  {\"id\":\"source\",\"kind\":\"source\",\"connector\":\"file\",\"parallelism\":1,\n"
             "   \"config\":{\"path\":\"input.tsv\",\"format\":\"tsv\",\"watermarkDelay\":2000}},\n"
             "  {\"id\":\"window\",\"kind\":\"operator\",\"operator\":\"window\",\"config\":{\"size\":1000},\"outputs\":[\"main\",\"late\"]},\n"
             "  {\"id\":\"sink\",\"kind\":\"sink\",\"connector\":\"stdout\",\"parallelism\":1},\n"
             "  {\"id\":\"late\",\"kind\":\"sink\",\"connector\":\"stdout\",\"parallelism\":1}],\n"
             " \"edges\":[\n"
             "  {\"from\":\"source\",\"to\":\"window\",\"partition\":\"key\"},\n"
             "  {\"from\":\"window\",\"to\":\"sink\",\"partition\":\"rebalance\"},\n"
             "  {\"from\":\"window\",\"to\":\"late\",\"partition\":\"rebalance\",\"output\":\"late\"}]}");

typedef struct window {
	int64_t size;
	uint32_t late;
	ws_value_state sum;
} window;

static int json_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* trimmed returns the length of the configuration without the JSON white
 * space around it and stores where it starts in *start. */
static uint32_t trimmed(const uint8_t *c, uint32_t n, const uint8_t **start) {
	uint32_t i = 0;
	while (i < n && json_space(c[i]))
		i++;
	while (n > i && json_space(c[n - 1]))
		n--;
	*start = c + i;
	return n - i;
}

static int window_open(ws_ctx *ctx) {
	window *w = ws_data(ctx);
	w->size = 1000;
	/* Like Go's encoding/json in the twin: an empty configuration and the
	 * literal null keep the defaults, white space alone is an error. */
	uint32_t len;
	const uint8_t *cfg = ws_config(ctx, &len), *v;
	uint32_t n = trimmed(cfg, len, &v);
	if (len > 0 && n == 0)
		return ws_error(ctx, "config: unexpected end of JSON input");
	if (!(n == 4 && memcmp(v, "null", 4) == 0)) {
		int found = ws_config_int64(ctx, "size", &w->size);
		if (found < 0)
			return found;
	}
	if (w->size <= 0)
		return ws_errorf(ctx, "config size must be a positive number of milliseconds, got %lld",
		                 (long long)w->size);
	int late = ws_output(ctx, "late");
	if (late < 0)
		return ws_errorf(ctx, "the window vertex needs outputs [\"main\",\"late\"]: output \"late\": %s",
		                 ws_status_text(late));
	w->late = (uint32_t)late;
	return ws_value_state_get(ctx, "sum", &w->sum);
}

/*
 * bounds returns the window [start, end) holding ts: start is ts rounded
 * down (towards minus infinity) to a multiple of size. Bounds beyond the
 * int64 range are clamped to it. C's % truncates towards zero like Go's,
 * and no step here can overflow.
 */
static void bounds(int64_t ts, int64_t size, int64_t *start, int64_t *end) {
	int64_t rem = ts % size;
	if (rem < 0) {
		/* ts is negative: the boundary above it is ts-rem. */
		*end = ts - rem;
		*start = *end < INT64_MIN + size ? INT64_MIN : *end - size;
		return;
	}
	*start = ts - rem;
	*end = *start > INT64_MAX - size ? INT64_MAX : *start + size;
}

/* parse_int parses a decimal int64 with an optional sign, accepting what the
 * Go twin's parseInt accepts and failing with the same messages. */
static int parse_int(ws_ctx *ctx, const uint8_t *b, uint32_t len, int64_t *out) {
	const uint8_t *s = b;
	uint32_t n = len;
	int neg = n > 0 && s[0] == '-';
	if (n > 0 && (s[0] == '-' || s[0] == '+')) {
		s++;
		n--;
	}
	char q[WS_QUOTE_CAP];
	if (n == 0) {
		ws_quote(q, sizeof q, b, len);
		return ws_errorf(ctx, "value %s is not a decimal integer", q);
	}
	const uint64_t lim = (uint64_t)1 << 63;
	uint64_t v = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t c = s[i];
		if (c < '0' || c > '9') {
			ws_quote(q, sizeof q, b, len);
			return ws_errorf(ctx, "value %s is not a decimal integer", q);
		}
		/* The first test keeps v*10 from wrapping around. */
		if (v > lim / 10 || (v = v * 10 + (uint64_t)(c - '0')) > lim) {
			ws_quote(q, sizeof q, b, len);
			return ws_errorf(ctx, "value %s overflows int64", q);
		}
	}
	if (neg) {
		*out = (int64_t)(0 - v);
		return 0;
	}
	if (v > (uint64_t)INT64_MAX) {
		ws_quote(q, sizeof q, b, len);
		return ws_errorf(ctx, "value %s overflows int64", q);
	}
	*out = (int64_t)v;
	return 0;
}

/* put_end writes the window end as 8 bytes big-endian: the namespaces of one
 * key then sort by time (for non-negative ends). */
static void put_end(uint8_t ns[8], int64_t end) {
	uint64_t u = (uint64_t)end;
	for (int i = 0; i < 8; i++)
		ns[i] = (uint8_t)(u >> (56 - 8 * i));
}

static int window_process(ws_ctx *ctx, const ws_record *r) {
	window *w = ws_data(ctx);
	int64_t start, end;
	bounds(r->ts, w->size, &start, &end);
	if (end - 1 <= ws_watermark(ctx)) {
		ws_emit_to(ctx, w->late, r->key, r->key_len, r->value, r->value_len, r->ts);
		return 0;
	}
	int64_t v;
	int st = parse_int(ctx, r->value, r->value_len, &v);
	if (st < 0)
		return st;
	uint8_t ns[8];
	put_end(ns, end);
	int64_t sum;
	if ((st = ws_value_get_int64_ns(ctx, w->sum, ns, 8, &sum)) < 0)
		return st;
	/* Wraps around like the Go twin's s + v. */
	if ((st = ws_value_put_int64_ns(ctx, w->sum, ns, 8, (int64_t)((uint64_t)sum + (uint64_t)v))) < 0)
		return st;
	return ws_register_event_timer(ctx, end - 1, ns, 8);
}

static int window_on_timer(ws_ctx *ctx, const ws_timer *t) {
	window *w = ws_data(ctx);
	if (t->ns_len != 8)
		return ws_errorf(ctx, "timer namespace has %u bytes, want an 8-byte window end", t->ns_len);
	uint64_t u = 0;
	for (int i = 0; i < 8; i++)
		u = u << 8 | t->ns[i];
	int64_t end = (int64_t)u;
	int64_t sum;
	int found = ws_value_get_int64_ns(ctx, w->sum, t->ns, 8, &sum);
	if (found <= 0)
		return found;
	/* start,end,sum; the start is end-size, wrapping around like the Go
	 * twin's for a window clamped at the int64 range. */
	char buf[3 * WS_INT64_DIGITS + 2];
	uint32_t n = ws_format_int64(buf, (int64_t)((uint64_t)end - (uint64_t)w->size));
	buf[n++] = ',';
	n += ws_format_int64(buf + n, end);
	buf[n++] = ',';
	n += ws_format_int64(buf + n, sum);
	ws_emit(ctx, t->key, t->key_len, buf, n, t->ts);
	return ws_value_delete_ns(ctx, w->sum, t->ns, 8);
}

static const ws_operator window_op = {
	.name = "window",
	.data_size = sizeof(window),
	.open = window_open,
	.process = window_process,
	.on_timer = window_on_timer,
};

WSTREAM_OPERATORS(&window_op);
