package agent

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

func testResource(t *testing.T, key, value string) *discoveryv1.Resource {
	t.Helper()
	r, err := cache.NewResource(key, wrapperspb.String(value))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// versionOfResources is the controller's version of a complete set.
func versionOfResources(t *testing.T, rs ...*discoveryv1.Resource) string {
	t.Helper()
	s, err := cache.NewSnapshot(rs, testEpoch)
	if err != nil {
		t.Fatal(err)
	}
	return s.Version()
}

func TestBuildRefusesMalformedSnapshots(t *testing.T) {
	t.Parallel()
	a, b := testResource(t, "a", "1"), testResource(t, "b", "2")
	v1 := versionOfResources(t, a)
	tests := []struct {
		name     string
		applied  []*discoveryv1.Resource
		snap     *discoveryv1.Snapshot
		wantText string
	}{
		{
			"a snapshot without a version is refused", nil,
			&discoveryv1.Snapshot{Full: true, Resources: []*discoveryv1.Resource{a}}, "no version",
		},
		{
			"a full snapshot that removes keys is refused", nil,
			&discoveryv1.Snapshot{Version: v1, Full: true, Resources: []*discoveryv1.Resource{a}, RemovedKeys: []string{"b"}}, "removes keys",
		},
		{
			"a delta before any full snapshot is refused", nil,
			&discoveryv1.Snapshot{Version: v1, Resources: []*discoveryv1.Resource{a}}, "before any full snapshot",
		},
		{
			"a full snapshot with a duplicate key is refused", nil,
			&discoveryv1.Snapshot{Version: v1, Full: true, Resources: []*discoveryv1.Resource{a, a}}, "appears twice",
		},
		{
			"a full snapshot whose contents do not hash to its version is refused", nil,
			&discoveryv1.Snapshot{Version: v1, Full: true, Resources: []*discoveryv1.Resource{a, b}}, "hash to version",
		},
		{
			"a delta merged over another base is refused",
			[]*discoveryv1.Resource{b},
			&discoveryv1.Snapshot{Version: versionOfResources(t, a, b), Resources: []*discoveryv1.Resource{testResource(t, "b", "other")}}, "hash to version",
		},
		{
			"a delta removing a key that is not held is refused",
			[]*discoveryv1.Resource{a},
			&discoveryv1.Snapshot{Version: v1, RemovedKeys: []string{"z"}}, "not held",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ag := &Agent{}
			if tt.applied != nil {
				set, err := resource.NewSet(versionOfResources(t, tt.applied...), tt.applied)
				if err != nil {
					t.Fatal(err)
				}
				ag.applied = set
			}
			if _, _, err := ag.build(tt.snap); err == nil || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("build: %v, want an error saying %q", err, tt.wantText)
			}
		})
	}
}

var testEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
