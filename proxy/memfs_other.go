//go:build !linux

package main

import "errors"

// requireMemoryBacked cannot tell a memory-backed file system here, so it refuses.
func requireMemoryBacked(string) error {
	return errors.New("a memory-backed file system can only be checked on Linux")
}
