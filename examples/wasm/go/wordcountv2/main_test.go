package main

import (
	"encoding/binary"
	"testing"
)

func TestMigrateCount(t *testing.T) {
	v1 := binary.LittleEndian.AppendUint64(nil, 17)
	got, err := migrateCount(1, []byte("w"), nil, v1)
	if err != nil || string(got) != "17" {
		t.Fatalf("migrating a version 1 count of 17: %q, %v", got, err)
	}
	if _, err := migrateCount(1, nil, nil, []byte("17")); err == nil {
		t.Fatal("a 2-byte version 1 count migrated")
	}
	if _, err := migrateCount(2, nil, nil, v1); err == nil {
		t.Fatal("a version 2 value migrated from version 2")
	}
}
