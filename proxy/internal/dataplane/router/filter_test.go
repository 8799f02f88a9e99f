package router_test

import (
	"errors"
	"testing"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// Tests that a header filter may not set or add a field that frames the message or describes
// the connection, on a rule or a backend, for requests or responses; removing one is allowed,
// and so is setting an ordinary field.
func TestCompileRefusesReservedHeaderFilters(t *testing.T) {
	t.Parallel()
	reserved := []string{"Host", "content-length", "Transfer-Encoding", "Connection", "Upgrade", "Keep-Alive", "TE", "Trailer", "Proxy-Authorization", "proxy-connection"}
	modifiers := map[string]func(name string) *discoveryv1.HeaderModifier{
		"set": func(name string) *discoveryv1.HeaderModifier {
			return &discoveryv1.HeaderModifier{Set: []*discoveryv1.Header{{Name: name, Value: "1"}}}
		},
		"add": func(name string) *discoveryv1.HeaderModifier {
			return &discoveryv1.HeaderModifier{Add: []*discoveryv1.Header{{Name: name, Value: "1"}}}
		},
	}
	places := map[string]func(r *discoveryv1.Route, m *discoveryv1.HeaderModifier){
		"rule request": func(r *discoveryv1.Route, m *discoveryv1.HeaderModifier) {
			r.Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_RequestHeaders{RequestHeaders: m}}}
		},
		"rule response": func(r *discoveryv1.Route, m *discoveryv1.HeaderModifier) {
			r.Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_ResponseHeaders{ResponseHeaders: m}}}
		},
		"backend request": func(r *discoveryv1.Route, m *discoveryv1.HeaderModifier) {
			r.Backends[0].Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_RequestHeaders{RequestHeaders: m}}}
		},
	}
	for _, name := range reserved {
		for op, mod := range modifiers {
			for place, put := range places {
				l := routeWith(func(r *discoveryv1.Route) { put(r, mod(name)) })
				if _, err := router.Compile(snaptest.Seq(snaptest.Resources(t, l))); !errors.Is(err, router.ErrInvalid) {
					t.Errorf("%s %s on a %s filter: got %v, want ErrInvalid", op, name, place, err)
				}
			}
		}
	}
	for _, m := range []*discoveryv1.HeaderModifier{
		{Remove: reserved},
		{Set: []*discoveryv1.Header{{Name: "X-Proxy", Value: "1"}, {Name: "Hostname", Value: "a"}}},
	} {
		l := routeWith(func(r *discoveryv1.Route) { places["rule request"](r, m) })
		if _, err := router.Compile(snaptest.Seq(snaptest.Resources(t, l))); err != nil {
			t.Errorf("%v: %v", m, err)
		}
	}
}

// Tests that route path values are compared in the router's form of paths: an escaped
// unreserved character in a value matches it unescaped in a request, and an escape of another
// character matches it in either case.
func TestPathValuesMatchInTheRouterForm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		match *discoveryv1.RouteMatch
		path  string
	}{
		{snaptest.Prefix("/%7Euser"), "/~user/x"},
		{snaptest.Exact("/caf%c3%a9"), "/caf%C3%A9"},
		{snaptest.Prefix("/a b"), "/a%20b"},
	} {
		l := routeWith(func(r *discoveryv1.Route) { r.Match = tc.match })
		table := compile(t, l)
		p, _ := table.Port(80)
		if got := p.VirtualHosts()[0].Match("", "GET", tc.path, request{}); got == nil {
			t.Errorf("%s %q does not match %s", tc.match.GetPath().GetType(), tc.match.GetPath().GetValue(), tc.path)
		}
	}
}
