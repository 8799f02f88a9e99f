package snapshot

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph"
)

// Compile turns the graph into one Snapshot per scope, sorted by scope: one per accepted
// dedicated Gateway, and the shared pool, which is always present (possibly empty) so shared
// proxies always have a snapshot to serve.
func Compile(g *graph.Graph) []*Snapshot {
	plans := Plan(g)
	out := make([]*Snapshot, 0, len(plans))
	for _, p := range plans {
		out = append(out, CompileScope(p, g.Clusters, nil))
	}
	return out
}

// ScopePlan is one scope with the accepted Gateways it serves, in the graph's order.
type ScopePlan struct {
	Scope    Scope
	Gateways []*graph.Gateway
}

// Plan groups the accepted Gateways of g by scope, sorted by scope. The shared pool is always
// there.
func Plan(g *graph.Graph) []ScopePlan {
	index := map[Scope]int{SharedPool(): 0}
	plans := []ScopePlan{{Scope: SharedPool()}}
	for _, gw := range g.Gateways {
		if !gw.Accepted {
			continue
		}
		s := ScopeOf(gw)
		i, ok := index[s]
		if !ok {
			i = len(plans)
			index[s] = i
			plans = append(plans, ScopePlan{Scope: s})
		}
		plans[i].Gateways = append(plans[i].Gateways, gw)
	}
	slices.SortFunc(plans, func(a, b ScopePlan) int { return cmp.Compare(a.Scope.String(), b.Scope.String()) })
	return plans
}

// CompileScope compiles one scope of Plan. With a memo (of this scope only: it holds the
// scope's key material), it reuses the virtual hosts, listeners, clusters and secrets that the
// previous compile with that memo produced and that did not change, so that their pointers stay
// the same, and recompiles only the routes marked with RouteChanged; the result equals a compile
// without a memo.
func CompileScope(p ScopePlan, clusters []*graph.Cluster, memo *Memo) *Snapshot {
	sb := newScopeBuilder(p.Scope)
	sb.memo = memo
	for _, gc := range clusters {
		if gc.TLS != nil && !gc.TLS.FailClosed {
			sb.clientCertClusters = append(sb.clientCertClusters, gc.Name())
		}
	}
	for _, gw := range p.Gateways {
		sb.compileGateway(gw)
	}
	sb.fillSecrets()
	memo.settle()
	sb.fillClusters(clusters)
	memo.finish(sb)
	return sb.snap
}

// scopeBuilder gathers a scope's listeners and what they reference.
type scopeBuilder struct {
	snap     *Snapshot
	secrets  map[string]*corev1.Secret
	clusters map[string]bool
	// clientCerts records, per cluster, the backend client certificate of the Gateways whose
	// routes use it; gateway is the one being compiled.
	clientCerts map[string]clientCertNote
	gateway     *graph.Gateway
	// clientCertClusters are the clusters that may present a client certificate (backend TLS
	// that does not fail closed): the only ones whose notes are read.
	clientCertClusters []string
	// memo, when set, holds the previous compile of this scope.
	memo *Memo
}

func newScopeBuilder(s Scope) *scopeBuilder {
	return &scopeBuilder{
		snap:        &Snapshot{Scope: s},
		secrets:     map[string]*corev1.Secret{},
		clusters:    map[string]bool{},
		clientCerts: map[string]clientCertNote{},
	}
}

// ScopeOf returns the scope that serves a Gateway.
func ScopeOf(gw *graph.Gateway) Scope {
	if !gw.Dedicated {
		return SharedPool()
	}
	return Scope{Kind: ScopeGateway, Namespace: gw.Source.Namespace, Name: gw.Source.Name, ProxyName: gw.ProxyName}
}

func (sb *scopeBuilder) compileGateway(gw *graph.Gateway) {
	sb.gateway = gw
	defer func() { sb.gateway = nil }()
	byPort := map[int32][]*graph.Listener{}
	for _, l := range gw.AllListeners() {
		if l.Programmed() {
			byPort[l.Port] = append(byPort[l.Port], l)
		}
	}
	for _, port := range sortedPorts(byPort) {
		bind := port
		if !gw.Dedicated {
			internal, ok := gw.SharedPorts[port]
			if !ok {
				continue // the shared pool's internal ports are exhausted
			}
			bind = internal
		}
		sb.snap.Listeners = append(sb.snap.Listeners, sb.compileListener(gw, port, bind, byPort[port]))
	}
}

