package snaptest

import (
	"fmt"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// PathsPerHost is how many routes ScaleRoutes gives each hostname.
const PathsPerHost = 10

// ScaleRoutes returns n routes to cluster in precedence order, spread over hostnames
// "svc-<i>.example.com" with PathsPerHost path prefixes "/api/v<j>" each, the shape of many
// HTTPRoutes on one Gateway listener.
func ScaleRoutes(n int, cluster string) []*discoveryv1.Route {
	out := make([]*discoveryv1.Route, 0, n)
	for i := range n {
		host, path := ScaleTarget(i)
		out = append(out, Route(fmt.Sprintf("bench/route-%d/0/0", i), host, Prefix(path), cluster))
	}
	return out
}

// ScaleTarget returns the hostname and path that route i of ScaleRoutes matches.
func ScaleTarget(i int) (host, path string) {
	return fmt.Sprintf("svc-%d.example.com", i/PathsPerHost), fmt.Sprintf("/api/v%d", i%PathsPerHost)
}
