package snapshot

import (
	"strconv"
	"strings"

	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph"
)

// compileAttachment appends one entry per (hostname, rule, match) of an attached route.
func (sb *scopeBuilder) compileAttachment(entries []entry, att *graph.Attachment, l *graph.Listener) []entry {
	key := att.Route.ID()
	created := att.Route.Source.CreationTimestamp.Time
	// The attachment's routes in one allocation: they live and go together, with the route.
	routes := make([]Route, attachmentEntries(att))
	keyHash := stringHash(key)
	var few [4]uint64 // most attachments have a hostname or two: no allocation for them
	hostHashes := few[:0]
	for _, host := range att.Hostnames {
		hostHashes = append(hostHashes, stringHash(host.Hostname))
	}
	for _, rule := range att.Route.Rules {
		action := sb.compileAction(rule, l)
		prefix := key + "/" + strconv.Itoa(rule.Index) + "/"
		for mi, m := range rule.Matches {
			match := compileMatch(m)
			name := prefix + strconv.Itoa(mi)
			rank := grpcMatchRank(att.Route, rule.Index, mi)
			for hi, host := range att.Hostnames {
				r := &routes[0]
				routes = routes[1:]
				*r = action
				r.Name = name
				r.Hostname = host.Hostname
				r.Match = match
				entries = append(entries, entry{
					route: r, origin: host.Route, created: created, routeKey: key, rule: rule.Index, match: mi, grpc: rank,
					keyHash: keyHash, hostHash: hostHashes[hi],
				})
			}
		}
	}
	return entries
}

// attachmentEntries returns the number of entries compileAttachment appends for att.
func attachmentEntries(att *graph.Attachment) int {
	n := 0
	for _, rule := range att.Route.Rules {
		n += len(rule.Matches)
	}
	return n * len(att.Hostnames)
}

// grpcMatchRank returns the precedence keys of match mi of rule ri of a GRPCRoute, nil for an
// HTTPRoute. A rule without matches has one that matches everything, with no service or method.
func grpcMatchRank(r *graph.HTTPRoute, ri, mi int) *grpcRank {
	if r.GRPC == nil {
		return nil
	}
	rank := &grpcRank{}
	if ri < len(r.GRPC.Spec.Rules) && mi < len(r.GRPC.Spec.Rules[ri].Matches) {
		if m := r.GRPC.Spec.Rules[ri].Matches[mi].Method; m != nil {
			rank.service, rank.method = len(deref(m.Service)), len(deref(m.Method))
		}
	}
	return rank
}

// compileAction compiles what a rule does: filters, weighted backends and timeouts.
func (sb *scopeBuilder) compileAction(rule *graph.Rule, l *graph.Listener) Route {
	var r Route
	redirect := false
	for _, f := range rule.Filters {
		if out, ok := sb.compileFilter(f, l); ok {
			r.Filters = append(r.Filters, out)
			redirect = redirect || out.Redirect != nil
		}
	}
	for _, b := range rule.Backends {
		if b.Weight <= 0 {
			continue
		}
		if !b.Valid {
			r.Backends = append(r.Backends, Backend{Weight: b.Weight, ErrorStatus: 500})
			continue
		}
		out := Backend{Cluster: sb.useCluster(b.Cluster), Weight: b.Weight}
		for _, f := range b.Filters {
			if cf, ok := sb.compileFilter(f, l); ok {
				out.Filters = append(out.Filters, cf)
			}
		}
		r.Backends = append(r.Backends, out)
	}
	if len(r.Backends) == 0 && !redirect {
		r.DirectStatus = 500
	}
	if t := rule.Timeouts; t.Request != nil || t.BackendRequest != nil {
		r.Timeouts = &Timeouts{Request: t.Request, BackendRequest: t.BackendRequest}
	}
	if rt := rule.Retry; rt != nil {
		r.Retry = &Retry{Codes: rt.Codes, Attempts: rt.Attempts, Backoff: rt.Backoff}
	}
	return r
}

func (sb *scopeBuilder) useCluster(k graph.ClusterKey) string {
	name := k.String()
	sb.clusters[name] = true
	sb.noteClientCertificate(name)
	return name
}

func compileMatch(m gwapiv1.HTTPRouteMatch) Match {
	out := Match{Path: PathMatch{Type: string(*m.Path.Type), Value: *m.Path.Value}}
	if m.Method != nil {
		out.Method = string(*m.Method)
	}
	seen := map[string]bool{}
	for _, h := range m.Headers {
		name := strings.ToLower(string(h.Name))
		if !seen[name] {
			seen[name] = true
			out.Headers = append(out.Headers, ValueMatch{Type: matchType(h.Type), Name: name, Value: h.Value})
		}
	}
	seen = map[string]bool{}
	for _, q := range m.QueryParams {
		name := string(q.Name)
		if !seen[name] {
			seen[name] = true
			out.QueryParams = append(out.QueryParams, ValueMatch{Type: matchType(q.Type), Name: name, Value: q.Value})
		}
	}
	return out
}

// matchType returns a header or query match type, Exact by default.
func matchType[T ~string](t *T) string {
	if t == nil {
		return MatchExact
	}
	return string(*t)
}
