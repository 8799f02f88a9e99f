package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

// recorder applies snapshots to Resources, refusing those poison says to, and reports each
// answered snapshot on seen.
type recorder struct {
	mu      sync.Mutex
	applied client.Resources
	poison  string
	seen    chan *discoveryv1.Snapshot
}

func (r *recorder) apply(_ context.Context, snap *discoveryv1.Snapshot) error {
	defer func() { r.seen <- snap }()
	r.mu.Lock()
	defer r.mu.Unlock()
	next := r.applied.Apply(snap)
	if _, bad := next[r.poison]; bad {
		return errors.New("poisoned resource " + r.poison)
	}
	r.applied = next
	return nil
}

func (r *recorder) values(t *testing.T) map[string]string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	for k, res := range r.applied {
		var v wrapperspb.StringValue
		if err := res.GetPayload().UnmarshalTo(&v); err != nil {
			t.Fatal(err)
		}
		out[k] = v.GetValue()
	}
	return out
}

// Tests that Run applies a full snapshot and deltas, NACKs a bad one and recovers through the
// full resend, keeping what it had meanwhile.
func TestRunAppliesAcksAndNacks(t *testing.T) {
	t.Parallel()
	p := servertest.NewPKI(t)
	c := cache.New(nil)
	set(t, c, map[string]string{"a": "1", "b": "1"})
	addr := serveStream(t, p, c)
	rec := &recorder{poison: "bad", seen: make(chan *discoveryv1.Snapshot, 1)}
	cfg := client.StreamConfig{
		Address: "passthrough:///" + addr, NodeID: "proxy-0", Scope: cache.SharedPool().Proto(),
		TLS: client.StreamTLS(tlsconfig.NewRotatingCertificate(p.SVID(t, sharedID)), p.Bundle, controllerID()),
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- client.Run(ctx, cfg, rec.apply) }()

	step := func(want map[string]string, full bool) {
		t.Helper()
		snap := <-rec.seen
		if snap.GetFull() != full {
			t.Errorf("full = %v, want %v", snap.GetFull(), full)
		}
		if diff := cmp.Diff(want, rec.values(t)); diff != "" {
			t.Errorf("applied (-want +got):\n%s", diff)
		}
	}
	step(map[string]string{"a": "1", "b": "1"}, true)
	set(t, c, map[string]string{"a": "2", "b": "1"})
	step(map[string]string{"a": "2", "b": "1"}, false)
	set(t, c, map[string]string{"a": "2", "b": "1", "bad": "x"})
	step(map[string]string{"a": "2", "b": "1"}, false) // NACKed delta
	step(map[string]string{"a": "2", "b": "1"}, true)  // NACKed full resend
	set(t, c, map[string]string{"a": "3"})
	step(map[string]string{"a": "3"}, true)

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
}

// Tests that Run returns the server's refusal with its status.
func TestRunReturnsTheRefusal(t *testing.T) {
	t.Parallel()
	p := servertest.NewPKI(t)
	addr := serveStream(t, p, cache.New(nil))
	cfg := client.StreamConfig{
		Address: "passthrough:///" + addr, NodeID: "proxy-0", Scope: cache.Gateway("prod", "web").Proto(),
		TLS: client.StreamTLS(tlsconfig.NewRotatingCertificate(p.SVID(t, sharedID)), p.Bundle, controllerID()),
	}
	err := client.Run(t.Context(), cfg, func(context.Context, *discoveryv1.Snapshot) error { return nil })
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Run returned %v, want PermissionDenied", err)
	}
}

func res(key, value string) *discoveryv1.Resource {
	r, err := cache.NewResource(key, wrapperspb.String(value))
	if err != nil {
		panic(err)
	}
	return r
}

// Tests that Apply replaces on a full snapshot, patches on a delta and leaves its input alone.
func TestResourcesApply(t *testing.T) {
	t.Parallel()
	base := client.Resources{}.Apply(&discoveryv1.Snapshot{Full: true, Resources: []*discoveryv1.Resource{res("a", "1"), res("b", "1")}})
	delta := base.Apply(&discoveryv1.Snapshot{Resources: []*discoveryv1.Resource{res("c", "1"), res("a", "2")}, RemovedKeys: []string{"b"}})
	full := delta.Apply(&discoveryv1.Snapshot{Full: true, Resources: []*discoveryv1.Resource{res("z", "1")}})
	keys := func(r client.Resources) []string {
		var out []string
		for _, k := range []string{"a", "b", "c", "z"} {
			if _, ok := r[k]; ok {
				out = append(out, k)
			}
		}
		return out
	}
	for name, tc := range map[string]struct {
		got  client.Resources
		want []string
	}{
		"the base is untouched": {base, []string{"a", "b"}},
		"the delta patched it":  {delta, []string{"a", "c"}},
		"the full replaced it":  {full, []string{"z"}},
	} {
		if diff := cmp.Diff(tc.want, keys(tc.got)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	if base["a"] == delta["a"] {
		t.Error("the delta did not replace a")
	}
}
