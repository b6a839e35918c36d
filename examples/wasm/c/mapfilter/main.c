/*
 * mapfilter is a stateless WebAssembly operator module: the operator "upper"
 * turns values to ASCII upper case and the operator "filter" keeps the
 * records whose value contains a substring (config {"contains":"..."}). It
 * is the C twin of examples/wasm/go/mapfilter. Build it with
 *
 *     clang --target=wasm32 -msimd128 -O2 -nostdlib -ffreestanding -I guest-sdk/c \
 *         -Wl,--no-entry -o mapfilter.wasm \
 *         examples/wasm/c/mapfilter/main.c guest-sdk/c/wstream.c
 */
#include "wstream.h"
#ifdef __wasm_simd128__
#include <wasm_simd128.h>
#endif

WSTREAM_PLAN("{\"name\":\"mapfilter\",\"maxParallelism\":128,\"parallelism\":2,\n"
             " \"vertices\":[\n"
             "  {\"id\":\"source\",\"kind\":\"source\",\"connector\":\"gen\",\"config\":{\"count\":100000,\"keys\":1000,\"words\":4,\"seed\":1}},\n"
             "  {\"id\":\"upper\",\"kind\":\"operator\",\"operator\":\"upper\"},\n"
             "  {\"id\":\"filter\",\"kind\":\"operator\",\"operator\":\"filter\",\"config\":{\"contains\":\"E\"}},\n"
             "  {\"id\":\"sink\",\"kind\":\"sink\",\"connector\":\"stdout\",\"parallelism\":1}],\n"
             " \"edges\":[\n"
             "  {\"from\":\"source\",\"to\":\"upper\",\"partition\":\"forward\"},\n"
             "  {\"from\":\"upper\",\"to\":\"filter\",\"partition\":\"forward\"},\n"
             "  {\"from\":\"filter\",\"to\":\"sink\",\"partition\":\"rebalance\"}]}");

/* upper8 upper-cases the 8 ASCII bytes of x (SWAR): a byte is a lower-case
 * letter when, without its top bit, it is >= 'a' and <= 'z' and its top
 * bit was clear; 0x80 >> 2 is the case bit. */
static inline uint64_t upper8(uint64_t x) {
	const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
	uint64_t low = x & ~high;
	uint64_t ge_a = low + (0x80 - 'a') * ones;
	uint64_t gt_z = low + (0x80 - 'z' - 1) * ones;
	return x ^ ((ge_a & ~gt_z & ~x & high) >> 2);
}

static inline uint64_t load8(const uint8_t *p) {
	uint64_t x;
	__builtin_memcpy(&x, p, 8);
	return x;
}

static inline void store8(uint8_t *p, uint64_t x) { __builtin_memcpy(p, &x, 8); }

static inline uint32_t upper4(uint32_t x) {
	const uint32_t ones = 0x01010101u, high = 0x80808080u;
	uint32_t low = x & ~high;
	uint32_t ge_a = low + (0x80 - 'a') * ones;
	uint32_t gt_z = low + (0x80 - 'z' - 1) * ones;
	return x ^ ((ge_a & ~gt_z & ~x & high) >> 2);
}

static inline uint8_t upper1(uint8_t c) { return (c >= 'a' && c <= 'z') ? (uint8_t)(c - ('a' - 'A')) : c; }

/* up8 upper-cases the 8 bytes at src + i into dst + i. */
static inline void up8(uint8_t *dst, const uint8_t *src, uint32_t i) { store8(dst + i, upper8(load8(src + i))); }

/* upper_ascii writes src to dst with 'a'..'z' in upper case. It works on
 * words and covers the ends with words that overlap the ones before them,
 * so that values up to 32 bytes take no loop at all: compiled to wasm, under
 * a host enforcing call deadlines (wazero's WithCloseOnContextDone) every
 * loop iteration costs a call to a termination check, more than the work. */
static inline void upper_ascii(uint8_t *dst, const uint8_t *src, uint32_t n) {
	if (n >= 8) {
		if (n <= 16) {
			up8(dst, src, 0);
			up8(dst, src, n - 8);
			return;
		}
		for (uint32_t i = 0; i + 32 <= n; i += 32) {
			up8(dst, src, i);
			up8(dst, src, i + 8);
			up8(dst, src, i + 16);
			up8(dst, src, i + 24);
		}
		/* The last 32 bytes (or all of them when n < 32), overlapping. */
		uint32_t i = n >= 32 ? n - 32 : 0;
		up8(dst, src, i);
		up8(dst, src, i + 8);
		up8(dst, src, n - 16);
		up8(dst, src, n - 8);
		return;
	}
	if (n >= 4) {
		uint32_t a, b;
		__builtin_memcpy(&a, src, 4);
		__builtin_memcpy(&b, src + n - 4, 4);
		a = upper4(a);
		b = upper4(b);
		__builtin_memcpy(dst, &a, 4);
		__builtin_memcpy(dst + n - 4, &b, 4);
		return;
	}
	if (n > 0)
		dst[0] = upper1(src[0]);
	if (n > 1)
		dst[1] = upper1(src[1]);
	if (n > 2)
		dst[2] = upper1(src[2]);
}

/* upper emits each record with its value in ASCII upper case, written
 * straight into the output buffer. */
