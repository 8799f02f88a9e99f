package graph_test

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/snapshot"
	"coxswain.dev/coxswain/internal/state"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// sharedState holds the class "coxswain" and, for each name, a shared Gateway in namespace
// "apps" with HTTP listeners on ports; a Gateway's age follows its position (first is oldest).
func sharedState(gateways ...sharedGateway) *state.ClusterState {
	cs := state.New()
	class := &gwapiv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "coxswain"}}
	class.Spec.ControllerName = wellknown.GatewayControllerName
	cs.GatewayClasses[state.Key(class)] = class
	for i, g := range gateways {
		gw := &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{
			Namespace: "apps", Name: g.name, CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(i) * time.Minute)),
		}}
		gw.Spec.GatewayClassName = "coxswain"
		for _, p := range g.ports {
			gw.Spec.Listeners = append(gw.Spec.Listeners, gwapiv1.Listener{
				Name: gwapiv1.SectionName(fmt.Sprintf("l%d", p)), Port: p, Protocol: gwapiv1.HTTPProtocolType,
			})
		}
		cs.Gateways[state.Key(gw)] = gw
	}
	return cs
}

type sharedGateway struct {
	name  string
	ports []int32
}

// addRecord adds the Service of Gateway apps/owner in the operator's namespace, named as the
// provisioner names it, mapping listener ports to internal ports.
func addRecord(cs *state.ClusterState, owner string, ports map[int32]int32) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{
		Namespace:   wellknown.InstallNamespace,
		Name:        wellknown.SharedGatewayServiceName("apps", owner),
		Annotations: map[string]string{graph.SharedServiceGatewayAnnotation: "apps/" + owner},
	}}
	for port, internal := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Port: port, TargetPort: intstr.FromInt32(internal)})
	}
	cs.Services[state.Key(svc)] = svc
}

func sharedPorts(g *graph.Graph) map[string]map[int32]int32 {
	out := map[string]map[int32]int32{}
	for _, gw := range g.Gateways {
		if gw.SharedPorts != nil {
			out[gw.Source.Name] = maps.Clone(gw.SharedPorts)
		}
	}
	return out
}

func TestSharedPortsIsolateGatewaysOnOnePort(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		gateways []sharedGateway
		records  map[string]map[int32]int32
		want     map[string]map[int32]int32
	}{
		{
			name:     "two Gateways on port 80 get two internal ports, the older one first",
			gateways: []sharedGateway{{"b-older", []int32{80}}, {"a-newer", []int32{80, 443}}},
			want:     map[string]map[int32]int32{"b-older": {80: 20000}, "a-newer": {80: 20001, 443: 20002}},
		},
		{
			name:     "a Gateway keeps the ports its Service records",
			gateways: []sharedGateway{{"one", []int32{80}}, {"two", []int32{80, 8080}}},
			records:  map[string]map[int32]int32{"two": {80: 20000, 8080: 20007}},
			want:     map[string]map[int32]int32{"one": {80: 20001}, "two": {80: 20000, 8080: 20007}},
		},
		{
			name:     "a port still mapped for a listener that went away is not handed out",
			gateways: []sharedGateway{{"one", []int32{80}}, {"two", []int32{80}}},
			records:  map[string]map[int32]int32{"one": {80: 20000, 8080: 20001}},
			want:     map[string]map[int32]int32{"one": {80: 20000}, "two": {80: 20002}},
		},
		{
			name:     "a port still mapped for a deleted Gateway is not handed out",
			gateways: []sharedGateway{{"new", []int32{80}}},
			records:  map[string]map[int32]int32{"deleted": {80: 20000}},
			want:     map[string]map[int32]int32{"new": {80: 20001}},
		},
		{
			name:     "two Services claiming one port leave it to the older Gateway",
			gateways: []sharedGateway{{"older", []int32{80}}, {"newer", []int32{80}}},
			records:  map[string]map[int32]int32{"older": {80: 20003}, "newer": {80: 20003}},
			want:     map[string]map[int32]int32{"older": {80: 20003}, "newer": {80: 20000}},
		},
		{
			name:     "a target port outside the range is no record",
			gateways: []sharedGateway{{"one", []int32{80}}},
			records:  map[string]map[int32]int32{"one": {80: 80}},
			want:     map[string]map[int32]int32{"one": {80: 20000}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cs := sharedState(tt.gateways...)
			for owner, ports := range tt.records {
				addRecord(cs, owner, ports)
			}
			g := graph.Build(cs, graph.Options{})
			if diff := cmp.Diff(tt.want, sharedPorts(g)); diff != "" {
				t.Errorf("internal ports (-want +got):\n%s", diff)
			}
			if again := sharedPorts(graph.Build(cs, graph.Options{})); !cmp.Equal(again, sharedPorts(g)) {
				t.Errorf("not deterministic: %v then %v", sharedPorts(g), again)
			}
			for _, gw := range g.Gateways {
				if want := wellknown.SharedGatewayServiceName("apps", gw.Source.Name); gw.SharedService != want {
					t.Errorf("Gateway %s: SharedService = %q, want %q", gw.Source.Name, gw.SharedService, want)
				}
			}
		})
	}
}

