// Package durable holds what the packages that write files for recovery
// share to make them survive a crash of the machine.
package durable

import "os"

// SyncDir makes the entries of the directory dir durable: files renamed
// into it or removed from it, directories created in it. Syncing a file
// makes its contents durable, not its name.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
