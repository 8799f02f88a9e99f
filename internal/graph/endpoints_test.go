package graph_test

import (
	"net"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"coxswain.dev/coxswain/internal/graph"
)

// Tests that a Service's traffic reaches only endpoints of a trusted origin: by default those
// of a slice the EndpointSlice controller manages for a Service with a selector, or whose
// targetRef is a Pod of the Service's namespace (CVE-2021-25740: whoever writes a slice would
// otherwise choose where a Gateway sends traffic, and which backend gets its client
// certificate). Loopback, link-local, unspecified and multicast addresses are refused always.
func TestEndpointOrigin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		cluster string
		want    []string
	}{
		{"a managed slice of a Service with a selector is trusted", "endpoint-origin", "team/managed:80", []string{"10.1.0.1:8080", "10.1.0.2:8080"}},
		{"a selector-less Service's slice with the EndpointSlice controller's label is not", "endpoint-origin", "team/forged-label:80", nil},
		{"of a hand-written slice only endpoints whose targetRef is a core Pod of the Service's namespace count", "endpoint-origin", "team/manual:80", []string{"10.2.0.1:80"}},
		{"a mirrored slice without targetRefs is not trusted", "endpoint-origin", "team/mirrored:80", nil},
		{"loopback, link-local, unspecified and multicast IPv4 addresses are refused on a managed slice", "endpoint-origin", "team/special-v4:80", []string{"10.3.0.1:80"}},
		{"IPv6 loopback, link-local, unspecified, multicast and IPv4-mapped forms of them are refused", "endpoint-origin", "team/special-v6:80", []string{"[fd00::3:1]:80"}},
		{"with the opt-out a hand-written slice counts whatever its targetRefs", "endpoint-origin-any", "team/manual:80", []string{"10.2.0.1:80", "10.2.0.2:80"}},
		{"with the opt-out special addresses are still refused", "endpoint-origin-any", "team/manual-v6:80", []string{"[fd00::2:1]:80"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := filepath.Join("testdata", tt.in+".in.yaml")
			g := graph.Build(decodeFile(t, in), caseOptions(t, in))
			c := findCluster(g, tt.cluster)
			if c == nil {
				t.Fatalf("no cluster %s in the graph", tt.cluster)
			}
			var got []string
			for _, ep := range c.Endpoints {
				got = append(got, net.JoinHostPort(ep.Address, strconv.Itoa(int(ep.Port))))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("endpoints of %s (-want +got):\n%s", tt.cluster, diff)
			}
		})
	}
}

func findCluster(g *graph.Graph, key string) *graph.Cluster {
	for _, c := range g.Clusters {
		if c.Key.String() == key {
			return c
		}
	}
	return nil
}
