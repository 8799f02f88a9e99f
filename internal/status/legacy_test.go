package status

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func managedEntry(manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, Subresource: "status", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
}

// Tests that the removals of what our earlier, patching self left are exactly the entries we
// no longer apply that it owns some of and no one else any of, from the last entry of a list to
// the first.
func TestPruneRemovesOnlyWhatTheLegacyManagerAloneOwns(t *testing.T) {
	t.Parallel()
	const legacy = "coxswain"
	managed := []metav1.ManagedFieldsEntry{
		managedEntry(legacy, metav1.ManagedFieldsOperationUpdate, `{"f:status":{
			"f:conditions":{"k:{\"type\":\"Accepted\"}":{".":{},"f:type":{}},"k:{\"type\":\"Retired\"}":{".":{},"f:type":{}}},
			"f:listeners":{".":{},
				"k:{\"name\":\"http\"}":{".":{},"f:conditions":{"k:{\"type\":\"Gone\"}":{".":{}},"k:{\"type\":\"Shared\"}":{".":{}}}},
				"k:{\"name\":\"old\"}":{".":{},"f:name":{}},
				"k:{\"name\":\"audited\"}":{"f:name":{}}}}}`),
		managedEntry("example.com/auditor", metav1.ManagedFieldsOperationUpdate, `{"f:status":{
			"f:conditions":{"k:{\"type\":\"example.com/Audited\"}":{".":{}}},
			"f:listeners":{"k:{\"name\":\"http\"}":{"f:conditions":{"k:{\"type\":\"Shared\"}":{"f:message":{}}}},
				"k:{\"name\":\"audited\"}":{"f:conditions":{"k:{\"type\":\"example.com/Audited\"}":{".":{}}}}}}}`),
		managedEntry(FieldManager, metav1.ManagedFieldsOperationApply, `{"f:status":{"f:conditions":{"k:{\"type\":\"Accepted\"}":{".":{}}}}}`),
	}
	c := func(t string) metav1.Condition { return metav1.Condition{Type: t} }
	src := gwapiv1.GatewayStatus{
		Conditions: []metav1.Condition{c("Accepted"), c("Retired"), c("example.com/Audited")},
		Listeners: []gwapiv1.ListenerStatus{
			{Name: "http", Conditions: []metav1.Condition{c("Accepted"), c("Gone"), c("Shared")}},
			{Name: "old", Conditions: []metav1.Condition{c("Accepted")}},
			{Name: "audited", Conditions: []metav1.Condition{c("example.com/Audited")}},
		},
	}
	ours := gwapiv1.GatewayStatus{
		Conditions: []metav1.Condition{c("Accepted")},
		Listeners:  []gwapiv1.ListenerStatus{{Name: "http", Conditions: []metav1.Condition{c("Accepted")}}},
	}
	legacySets, others, err := statusOwners(managed, legacy)
	if err != nil {
		t.Fatal(err)
	}
	have, want := toMap(t, &src), toMap(t, &ours)
	p := pruner{legacy: legacySets, others: others}
	p.walk("/status", []pathElement{{field: "status"}}, have, want)
	expect := []jsonPatchOp{
		{Op: "remove", Path: "/status/conditions/1"},             // Retired: the legacy manager's alone
		{Op: "remove", Path: "/status/listeners/1"},              // old: the legacy manager's alone
		{Op: "remove", Path: "/status/listeners/0/conditions/1"}, // Gone; Shared has another owner
	}
	if diff := cmp.Diff(expect, p.ops); diff != "" {
		t.Errorf("removals (-want +got):\n%s", diff)
	}

	if legacySets, _, _ := statusOwners(managed, "someone-else"); len(legacySets) != 0 {
		t.Errorf("a manager with no entry owns %v", legacySets)
	}
}

func toMap(t *testing.T, st *gwapiv1.GatewayStatus) map[string]any {
	t.Helper()
	obj := &gwapiv1.Gateway{Status: *st}
	m, err := statusOf(obj)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
