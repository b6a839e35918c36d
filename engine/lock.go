package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// LockFile is the file whose lock makes one process the owner of a data
// directory: two engines on one directory would share the embedded NATS
// store, the job records and the state, and the second would remove the
// first's nats.url on its way out.
func LockFile(dataDir string) string { return filepath.Join(dataDir, "lock") }

// ErrDataDirInUse is returned by Start when another process holds the data
// directory.
var ErrDataDirInUse = errors.New("data directory in use")

// lockDataDir takes the lock of dataDir for this process and writes who
// holds it (process id and command line) into the lock file, for the error
// another process gets. The kernel releases the lock when the process ends,
// however it ends: a killed deploy leaves nothing to clean up.
func lockDataDir(dataDir string) (unlock func(), err error) {
	f, err := os.OpenFile(LockFile(dataDir), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dataDir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(LockFile(dataDir))
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			who := strings.TrimSpace(string(holder))
			if who == "" {
				who = "another process"
			}
			return nil, fmt.Errorf("%w: %s is used by %s; stop it, or give this command another --data", ErrDataDirInUse, dataDir, who)
		}
		return nil, fmt.Errorf("data directory %s: locking %s: %w", dataDir, LockFile(dataDir), err)
	}
	// The holder's description, written only once the lock is held.
	desc := fmt.Sprintf("process %d (%s)\n", os.Getpid(), strings.Join(os.Args, " "))
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(desc), 0)
	}
	return func() {
		// Emptied first: a reader that finds the file unlocked but not yet
		// empty would name a process that has let go.
		_ = f.Truncate(0)
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
