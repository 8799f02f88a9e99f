package client

import (
	"fmt"
	"io"
	"os"

	"coxswain.dev/coxswain/discovery/pki"
)

// ReadLimited reads at most limit bytes of path, failing on anything longer: the proxy's
// mounted files (token, trust bundle, kept snapshot) are read with it, so a file grown by
// mistake or malice cannot exhaust its memory.
func ReadLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path) //nolint:gosec // the paths are the proxy's own mounts
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}

// ReadBundle reads and parses the trust bundle file at path, at most pki.MaxBundleBytes.
func ReadBundle(path string) (*pki.Bundle, error) {
	data, err := ReadLimited(path, pki.MaxBundleBytes)
	if err != nil {
		return nil, fmt.Errorf("read trust bundle: %w", err)
	}
	bundle, err := pki.ParseBundlePEM(data)
	if err != nil {
		return nil, fmt.Errorf("trust bundle %s: %w", path, err)
	}
	return bundle, nil
}