func TestSharedPortsRecordOfAnotherGatewayIsIgnored(t *testing.T) {
	t.Parallel()
	cs := sharedState(sharedGateway{"one", []int32{80}})
	addRecord(cs, "one", map[int32]int32{80: 20005})
	svc := cs.Services[state.Key(&metav1.ObjectMeta{Namespace: wellknown.InstallNamespace, Name: wellknown.SharedGatewayServiceName("apps", "one")})]
	svc.Annotations[graph.SharedServiceGatewayAnnotation] = "apps/someone-else"
	got := sharedPorts(graph.Build(cs, graph.Options{}))
	if want := (map[string]map[int32]int32{"one": {80: 20000}}); !cmp.Equal(want, got) {
		t.Errorf("internal ports = %v, want %v: a Service recording another Gateway is not this one's record (but holds its ports)", got, want)
	}
}

func TestSharedPortsOnlyForAcceptedSharedGateways(t *testing.T) {
	t.Parallel()
	cs := sharedState(sharedGateway{"shared", []int32{80}}, sharedGateway{"no-valid-listener", nil})
	cs.Gateways[state.Key(&metav1.ObjectMeta{Namespace: "apps", Name: "no-valid-listener"})].Spec.Listeners = []gwapiv1.Listener{
		{Name: "sctp", Port: 53, Protocol: "SCTP"},
	}
	dedicated := sharedState(sharedGateway{"dedicated", []int32{80}}).Gateways
	for k, gw := range dedicated {
		gw.Spec.Infrastructure = &gwapiv1.GatewayInfrastructure{ParametersRef: &gwapiv1.LocalParametersReference{
			Group: "gateway.coxswain.dev", Kind: "CoxswainGatewayParameters", Name: "params",
		}}
		cs.Gateways[k] = gw
	}
	params := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "params"}}
	cs.GatewayParameters[state.Key(params)] = params
	g := graph.Build(cs, graph.Options{})
	if want, got := (map[string]map[int32]int32{"shared": {80: 20000}}), sharedPorts(g); !cmp.Equal(want, got) {
		t.Errorf("internal ports = %v, want %v", got, want)
	}
	for _, gw := range g.Gateways {
		if gw.Source.Name != "shared" && gw.SharedService != "" {
			t.Errorf("Gateway %s got a shared Service %q", gw.Source.Name, gw.SharedService)
		}
	}
}

