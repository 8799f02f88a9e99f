package router

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/routeset"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// Tests that a set whose route sets cannot be assembled is refused with the reason, whole: a set
// of a listener the set lacks, a payload that is not a RouteSet, a key that names no set, a
// set that disagrees with its key, and a virtual host with routes of its own and in sets.
func TestUpdateRefusesRouteSetsItCannotAssemble(t *testing.T) {
	t.Parallel()
	route := snaptest.Route("ns/r/0/0", "a.example.com", snaptest.Prefix("/"), "ns/c")
	head := snaptest.HTTP("ns/g", 80, snaptest.VHost("http", ""))
	withRoutes := snaptest.HTTP("ns/g", 80, snaptest.VHost("http", "", route))
	set := &discoveryv1.RouteSet{Listener: head.GetName(), VirtualHost: "http", Hostname: "a.example.com", Routes: []*discoveryv1.Route{route}}
	key := routeset.Key(head.GetName(), "http", "a.example.com")
	cluster := snaptest.Cluster(t, "ns/c", "10.0.0.1:80")
	payload := func(m proto.Message) *anypb.Any {
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	base := snaptest.Resources(t, cluster)
	good := append(snaptest.Resources(t, head), &discoveryv1.Resource{Key: key, Payload: payload(set)})
	if _, err := Compile(snaptest.Seq(append(base, good...))); err != nil {
		t.Fatalf("the good set: %v", err)
	}
	for _, tc := range []struct {
		name      string
		resources []*discoveryv1.Resource
		want      string
	}{
		{"no listener", []*discoveryv1.Resource{{Key: key, Payload: payload(set)}}, "which the set lacks"},
		{"not a route set", append(snaptest.Resources(t, head), &discoveryv1.Resource{Key: key, Payload: payload(cluster)}), "not a route set"},
		{"key naming no set", append(snaptest.Resources(t, head), &discoveryv1.Resource{Key: "routes/ns/g/80/http", Payload: payload(set)}), "not a route set"},
		{"key of another set", append(snaptest.Resources(t, head), &discoveryv1.Resource{Key: routeset.Key(head.GetName(), "http", "b.example.com"), Payload: payload(set)}), "holds the set of"},
		{"routes of its own", append(snaptest.Resources(t, withRoutes), &discoveryv1.Resource{Key: key, Payload: payload(set)}), "routes of its own"},
	} {
		_, err := Compile(snaptest.Seq(append(base, tc.resources...)))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrInvalid with %q", tc.name, err, tc.want)
		}
	}
}
