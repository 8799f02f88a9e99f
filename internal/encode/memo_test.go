package encode_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"coxswain.dev/coxswain/internal/encode"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/snapshot"
	"coxswain.dev/coxswain/internal/state"
)

// Tests that a Memo, which reuses what it encoded before, gives byte for byte the resources and
// versions of encoding every message anew (encode.All), for every one of the graph's golden
// inputs, on its first encoding and on the next, which reuses the first: proxies and versions
// cannot tell the two apart.
func TestMemoEncodesAsAll(t *testing.T) {
	ins, _ := filepath.Glob(filepath.Join(graphInputs, "*.in.yaml"))
	if len(ins) == 0 {
		t.Fatal("no graph inputs")
	}
	listeners := 0
	for _, in := range ins {
		t.Run(strings.TrimSuffix(filepath.Base(in), ".in.yaml"), func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := state.Decode(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			snaps := snapshot.Compile(graph.Build(cs, graph.Options{}))
			whole, err := encode.All(snaps)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range snaps {
				// Three times with one memo: the second encoding reuses what the first made; the
				// third is of copies of the listeners and virtual hosts, whose routes are grouped
				// anew (Hosts), so it matches each group with its set of before and reuses that.
				m := encode.NewMemo()
				var last *encode.Encoded
				for round := range 3 {
					if round == 2 {
						s = regrouped(s)
					}
					got, err := m.Snapshot(s)
					if err != nil {
						t.Fatal(err)
					}
					if round == 2 {
						for j, r := range got.Resources {
							if r != last.Resources[j] {
								t.Fatalf("scope %s: resource %s encoded again for regrouped routes", s.Scope, r.GetKey())
							}
						}
					}
					last = got
					want := whole[i]
					if got.Version != want.Version || len(got.Resources) != len(want.Resources) {
						t.Fatalf("scope %s: version %s with %d resources, want %s with %d", want.Scope, got.Version, len(got.Resources), want.Version, len(want.Resources))
					}
					for j, r := range got.Resources {
						w := want.Resources[j]
						if r.GetKey() != w.GetKey() || r.GetPayload().GetTypeUrl() != w.GetPayload().GetTypeUrl() ||
							!bytes.Equal(r.GetPayload().GetValue(), w.GetPayload().GetValue()) {
							t.Fatalf("scope %s: resource %s (%s, %d bytes) differs from %s (%s, %d bytes)", want.Scope,
								r.GetKey(), r.GetPayload().GetTypeUrl(), len(r.GetPayload().GetValue()),
								w.GetKey(), w.GetPayload().GetTypeUrl(), len(w.GetPayload().GetValue()))
						}
						if strings.HasPrefix(r.GetKey(), encode.ListenerKeyPrefix) {
							listeners++
						}
					}
				}
			}
		})
	}
	if listeners == 0 {
		t.Fatal("no listener was compared")
	}
}

// regrouped returns a copy of s whose listeners and virtual hosts are copies holding the same
// routes, without the groups a compile made of them.
func regrouped(s *snapshot.Snapshot) *snapshot.Snapshot {
	out := *s
	out.Listeners = nil
	for _, l := range s.Listeners {
		cl := *l
		cl.VirtualHosts = nil
		for _, vh := range l.VirtualHosts {
			cl.VirtualHosts = append(cl.VirtualHosts, &snapshot.VirtualHost{Name: vh.Name, Hostname: vh.Hostname, Certificates: vh.Certificates, Routes: vh.Routes})
		}
		out.Listeners = append(out.Listeners, &cl)
	}
	return &out
}
