package main

import (
	"math"
	"strconv"
	"testing"
)

func TestBounds(t *testing.T) {
	for _, tc := range []struct{ ts, size, start, end int64 }{
		{0, 1000, 0, 1000},
		{999, 1000, 0, 1000},
		{1000, 1000, 1000, 2000},
		{-1, 1000, -1000, 0},
		{-1000, 1000, -1000, 0},
		{-1001, 1000, -2000, -1000},
		{7, 1, 7, 8},
		{math.MaxInt64, 1000, math.MaxInt64 - math.MaxInt64%1000, math.MaxInt64},
		{math.MinInt64, 1000, math.MinInt64, math.MinInt64 + 808},
		{math.MinInt64 + 808, 1000, math.MinInt64 + 808, math.MinInt64 + 1808},
	} {
		start, end := bounds(tc.ts, tc.size)
		if start != tc.start || end != tc.end {
			t.Errorf("bounds(%d, %d) = [%d, %d), want [%d, %d)", tc.ts, tc.size, start, end, tc.start, tc.end)
		}
		if tc.ts < start || (tc.ts >= end && end != math.MaxInt64) {
			t.Errorf("bounds(%d, %d) = [%d, %d) does not hold ts", tc.ts, tc.size, start, end)
		}
	}
}

func TestParseInt(t *testing.T) {
	for _, s := range []string{"0", "1", "-1", "+42", "007", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "-9223372036854775809", "99999999999999999999", "", "-", "+", "1a", " 1", "1.5", "--1"} {
		want, wantErr := strconv.ParseInt(s, 10, 64)
		got, err := parseInt([]byte(s))
		if (err != nil) != (wantErr != nil) || (err == nil && got != want) {
			t.Errorf("parseInt(%q) = %d, %v; want %d, %v", s, got, err, want, wantErr)
		}
	}
}