func TestSharedPortsExhausted(t *testing.T) {
	t.Parallel()
	cs := sharedState(sharedGateway{"late", []int32{80}})
	all := map[int32]int32{}
	for p := int32(wellknown.SharedPoolFirstPort); p <= wellknown.SharedPoolLastPort; p++ {
		all[p-wellknown.SharedPoolFirstPort+1] = p
	}
	addRecord(cs, "hoarder", all)
	got := sharedPorts(graph.Build(cs, graph.Options{}))
	if want := (map[string]map[int32]int32{"late": {}}); !cmp.Equal(want, got) {
		t.Errorf("internal ports = %v, want none left for the newcomer", got)
	}
}

// nsGateway is a shared Gateway of namespace ns named name with HTTP listeners on ports.
type nsGateway struct {
	ns, name string
	ports    []int32
}

// tenantsState holds the class "coxswain" and the shared Gateways given, aged in their order
// (first is oldest).
func tenantsState(gateways ...nsGateway) *state.ClusterState {
	cs := state.New()
	class := &gwapiv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "coxswain"}}
	class.Spec.ControllerName = wellknown.GatewayControllerName
	cs.GatewayClasses[state.Key(class)] = class
	for i, g := range gateways {
		gw := &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{
			Namespace: g.ns, Name: g.name, Generation: 1, CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(i) * time.Minute)),
		}}
		gw.Spec.GatewayClassName = "coxswain"
		for _, p := range g.ports {
			gw.Spec.Listeners = append(gw.Spec.Listeners, gwapiv1.Listener{
				Name: gwapiv1.SectionName(fmt.Sprintf("l%d", p)), Port: p, Protocol: gwapiv1.HTTPProtocolType,
			})
		}
		cs.Gateways[state.Key(gw)] = gw
	}
	return cs
}

// gatewayOf returns the Gateway ns/name of g.
func gatewayOf(t *testing.T, g *graph.Graph, ns, name string) *graph.Gateway {
	t.Helper()
	for _, gw := range g.Gateways {
		if gw.Source.Namespace == ns && gw.Source.Name == name {
			return gw
		}
	}
	t.Fatalf("no Gateway %s/%s in the graph", ns, name)
	return nil
}

// wantCondition reports a mismatch of the condition condType of conds, "" when it matches.
func wantCondition(conds []metav1.Condition, condType string, status metav1.ConditionStatus, reason string) string {
	for _, c := range conds {
		if c.Type == condType {
			if c.Status != status || c.Reason != reason {
				return fmt.Sprintf("%s = %s/%s (%s), want %s/%s", condType, c.Status, c.Reason, c.Message, status, reason)
			}
			return ""
		}
	}
	return fmt.Sprintf("no %s condition, want %s/%s", condType, status, reason)
}

// listenerNames returns the names of the listeners of the shared pool's snapshot.
func listenerNames(g *graph.Graph) []string {
	var out []string
	for _, snap := range snapshot.Compile(g) {
		if snap.Scope != snapshot.SharedPool() {
			continue
		}
		for _, l := range snap.Listeners {
			out = append(out, l.Name)
		}
	}
	return out
}

// Tests that a listener whose port gets no internal port, the range being exhausted, is not
// programmed (PortsExhausted), and neither is its Gateway when that was its only listener; the
// snapshot holds no listener of it. Before, both said Programmed while nothing served them.
func TestSharedPortsExhaustedListenerIsNotProgrammed(t *testing.T) {
	t.Parallel()
	cs := tenantsState(nsGateway{"apps", "late", []int32{80}})
	all := map[int32]int32{}
	for p := int32(wellknown.SharedPoolFirstPort); p <= wellknown.SharedPoolLastPort; p++ {
		all[p-wellknown.SharedPoolFirstPort+1] = p
	}
	addRecord(cs, "hoarder", all)
	g := graph.Build(cs, graph.Options{})
	gw := gatewayOf(t, g, "apps", "late")
	if msg := wantCondition(gw.Listeners[0].Conditions, "Programmed", metav1.ConditionFalse, conditions.ReasonPortsExhausted); msg != "" {
		t.Errorf("listener: %s", msg)
	}
	if msg := wantCondition(gw.Conditions, "Programmed", metav1.ConditionFalse, string(gwapiv1.GatewayReasonInvalid)); msg != "" {
		t.Errorf("Gateway: %s", msg)
	}
	if names := listenerNames(g); len(names) != 0 {
		t.Errorf("the shared pool serves %v, want nothing", names)
	}
}