func sortedPorts(m map[int32][]*graph.Listener) []int32 {
	ports := make([]int32, 0, len(m))
	for p := range m {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	return ports
}

// compileListener compiles the listeners of gw on port into one Listener that the proxy binds on
// bind: port itself for a dedicated proxy, the Gateway's internal port on the shared pool. The
// name keeps the listener port.
func (sb *scopeBuilder) compileListener(gw *graph.Gateway, port, bind int32, ls []*graph.Listener) *Listener {
	key := gw.Key()
	out := &Listener{
		Name:     fmt.Sprintf("%s/%s/%d", key.Namespace, key.Name, port),
		Gateway:  key.String(),
		Port:     bind,
		Protocol: listenerProtocol(ls),
		// The HTTPS listeners of a Gateway port share spec.tls.frontend's validation for it.
		ClientValidation: ls[0].ClientValidation,
	}
	for _, l := range ls {
		out.VirtualHosts = append(out.VirtualHosts, sb.compileVirtualHost(l))
	}
	slices.SortFunc(out.VirtualHosts, func(a, b *VirtualHost) int {
		return cmp.Or(graph.CompareHostnameSpecificity(a.Hostname, b.Hostname), cmp.Compare(a.Name, b.Name))
	})
	return sb.memo.listener(out)
}

func (sb *scopeBuilder) compileVirtualHost(l *graph.Listener) *VirtualHost {
	vh := &VirtualHost{Name: l.QualifiedName(), Hostname: l.Hostname}
	for _, s := range l.Certificates {
		name := s.Namespace + "/" + s.Name
		vh.Certificates = append(vh.Certificates, name)
		sb.secrets[name] = s
	}
	if sb.memo != nil {
		return sb.memo.virtualHost(sb, vh, l)
	}
	var entries []entry
	for _, att := range l.Routes {
		entries = sb.compileAttachment(entries, att, l)
	}
	slices.SortFunc(entries, comparePrecedence)
	vh.Routes = routesOf(entries)
	vh.hosts = groupHosts(vh.Routes)
	return vh
}

func routesOf(entries []entry) []*Route {
	out := make([]*Route, len(entries))
	for i := range entries {
		out[i] = entries[i].route
	}
	return out
}

// fillSecrets copies the key material of the listeners this scope serves, and no other.
func (sb *scopeBuilder) fillSecrets() {
	for name, s := range sb.secrets {
		sb.snap.Secrets = append(sb.snap.Secrets, sb.memo.secret(&Secret{
			Name:             name,
			CertificateChain: string(s.Data[corev1.TLSCertKey]),
			PrivateKey:       SecretBytes(slices.Clone(s.Data[corev1.TLSPrivateKeyKey])),
		}))
	}
	slices.SortFunc(sb.snap.Secrets, func(a, b *Secret) int { return cmp.Compare(a.Name, b.Name) })
}

func (sb *scopeBuilder) fillClusters(all []*graph.Cluster) {
	for _, gc := range all {
		name := gc.Name()
		if !sb.clusters[name] && !sb.memo.uses(name) {
			continue
		}
		if cl := sb.memo.compiledCluster(gc); cl != nil {
			sb.snap.Clusters = append(sb.snap.Clusters, cl)
			continue
		}
		cl := &Cluster{Name: name, Protocol: upstreamProtocol(gc.AppProtocol, gc.GRPC, gc.TLS != nil), TLS: gc.TLS}
		if gc.TLS != nil && !gc.TLS.FailClosed {
			cl.ClientCertificate = sb.clientCertificate(name)
		}
		for _, ep := range gc.Endpoints {
			cl.Endpoints = append(cl.Endpoints, Endpoint{Address: ep.Address, Port: ep.Port})
		}
		sb.snap.Clusters = append(sb.snap.Clusters, sb.memo.cluster(gc, cl))
	}
}

// clientCertNote is what the Gateways that use a cluster say about its client certificate: the
// Secret the first of them names (nil for none), and whether another names a different one or
// none.
type clientCertNote struct {
	name     string
	secret   *corev1.Secret
	disagree bool
}

// noteClientCertificates records that the Gateway being compiled uses the clusters counted in
// uses, for the clusters whose note is read.
func (sb *scopeBuilder) noteClientCertificates(uses map[string]int) {
	for _, c := range sb.clientCertClusters {
		if uses[c] > 0 {
			sb.noteClientCertificate(c)
		}
	}
}

// noteClientCertificate records that the Gateway being compiled uses a cluster.
func (sb *scopeBuilder) noteClientCertificate(cluster string) {
	if sb.gateway == nil {
		return
	}
	var name string
	s := sb.gateway.BackendClientCertificate
	if s != nil {
		name = s.Namespace + "/" + s.Name
	}
	note, ok := sb.clientCerts[cluster]
	switch {
	case !ok:
		sb.clientCerts[cluster] = clientCertNote{name: name, secret: s}
	case !note.disagree && note.name != name:
		note.disagree = true
		sb.clientCerts[cluster] = note
	}
}

// clientCertificate returns the key pair to present to a cluster's endpoints: only when every
// Gateway of the scope that uses the cluster names the same one. A shared pool Gateway never
// presents another Gateway's certificate, so Gateways that disagree present none.
func (sb *scopeBuilder) clientCertificate(cluster string) *Secret {
	note := sb.clientCerts[cluster]
	if note.disagree || note.secret == nil {
		return nil
	}
	return &Secret{
		Name:             note.name,
		CertificateChain: string(note.secret.Data[corev1.TLSCertKey]),
		PrivateKey:       SecretBytes(slices.Clone(note.secret.Data[corev1.TLSPrivateKeyKey])),
	}
}

// appProtocolH2C is the Kubernetes standard appProtocol of HTTP/2 over cleartext with prior
// knowledge (KEP-3726), which Gateway API backend protocol selection (GEP-1911) honours.
// appProtocolH2 is the IANA name of HTTP/2 over TLS.
const (
	appProtocolH2C = "kubernetes.io/h2c"
	appProtocolH2  = "h2"
)

// upstreamProtocol maps a Service port's appProtocol to what the proxy speaks to its endpoints.
// WebSocket (kubernetes.io/ws, kubernetes.io/wss) starts as HTTP/1.1; any other value, known or
// not, is not an error and gets HTTP/1.1 too. A port with backend TLS is never cleartext: HTTP/2
// (kubernetes.io/h2c or h2) is negotiated over TLS with ALPN. A port a GRPCRoute uses speaks
// HTTP/2 whatever its appProtocol: gRPC is HTTP/2 only.
func upstreamProtocol(appProtocol string, grpc, withTLS bool) UpstreamProtocol {
	switch {
	case grpc && withTLS:
		return UpstreamH2
	case grpc:
		return UpstreamH2C
	case withTLS && (appProtocol == appProtocolH2C || appProtocol == appProtocolH2):
		return UpstreamH2
	case !withTLS && appProtocol == appProtocolH2C:
		return UpstreamH2C
	}
	return UpstreamHTTP1
}

// The protocols of a Listener of TLS listeners (the graph lets one port hold TLS listeners
// only, or none).
const (
	// ProtocolTLSPassthrough is a port whose TLS listeners are all in Passthrough mode: what
	// every proxy that serves TLS listeners understands.
	ProtocolTLSPassthrough = "TLSPassthrough"
	// ProtocolTLS is a port with a TLS listener in Terminate mode, beside any in Passthrough
	// mode: its virtual hosts with certificates terminate.
	ProtocolTLS = "TLS"
)

// listenerProtocol is the protocol of a Listener of ls, listeners on one port.
func listenerProtocol(ls []*graph.Listener) string {
	if ls[0].Protocol != gwapiv1.TLSProtocolType {
		return string(ls[0].Protocol)
	}
	if slices.ContainsFunc(ls, (*graph.Listener).Terminates) {
		return ProtocolTLS
	}
	return ProtocolTLSPassthrough
}

func listenerScheme(p gwapiv1.ProtocolType) string {
	if p == gwapiv1.HTTPSProtocolType {
		return "https"
	}
	return "http"
}
