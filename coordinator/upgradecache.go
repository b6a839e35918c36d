package coordinator

import (
	"errors"
	"os"
	"sync"
	"time"
)

// upgradeCache keeps each job's upgrade history as last read, so that a
// job's detail, which the UI and scripts poll every second, reads and
// decodes the file only after it changed (in size or modification time):
// appends, the way the history grows, change both.
type upgradeCache struct {
	mu     sync.Mutex
	byPath map[string]cachedUpgrades
	// reads counts the files read and decoded (tests watch it).
	reads int
}

type cachedUpgrades struct {
	size    int64
	mod     time.Time
	entries []UpgradeEntry
}

// read returns the upgrade history in path, oldest first; the caller must
// not change the entries.
func (u *upgradeCache) read(path string) ([]UpgradeEntry, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		u.mu.Lock()
		delete(u.byPath, path)
		u.mu.Unlock()
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	c, ok := u.byPath[path]
	u.mu.Unlock()
	if ok && c.size == fi.Size() && c.mod.Equal(fi.ModTime()) {
		return c.entries, nil
	}
	// Stat before reading: a write during the read leaves the cached
	// stat older than the file, and the next read reads it again.
	entries, err := readJSONLines[UpgradeEntry](path)
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.byPath == nil {
		u.byPath = map[string]cachedUpgrades{}
	}
	u.byPath[path] = cachedUpgrades{size: fi.Size(), mod: fi.ModTime(), entries: entries}
	u.reads++
	return entries, nil
}
