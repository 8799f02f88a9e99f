package cache

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// Tests that the version of a fixed set of resources is the one every release computes: a proxy
// checks the versions an operator of another release gives, so the hash must never change.
func TestVersionIsTheSameInEveryRelease(t *testing.T) {
	t.Parallel()
	var rs []*discoveryv1.Resource
	for _, kv := range [][2]string{{"listener/ns/gw/80", "a"}, {"cluster/ns/svc:80", "b"}, {"routes/ns/gw/80|http|a.example.com", "c"}} {
		r, err := NewResource(kv[0], wrapperspb.String(kv[1]))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	s, err := NewSnapshot(rs, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Version(), "f71ab30aa7d2ad4c89da2684d984b02e5bf1f9e24e43249658620589e9d13cb3"; got != want {
		t.Errorf("version %s, want %s", got, want)
	}
}
