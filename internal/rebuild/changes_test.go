package rebuild

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestChangedFindsCreatedChangedAndDeletedKeys(t *testing.T) {
	svc := func(name, rv string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name), ResourceVersion: rv}}
	}
	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }
	set := func(objs ...*corev1.Service) map[types.NamespacedName]*corev1.Service {
		out := map[types.NamespacedName]*corev1.Service{}
		for _, o := range objs {
			out[key(o.Name)] = o
		}
		return out
	}
	a, b, c := svc("a", "1"), svc("b", "1"), svc("c", "1")
	for _, tt := range []struct {
		name       string
		prev, next map[types.NamespacedName]*corev1.Service
		want       []string
	}{
		{name: "nothing", prev: set(a, b), next: set(a, b)},
		{name: "the same objects read again", prev: set(a, b), next: set(svc("a", "1"), svc("b", "1"))},
		{name: "created", prev: set(a), next: set(a, b), want: []string{"b"}},
		{name: "deleted", prev: set(a, b), next: set(a), want: []string{"b"}},
		{name: "changed", prev: set(a, b), next: set(a, svc("b", "2")), want: []string{"b"}},
		// As many objects as before, so only the walk over prev finds the deleted one.
		{name: "one deleted and one created", prev: set(a, b), next: set(a, c), want: []string{"b", "c"}},
		{name: "everything replaced", prev: set(a), next: set(b, c), want: []string{"a", "b", "c"}},
		{name: "all deleted", prev: set(a, b), next: set(), want: []string{"a", "b"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, k := range changed(objectsOf(tt.prev), tt.next) {
				got = append(got, k.Name)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("changed = %v, want %v", got, tt.want)
			}
		})
	}
}
