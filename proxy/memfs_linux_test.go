package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// Tests that the kept snapshot, which holds listener private keys, is refused on a disk and
// accepted on tmpfs.
func TestSnapshotCacheMustBeMemoryBacked(t *testing.T) {
	t.Parallel()
	disk, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	if requireMemoryBacked(disk) == nil {
		t.Skipf("%s is memory-backed here", disk)
	}
	_, err = parseFlags([]string{"--snapshot-cache=" + filepath.Join(disk, "snapshot")})
	if err == nil || !strings.Contains(err.Error(), "memory-backed") {
		t.Fatalf("a snapshot cache on disk: %v, want a refusal", err)
	}
	if requireMemoryBacked("/dev/shm") != nil {
		t.Skip("no tmpfs at /dev/shm")
	}
	if _, err := parseFlags([]string{"--snapshot-cache=/dev/shm/coxswain-snapshot"}); err != nil {
		t.Fatalf("a snapshot cache on tmpfs: %v", err)
	}
}
