package abi

// KeyHash is the stable hash of key bytes that assigns keys to key groups:
// 64-bit FNV-1a over the bytes, then the murmur3 fmix64 finaliser so that the
// low bits are well mixed. It is part of the savepoint format: changing it is
// a format-version change.
func KeyHash(key []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range key {
		h ^= uint64(c)
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// KeyGroup returns the key group of key for maxParallelism key groups.
func KeyGroup(key []byte, maxParallelism int) int {
	h := KeyHash(key)
	if maxParallelism > 0 && maxParallelism&(maxParallelism-1) == 0 {
		// The same group, without a division: the default 128 and most
		// settings are powers of two.
		return int(h & uint64(maxParallelism-1))
	}
	return int(h % uint64(maxParallelism))
}

// SubtaskForKeyGroup returns the subtask index that owns key group kg when an
// operator runs with parallelism subtasks over maxParallelism key groups.
func SubtaskForKeyGroup(kg, parallelism, maxParallelism int) int {
	return kg * parallelism / maxParallelism
}

// KeyGroupRange is the contiguous, inclusive range [Start, End] of key groups
// owned by one subtask.
type KeyGroupRange struct {
	Start, End int
}

// Contains reports whether kg lies in the range.
func (r KeyGroupRange) Contains(kg int) bool { return kg >= r.Start && kg <= r.End }

// Len is the number of key groups in the range (0 when empty).
func (r KeyGroupRange) Len() int {
	if r.End < r.Start {
		return 0
	}
	return r.End - r.Start + 1
}

// RangeForSubtask returns the key groups owned by subtask index of
// parallelism. It is the inverse of SubtaskForKeyGroup.
func RangeForSubtask(index, parallelism, maxParallelism int) KeyGroupRange {
	start := (index*maxParallelism + parallelism - 1) / parallelism
	end := ((index+1)*maxParallelism - 1) / parallelism
	return KeyGroupRange{Start: start, End: end}
}
