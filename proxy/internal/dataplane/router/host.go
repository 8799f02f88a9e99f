package router

import (
	"maps"
	"strings"
)

// hostIndex maps hostnames to values: exact names, wildcards ("*.example.com", stored by their
// suffix ".example.com") and the catch-all (empty hostname). Insertion keeps the first value
// for a hostname.
type hostIndex[T any] struct {
	exact  map[string]T
	wild   map[string]T
	any    T
	hasAny bool
}

func newHostIndex[T any]() hostIndex[T] {
	return hostIndex[T]{exact: map[string]T{}, wild: map[string]T{}}
}

// get returns the value stored for exactly this hostname pattern.
func (h *hostIndex[T]) get(hostname string) (T, bool) {
	switch {
	case hostname == "":
		return h.any, h.hasAny
	case isWildcard(hostname):
		v, ok := h.wild[hostname[1:]]
		return v, ok
	}
	v, ok := h.exact[hostname]
	return v, ok
}

// put stores v under a hostname pattern unless one is stored already.
func (h *hostIndex[T]) put(hostname string, v T) {
	if _, ok := h.get(hostname); ok {
		return
	}
	h.set(hostname, v)
}

// lookup returns the most specific value for host: the exact name, else the longest wildcard
// with at least one more label, else the catch-all.
func (h *hostIndex[T]) lookup(host string) (T, bool) {
	if v, ok := h.exact[host]; ok {
		return v, true
	}
	if len(h.wild) > 0 {
		for i := 1; i < len(host); i++ {
			if host[i] != '.' {
				continue
			}
			if v, ok := h.wild[host[i:]]; ok {
				return v, true
			}
		}
	}
	return h.any, h.hasAny
}

func isWildcard(hostname string) bool { return strings.HasPrefix(hostname, "*.") }

// NormalizeHost lowers a request's Host header and strips its port, returning host itself when
// it needs no change (the common case allocates nothing).
func NormalizeHost(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		host = host[:i]
	}
	host = strings.TrimSuffix(host, ".")
	for i := 0; i < len(host); i++ {
		if c := host[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(host)
		}
	}
	return host
}

// clone returns a copy of h that can be changed without changing h.
func (h *hostIndex[T]) clone() hostIndex[T] {
	out := hostIndex[T]{exact: maps.Clone(h.exact), wild: maps.Clone(h.wild), any: h.any, hasAny: h.hasAny}
	if out.exact == nil {
		out.exact = map[string]T{}
	}
	if out.wild == nil {
		out.wild = map[string]T{}
	}
	return out
}

// set stores v under a hostname pattern, replacing what is stored.
func (h *hostIndex[T]) set(hostname string, v T) {
	switch {
	case hostname == "":
		h.any, h.hasAny = v, true
	case isWildcard(hostname):
		h.wild[hostname[1:]] = v
	default:
		h.exact[hostname] = v
	}
}

// del removes a hostname pattern.
func (h *hostIndex[T]) del(hostname string) {
	switch {
	case hostname == "":
		var zero T
		h.any, h.hasAny = zero, false
	case isWildcard(hostname):
		delete(h.wild, hostname[1:])
	default:
		delete(h.exact, hostname)
	}
}
