package main

import (
	"fmt"
	"syscall"
)

// Magic numbers of the memory-backed file systems (linux/magic.h).
const (
	tmpfsMagic = 0x01021994
	ramfsMagic = 0x858458f6
)

// requireMemoryBacked refuses a directory whose file system is not memory-backed: the kept
// snapshot holds listener private keys, which must never reach a disk.
func requireMemoryBacked(dir string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err
	}
	fsType := uint32(st.Type) //nolint:gosec // a magic number: its width differs per architecture, its value fits 32 bits
	if fsType != tmpfsMagic && fsType != ramfsMagic {
		return fmt.Errorf("%s is not on a memory-backed file system (tmpfs, an emptyDir with medium Memory)", dir)
	}
	return nil
}
