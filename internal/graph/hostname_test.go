package graph

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHostnameMatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		pattern, host string
		want          bool
	}{
		{"an empty pattern matches any host", "", "a.example.com", true},
		{"an empty pattern matches the empty host", "", "", true},
		{"an exact pattern matches itself", "a.example.com", "a.example.com", true},
		{"an exact pattern does not match another host", "a.example.com", "b.example.com", false},
		{"an exact pattern does not match any host", "a.example.com", "", false},
		{"a wildcard matches one more label", "*.example.com", "a.example.com", true},
		{"a wildcard matches several more labels", "*.example.com", "a.b.example.com", true},
		{"a wildcard does not match its bare suffix", "*.example.com", "example.com", false},
		{"a wildcard does not match a longer label ending like it", "*.example.com", "aexample.com", false},
		{"a wildcard matches a narrower wildcard", "*.example.com", "*.a.example.com", true},
		{"a wildcard does not match a wider wildcard", "*.a.example.com", "*.example.com", false},
		{"a wildcard matches itself", "*.example.com", "*.example.com", true},
		{"an exact pattern does not match a wildcard", "a.example.com", "*.example.com", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := HostnameMatches(tt.pattern, tt.host); got != tt.want {
				t.Errorf("HostnameMatches(%q, %q) = %v, want %v", tt.pattern, tt.host, got, tt.want)
			}
		})
	}
}

func TestIntersectHostnames(t *testing.T) {
	t.Parallel()
	type ah = AttachedHostname
	tests := []struct {
		name     string
		listener string
		route    []string
		want     []AttachedHostname
	}{
		{"a route without hostnames takes the listener's", "*.example.com", nil, []ah{{Hostname: "*.example.com"}}},
		{"neither side has hostnames", "", nil, []ah{{Hostname: ""}}},
		{"a listener without hostname takes the route's", "", []string{"b.example.com", "a.example.com"}, []ah{{"a.example.com", "a.example.com"}, {"b.example.com", "b.example.com"}}},
		{"an exact route hostname inside a wildcard listener", "*.example.com", []string{"a.example.com"}, []ah{{"a.example.com", "a.example.com"}}},
		{"a wildcard route hostname narrows to an exact listener", "a.example.com", []string{"*.example.com"}, []ah{{"a.example.com", "*.example.com"}}},
		{"the narrower of two wildcards wins", "*.example.com", []string{"*.a.example.com"}, []ah{{"*.a.example.com", "*.a.example.com"}}},
		{"the narrower of two wildcards wins the other way", "*.a.example.com", []string{"*.example.com"}, []ah{{"*.a.example.com", "*.example.com"}}},
		{"disjoint hostnames are dropped", "*.example.com", []string{"example.com", "a.example.org", "b.example.com"}, []ah{{"b.example.com", "b.example.com"}}},
		{"no intersection gives nothing", "a.example.com", []string{"b.example.com"}, nil},
		{"duplicates collapse to the exact route hostname", "a.example.com", []string{"*.example.com", "a.example.com"}, []ah{{"a.example.com", "a.example.com"}}},
		{"duplicates collapse to the exact route hostname whatever the order", "a.example.com", []string{"a.example.com", "*.com", "*.example.com"}, []ah{{"a.example.com", "a.example.com"}}},
		{"duplicates collapse to the narrowest wildcard", "*.a.example.com", []string{"*.com", "*.example.com", "*.a.example.com"}, []ah{{"*.a.example.com", "*.a.example.com"}}},
		{"wider wildcards collapse to the narrower of them", "a.example.com", []string{"*.com", "*.example.com"}, []ah{{"a.example.com", "*.example.com"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := IntersectHostnames(tt.listener, tt.route)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("IntersectHostnames(%q, %q) (-want +got):\n%s", tt.listener, tt.route, diff)
			}
		})
	}
}

func TestCompareHostnameSpecificity(t *testing.T) {
	t.Parallel()
	in := []string{"", "*.example.com", "b.example.com", "*.a.example.com", "a.example.com", "*.com", "x.a.example.com"}
	want := []string{"x.a.example.com", "a.example.com", "b.example.com", "*.a.example.com", "*.example.com", "*.com", ""}
	got := slices.Clone(in)
	slices.SortFunc(got, CompareHostnameSpecificity)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("most specific first (-want +got):\n%s", diff)
	}
}
