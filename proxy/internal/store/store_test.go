package store_test

import (
	"errors"
	"testing"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/resource"
	"coxswain.dev/coxswain/proxy/internal/store"
)

func set(t *testing.T, version string, rs ...*discoveryv1.Resource) *resource.Set {
	t.Helper()
	s, err := resource.NewSet(version, rs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func good(t *testing.T, key string) *discoveryv1.Resource {
	t.Helper()
	p, err := anypb.New(wrapperspb.String(key))
	if err != nil {
		t.Fatal(err)
	}
	return &discoveryv1.Resource{Key: key, Payload: p}
}

func TestApplyRefusesInvalidSetsAndKeepsTheCurrentOne(t *testing.T) {
	t.Parallel()
	s := store.New(logr.Discard())
	if s.Current() != nil {
		t.Fatal("a new store holds a set")
	}
	first := set(t, "v1", good(t, "a"))
	if err := s.Apply(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		set  *resource.Set
	}{
		{"a nil set is refused", nil},
		{"a set without a version is refused", set(t, "", good(t, "a"))},
		{"a resource without a payload is refused", set(t, "v2", good(t, "a"), &discoveryv1.Resource{Key: "b"})},
		{"a resource without a key is refused", set(t, "v2", &discoveryv1.Resource{Payload: good(t, "x").GetPayload()})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Apply(t.Context(), tt.set); err == nil {
				t.Fatal("Apply accepted the set")
			}
			if s.Current() != first {
				t.Fatalf("the current set changed to %v", s.Current())
			}
		})
	}
}

func TestApplySwapsTheWholeSet(t *testing.T) {
	t.Parallel()
	s := store.New(logr.Discard())
	next := set(t, "v2", good(t, "a"), good(t, "b"))
	if err := s.Apply(t.Context(), set(t, "v1", good(t, "a"))); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(t.Context(), next); err != nil {
		t.Fatal(err)
	}
	if s.Current() != next {
		t.Fatalf("current %v, want v2", s.Current().Version())
	}
	if err := s.Apply(t.Context(), set(t, "", good(t, "a"))); !errors.Is(err, store.ErrNoVersion) {
		t.Fatalf("Apply without version: %v", err)
	}
}
