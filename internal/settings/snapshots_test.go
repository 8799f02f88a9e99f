package settings

import (
	"errors"
	"testing"

	"k8s.io/utils/ptr"

	"coxswain.dev/coxswain/api/v1alpha1"
	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// Tests that a namespace's share of a scope's snapshot comes from the CoxswainConfig, 8 MiB
// when unset, and that a share outside 64 KiB to what a snapshot's routes may take is refused.
func TestResolveRouteBytesPerNamespace(t *testing.T) {
	t.Parallel()
	if d := Defaults(); d.MaxRouteBytesPerNamespace != wellknown.DefaultMaxRouteBytesPerNamespace || d.Effective().MaxRouteBytesPerNamespace != 8<<20 {
		t.Errorf("default share %d", d.MaxRouteBytesPerNamespace)
	}
	got, err := Resolve(Defaults(), &v1alpha1.CoxswainConfigSpec{Snapshots: &v1alpha1.SnapshotsSpec{MaxRouteBytesPerNamespace: ptr.To[int64](1 << 20)}})
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxRouteBytesPerNamespace != 1<<20 || got.Effective().MaxRouteBytesPerNamespace != 1<<20 {
		t.Errorf("resolved share %d, effective %d", got.MaxRouteBytesPerNamespace, got.Effective().MaxRouteBytesPerNamespace)
	}
	for _, n := range []int64{0, wellknown.MinRouteBytesPerNamespace - 1, discoveryv1.MaxScopeRouteBytes + 1} {
		_, err := Resolve(Defaults(), &v1alpha1.CoxswainConfigSpec{Snapshots: &v1alpha1.SnapshotsSpec{MaxRouteBytesPerNamespace: ptr.To(n)}})
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("maxRouteBytesPerNamespace %d: err = %v, want ErrInvalid", n, err)
		}
	}
}
