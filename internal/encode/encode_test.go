package encode_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/routeset"
	"coxswain.dev/coxswain/internal/encode"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/snapshot"
	"coxswain.dev/coxswain/internal/state"
	"coxswain.dev/coxswain/internal/state/statetest"
)

var update = flag.Bool("update", false, "rewrite the golden .out.yaml files from the current output")

// graphInputs are the pipeline's golden inputs; the encode goldens reuse a few of them.
const graphInputs = "../graph/testdata"

func encodeFile(t *testing.T, path string, shuffle uint64) []*encode.Encoded {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if shuffle > 0 {
		docs := strings.Split(string(raw), "\n---\n")
		rand.New(rand.NewPCG(shuffle, shuffle)).Shuffle(len(docs), func(i, j int) { docs[i], docs[j] = docs[j], docs[i] })
		raw = []byte(strings.Join(docs, "\n---\n"))
	}
	cs, err := state.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	out, err := encode.All(snapshot.Compile(graph.Build(cs, graph.Options{})))
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return out
}

// Tests that the encoded form of testdata/<case>.out.yaml's inputs (taken from the graph's
// goldens) is exactly testdata/<case>.out.yaml, shown as JSON-mapped protobuf with keys redacted.
func TestGolden(t *testing.T) {
	outs, _ := filepath.Glob(filepath.Join("testdata", "*.out.yaml"))
	if len(outs) == 0 {
		t.Fatal("no encode goldens")
	}
	for _, out := range outs {
		name := strings.TrimSuffix(filepath.Base(out), ".out.yaml")
		t.Run(name, func(t *testing.T) {
			in := filepath.Join(graphInputs, name+".in.yaml")
			if _, err := os.Stat(in); err != nil {
				t.Fatalf("%s has no input %s: delete it", out, in)
			}
			got := readable(t, encodeFile(t, in, 0))
			if *update {
				if err := os.WriteFile(out, got, 0o600); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("encoded form differs from %s (-want +got):\n%s", out, diff)
			}
		})
	}
}

// readable renders encoded snapshots as YAML: scope, version, and each resource's key, type and
// payload, with private keys redacted.
func readable(t *testing.T, encoded []*encode.Encoded) []byte {
	t.Helper()
	type resource struct {
		Key     string          `json:"key"`
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload"`
	}
	type scope struct {
		Scope     string     `json:"scope"`
		Version   string     `json:"version"`
		Resources []resource `json:"resources"`
	}
	var out []scope
	for _, e := range encoded {
		s := scope{Scope: e.Scope.String(), Version: e.Version}
		for _, r := range e.Resources {
			msg, err := r.GetPayload().UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			js := redactedJSON(t, msg)
			s.Resources = append(s.Resources, resource{Key: r.GetKey(), Type: r.GetPayload().GetTypeUrl(), Payload: js})
		}
		out = append(out, s)
	}
	y, err := yaml.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// redactedJSON maps a payload to JSON and replaces a certificate's private key.
func redactedJSON(t *testing.T, msg proto.Message) json.RawMessage {
	t.Helper()
	js, err := protojson.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := msg.(*discoveryv1.Certificate); !ok {
		return js
	}
	fields := map[string]any{}
	if err := json.Unmarshal(js, &fields); err != nil {
		t.Fatal(err)
	}
	fields["privateKeyPem"] = "[redacted]"
	js, err = json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Tests that every golden input encodes to the same bytes and versions whatever the input order.
func TestDeterministic(t *testing.T) {
	ins, _ := filepath.Glob(filepath.Join(graphInputs, "*.in.yaml"))
	for _, in := range ins {
		t.Run(filepath.Base(in), func(t *testing.T) {
			t.Parallel()
			want := encodeFile(t, in, 0)
			for seed := range uint64(3) {
				got := encodeFile(t, in, seed+1)
				if len(got) != len(want) {
					t.Fatalf("seed %d: %d scopes, want %d", seed, len(got), len(want))
				}
				for i := range want {
					if got[i].Version != want[i].Version || !sameResources(got[i], want[i]) {
						t.Errorf("seed %d: scope %s changed with input order", seed, want[i].Scope)
					}
				}
			}
		})
	}
}

func sameResources(a, b *encode.Encoded) bool {
	if len(a.Resources) != len(b.Resources) {
		return false
	}
	for i := range a.Resources {
		if a.Resources[i].GetKey() != b.Resources[i].GetKey() || !proto.Equal(a.Resources[i], b.Resources[i]) {
			return false
		}
	}
	return true
}

// Tests that each key prefix carries its payload type and that keys are sorted and unique.
func TestKeysAndTypes(t *testing.T) {
	t.Parallel()
	want := map[string]proto.Message{
		encode.ListenerKeyPrefix:    &discoveryv1.Listener{},
		encode.RouteSetKeyPrefix:    &discoveryv1.RouteSet{},
		encode.ClusterKeyPrefix:     &discoveryv1.Cluster{},
		encode.CertificateKeyPrefix: &discoveryv1.Certificate{},
	}
	for _, e := range encodeFile(t, filepath.Join(graphInputs, "scopes.in.yaml"), 0) {
		prev := ""
		for _, r := range e.Resources {
			if r.GetKey() <= prev {
				t.Errorf("%s: key %q after %q", e.Scope, r.GetKey(), prev)
			}
			prev = r.GetKey()
			prefix := r.GetKey()[:strings.Index(r.GetKey(), "/")+1]
			if !r.GetPayload().MessageIs(want[prefix]) {
				t.Errorf("%s: key %q holds %s", e.Scope, r.GetKey(), r.GetPayload().GetTypeUrl())
			}
		}
	}
}

// Tests that the listeners a proxy assembles from every golden input's resources, route sets and
// all, are the listeners compiled, with their routes in the order of their sets: within a
// hostname as compiled, the hostnames by routeset.Compare.
func TestRouteSetsAssembleIntoTheListeners(t *testing.T) {
	t.Parallel()
	sets := 0
	for _, golden := range statetest.GoldenInputs(t, graphInputs) {
		in := golden.Name
		for _, s := range snapshot.Compile(graph.Build(golden.State(t), graph.Options{})) {
			e, err := encode.Snapshot(s)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range e.Resources {
				if strings.HasPrefix(r.GetKey(), encode.RouteSetKeyPrefix) {
					sets++
				}
			}
			inline, err := routeset.Inline(e.Resources)
			if err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			byKey := map[string]*discoveryv1.Resource{}
			for _, r := range inline {
				byKey[r.GetKey()] = r
			}
			for _, l := range s.Listeners {
				var got discoveryv1.Listener
				if err := byKey[encode.ListenerKeyPrefix+l.Name].GetPayload().UnmarshalTo(&got); err != nil {
					t.Fatalf("%s: listener %s: %v", in, l.Name, err)
				}
				want := encode.Listener(l)
				for _, vh := range want.GetVirtualHosts() {
					slices.SortStableFunc(vh.Routes, func(a, b *discoveryv1.Route) int { return routeset.Compare(a.GetHostname(), b.GetHostname()) })
				}
				if !proto.Equal(&got, want) {
					t.Errorf("%s: listener %s assembles to\n%v\nwant\n%v", in, l.Name, &got, want)
				}
			}
		}
	}
	if sets == 0 {
		t.Fatal("no route set was made")
	}
}