static int upper_process(ws_ctx *ctx, const ws_record *r) {
	uint8_t *v = ws_emit_reserve(ctx, 0, r->key, r->key_len, r->value_len, r->ts);
	if (v)
		upper_ascii(v, r->value, r->value_len);
	return 0;
}

/* filter keeps the records whose value contains config "contains"; without
 * it, it keeps every record. */
typedef struct filter {
	char *contains;
	uint32_t len;
} filter;

static int filter_open(ws_ctx *ctx) {
	filter *f = ws_data(ctx);
	int found = ws_config_string(ctx, "contains", &f->contains, &f->len);
	return found < 0 ? found : 0;
}

/* pair_hits returns a bit per position j of s + i .. s + i + 7 where
 * s[j] == a and s[j + o] == b might both hold, reading s[i .. i + 7 + o]:
 * a SWAR compare, whose false positives (a byte above a match) the caller
 * checks. */
static inline uint64_t pair_hits(const uint8_t *s, uint32_t i, uint32_t o, uint64_t pa, uint64_t pb) {
	const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
	uint64_t x = (load8(s + i) ^ pa) | (load8(s + i + o) ^ pb);
	return (x - ones) & ~x & high;
}

/* match_at reports whether sub (m >= 1 bytes) occurs at s + j. */
static inline int match_at(const uint8_t *s, uint32_t j, const uint8_t *sub, uint32_t m) {
	return s[j] == sub[0] && (m == 1 || (s[j + 1] == sub[1] && (m == 2 || memcmp(s + j + 2, sub + 2, m - 2) == 0)));
}

/* contains reports whether sub occurs in s. It looks for sub's first two
 * bytes together (o = 1; a one-byte needle compares its byte twice, o =
 * 0), as Go's bytes.Index does with vector instructions, so that a first
 * byte common in the input (every word of the benchmark's values starts
 * with the same letter) is not a candidate to check each time: sixteen
 * positions at a time with wasm's SIMD, eight with a SWAR compare without
 * it. Values up to 16 + o bytes take no loop, and the end of a longer one
 * is an overlapping last step: compiled to wasm under a host that enforces
 * call deadlines, every loop iteration costs a check. */
static int contains(const uint8_t *s, uint32_t n, const uint8_t *sub, uint32_t m) {
	if (m == 0)
		return 1;
	if (m > n)
		return 0;
	const uint32_t last = n - m; /* the last position sub can start at */
	const uint32_t o = m > 1;    /* the offset of the second byte compared */
#ifdef __wasm_simd128__
	if (n >= 16 + o) {
		const v128_t a = wasm_i8x16_splat((int8_t)sub[0]), b = wasm_i8x16_splat((int8_t)sub[o]);
		/* Positions i .. i + 15, from bytes i .. i + 15 + o; no false
		 * positives. */
		for (uint32_t i = 0;; i += 16) {
			if (i + 16 + o > n)
				i = n - 16 - o; /* the rest, overlapping */
			uint32_t hits = wasm_i8x16_bitmask(
			    wasm_v128_and(wasm_i8x16_eq(wasm_v128_load(s + i), a), wasm_i8x16_eq(wasm_v128_load(s + i + o), b)));
			for (; hits; hits &= hits - 1) {
				uint32_t j = i + (uint32_t)__builtin_ctz(hits);
				if (j > last)
					break;
				if (m <= 2 || memcmp(s + j + 2, sub + 2, m - 2) == 0)
					return 1;
			}
			if (i + 16 + o >= n)
				return 0;
		}
	}
#endif
	if (n < 8 + o) {
		for (uint32_t i = 0; i <= last; i++)
			if (match_at(s, i, sub, m))
				return 1;
		return 0;
	}
	const uint64_t ones = 0x0101010101010101ull;
	const uint64_t pa = ones * sub[0], pb = ones * sub[o];
	/* Positions i .. i + 7, from bytes i .. i + 7 + o. */
	for (uint32_t i = 0;; i += 8) {
		if (i + 8 + o > n)
			i = n - 8 - o; /* the rest, overlapping */
		for (uint64_t hits = pair_hits(s, i, o, pa, pb); hits; hits &= hits - 1) {
			uint32_t j = i + ((uint32_t)__builtin_ctzll(hits) >> 3);
			if (j > last)
				break;
			if (match_at(s, j, sub, m))
				return 1;
		}
		if (i + 8 + o >= n)
			return 0;
	}
}

static int filter_process(ws_ctx *ctx, const ws_record *r) {
	filter *f = ws_data(ctx);
	if (contains(r->value, r->value_len, (const uint8_t *)f->contains, f->len))
		ws_emit(ctx, r->key, r->key_len, r->value, r->value_len, r->ts);
	return 0;
}

static int filter_close(ws_ctx *ctx) {
	filter *f = ws_data(ctx);
	ws_free(f->contains);
	f->contains = 0;
	return 0;
}

static const ws_operator upper = {
	.name = "upper",
	.process = upper_process,
};

static const ws_operator filter_op = {
	.name = "filter",
	.data_size = sizeof(filter),
	.open = filter_open,
	.process = filter_process,
	.close = filter_close,
};

WSTREAM_OPERATORS(&upper, &filter_op);
