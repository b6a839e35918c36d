/*
 * wordcount is a WebAssembly operator module that counts words: the
 * operator "split" turns lines into words and the operator "count" keeps a
 * count per word and emits every word's final count at the end of a bounded
 * input. It is the C twin of examples/wasm/go/wordcount and emits the same
 * records. Build it with
 *
 *     clang --target=wasm32 -O2 -nostdlib -ffreestanding -I guest-sdk/c \
 *         -Wl,--no-entry -o wordcount.wasm \
 *         examples/wasm/c/wordcount/main.c guest-sdk/c/wstream.c
 */
#include "wstream.h"

WSTREAM_PLAN("{\"name\":\"wordcount\",\"maxParallelism\":128,\"parallelism\":2,\n"
             " \"vertices\":[\n"
             "  {\"id\":\"source\",\"kind\":\"source\",\"connector\":\"gen\",\"config\":{\"count\":100000,\"keys\":1000,\"words\":4,\"seed\":1}},\n"
             "  {\"id\":\"split\",\"kind\":\"operator\",\"operator\":\"split\"},\n"
             "  {\"id\":\"count\",\"kind\":\"operator\",\"operator\":\"count\"},\n"
             "  {\"id\":\"sink\",\"kind\":\"sink\",\"connector\":\"stdout\",\"parallelism\":1}],\n"
             " \"edges\":[\n"
             "  {\"from\":\"source\",\"to\":\"split\",\"partition\":\"rebalance\"},\n"
             "  {\"from\":\"split\",\"to\":\"count\",\"partition\":\"key\"},\n"
             "  {\"from\":\"count\",\"to\":\"sink\",\"partition\":\"rebalance\"}]}");

/*
 * space_len returns the length of the white-space character at s[i] (at most
 * n-i bytes), or 0 when s[i] does not start one. White space is Go's
 * unicode.IsSpace: ASCII \t \n \v \f \r and space, U+0085, U+00A0, U+1680,
 * U+2000..U+200A, U+2028, U+2029, U+202F, U+205F and U+3000, in UTF-8.
 * Matching the exact encodings is enough to split like Go: they start with
 * lead bytes, which never occur inside another character's encoding.
 */
static inline uint32_t space_len(const uint8_t *s, uint32_t i, uint32_t n) {
	uint8_t c = s[i];
	if (c < 0x80)
		return (c == ' ' || (c >= '\t' && c <= '\r')) ? 1 : 0;
	uint32_t left = n - i;
	if (c == 0xC2)
		return left >= 2 && (s[i + 1] == 0x85 || s[i + 1] == 0xA0) ? 2 : 0;
	if (left < 3)
		return 0;
	uint8_t b1 = s[i + 1], b2 = s[i + 2];
	switch (c) {
	case 0xE1: /* U+1680 */
		return b1 == 0x9A && b2 == 0x80 ? 3 : 0;
	case 0xE2:
		if (b1 == 0x80) /* U+2000..U+200A, U+2028, U+2029, U+202F */
			return (b2 <= 0x8A || b2 == 0xA8 || b2 == 0xA9 || b2 == 0xAF) && b2 >= 0x80 ? 3 : 0;
		return b1 == 0x81 && b2 == 0x9F ? 3 : 0; /* U+205F */
	case 0xE3: /* U+3000 */
		return b1 == 0x80 && b2 == 0x80 ? 3 : 0;
	}
	return 0;
}

/* split emits one record per white-space-separated word of a line: key =
 * the word, empty value, the line's timestamp. */
static int split_process(ws_ctx *ctx, const ws_record *r) {
	const uint8_t *line = r->value;
	uint32_t n = r->value_len;
	int64_t start = -1;
	for (uint32_t i = 0; i < n;) {
		uint32_t sp = space_len(line, i, n);
		if (sp) {
			if (start >= 0) {
				ws_emit(ctx, line + start, i - (uint32_t)start, 0, 0, r->ts);
				start = -1;
			}
			i += sp;
			continue;
		}
		if (start < 0)
			start = i;
		i++;
	}
	if (start >= 0)
		ws_emit(ctx, line + start, n - (uint32_t)start, 0, 0, r->ts);
	return 0;
}

/* count keeps value state "count" per word (an int64, 8 bytes
 * little-endian) and emits key = word, value = the decimal count when the
 * input ends: an event-time timer at INT64_MAX. */
typedef struct count {
	ws_value_state n;
} count;

static int count_open(ws_ctx *ctx) {
	count *c = ws_data(ctx);
	return ws_value_state_get(ctx, "count", &c->n);
}

static int count_process(ws_ctx *ctx, const ws_record *r) {
	(void)r;
	count *c = ws_data(ctx);
	int64_t n;
	int found = ws_value_add_int64(ctx, c->n, 1, &n);
	if (found < 0)
		return found;
	/* Timers are keyed state: one registration per word is enough. */
	return found ? WS_OK : ws_register_event_timer(ctx, INT64_MAX, 0, 0);
}

static int count_on_timer(ws_ctx *ctx, const ws_timer *t) {
	count *c = ws_data(ctx);
	int64_t n;
	int found = ws_value_get_int64(ctx, c->n, &n);
	if (found <= 0)
		return found;
	char buf[WS_INT64_DIGITS];
	ws_emit(ctx, t->key, t->key_len, buf, ws_format_int64(buf, n), t->ts);
	return ws_value_delete(ctx, c->n);
}

static const ws_operator split = {
	.name = "split",
	.process = split_process,
};

static const ws_operator count_op = {
	.name = "count",
	.data_size = sizeof(count),
	.open = count_open,
	.process = count_process,
	.on_timer = count_on_timer,
};

WSTREAM_OPERATORS(&split, &count_op);