// Tests that one namespace holds at most MaxSharedPortsPerNamespace internal ports: its
// listeners beyond the cap are not programmed (PortsExhausted), its older Gateways keep theirs,
// and a Gateway of another namespace created later still gets its ports.
func TestSharedPortsPerNamespaceCap(t *testing.T) {
	t.Parallel()
	cs := tenantsState(
		nsGateway{"hoarder", "a", []int32{80, 81}},
		nsGateway{"hoarder", "b", []int32{80, 81}},
		nsGateway{"other", "web", []int32{80}},
	)
	g := graph.Build(cs, graph.Options{MaxSharedPortsPerNamespace: 3})
	want := map[string]map[int32]int32{"a": {80: 20000, 81: 20001}, "b": {80: 20002}, "web": {80: 20003}}
	if diff := cmp.Diff(want, sharedPorts(g)); diff != "" {
		t.Errorf("internal ports (-want +got):\n%s", diff)
	}
	b := gatewayOf(t, g, "hoarder", "b")
	for _, l := range b.Listeners {
		reason, status := string(gwapiv1.ListenerReasonProgrammed), metav1.ConditionTrue
		if l.Port == 81 {
			reason, status = conditions.ReasonPortsExhausted, metav1.ConditionFalse
		}
		if msg := wantCondition(l.Conditions, "Programmed", status, reason); msg != "" {
			t.Errorf("listener %s: %s", l.Name, msg)
		}
	}
	if msg := wantCondition(b.Conditions, "Programmed", metav1.ConditionTrue, string(gwapiv1.GatewayReasonProgrammed)); msg != "" {
		t.Errorf("Gateway b, one listener still served: %s", msg)
	}
	if got, want := listenerNames(g), []string{"hoarder/a/80", "hoarder/a/81", "hoarder/b/80", "other/web/80"}; !cmp.Equal(want, got) {
		t.Errorf("the shared pool serves %v, want %v", got, want)
	}
}

// Tests that one namespace has at most MaxSharedGatewaysPerNamespace shared Gateways accepted:
// the oldest; the newer ones are Accepted=False (NamespaceLimitReached) and get no Service or
// internal port, while another namespace's Gateway is accepted.
func TestSharedGatewaysPerNamespaceCap(t *testing.T) {
	t.Parallel()
	cs := tenantsState(
		nsGateway{"tenant", "one", []int32{80}},
		nsGateway{"tenant", "two", []int32{80}},
		nsGateway{"other", "web", []int32{80}},
		nsGateway{"tenant", "three", []int32{80}},
	)
	g := graph.Build(cs, graph.Options{MaxSharedGatewaysPerNamespace: 2})
	for _, name := range []string{"one", "two"} {
		if gw := gatewayOf(t, g, "tenant", name); !gw.Accepted || gw.SharedService == "" {
			t.Errorf("Gateway tenant/%s: accepted %v, Service %q; want accepted with a Service", name, gw.Accepted, gw.SharedService)
		}
	}
	if gw := gatewayOf(t, g, "other", "web"); !gw.Accepted {
		t.Errorf("Gateway other/web is not accepted: %v", gw.Conditions)
	}
	three := gatewayOf(t, g, "tenant", "three")
	if msg := wantCondition(three.Conditions, "Accepted", metav1.ConditionFalse, conditions.ReasonNamespaceLimitReached); msg != "" {
		t.Errorf("Gateway tenant/three: %s", msg)
	}
	if three.SharedService != "" || three.SharedPorts != nil {
		t.Errorf("Gateway tenant/three over the cap got Service %q, ports %v", three.SharedService, three.SharedPorts)
	}
}
