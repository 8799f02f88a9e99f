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
	c := &compiler{scopes: map[Scope]*scopeBuilder{}}
	c.scope(SharedPool())
	for _, gw := range g.Gateways {
		if gw.Accepted {
			c.compileGateway(gw)
		}
	}
	return c.finish(g.Clusters)
}

type compiler struct {
	scopes map[Scope]*scopeBuilder
}

// scopeBuilder gathers a scope's listeners and what they reference.
type scopeBuilder struct {
	snap     *Snapshot
	secrets  map[string]*corev1.Secret
	clusters map[string]bool
	// clientCerts records, per cluster, the backend client certificate of every Gateway whose
	// routes use it ("" for a Gateway without one); gateway is the one being compiled.
	clientCerts map[string]map[string]*corev1.Secret
	gateway     *graph.Gateway
}

func (c *compiler) scope(s Scope) *scopeBuilder {
	sb, ok := c.scopes[s]
	if !ok {
		sb = &scopeBuilder{
			snap:        &Snapshot{Scope: s},
			secrets:     map[string]*corev1.Secret{},
			clusters:    map[string]bool{},
			clientCerts: map[string]map[string]*corev1.Secret{},
		}
		c.scopes[s] = sb
	}
	return sb
}

// ScopeOf returns the scope that serves a Gateway.
func ScopeOf(gw *graph.Gateway) Scope {
	if !gw.Dedicated {
		return SharedPool()
	}
	return Scope{Kind: ScopeGateway, Namespace: gw.Source.Namespace, Name: gw.Source.Name, ProxyName: gw.ProxyName}
}

func (c *compiler) compileGateway(gw *graph.Gateway) {
	sb := c.scope(ScopeOf(gw))
	sb.gateway = gw
	defer func() { sb.gateway = nil }()
	byPort := map[int32][]*graph.Listener{}
	for _, l := range gw.Listeners {
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
		Protocol: string(ls[0].Protocol),
	}
	for _, l := range ls {
		out.VirtualHosts = append(out.VirtualHosts, sb.compileVirtualHost(l))
	}
	slices.SortFunc(out.VirtualHosts, func(a, b *VirtualHost) int {
		return cmp.Or(graph.CompareHostnameSpecificity(a.Hostname, b.Hostname), cmp.Compare(a.Name, b.Name))
	})
	return out
}

func (sb *scopeBuilder) compileVirtualHost(l *graph.Listener) *VirtualHost {
	vh := &VirtualHost{Name: l.Name, Hostname: l.Hostname}
	for _, s := range l.Certificates {
		name := s.Namespace + "/" + s.Name
		vh.Certificates = append(vh.Certificates, name)
		sb.secrets[name] = s
	}
	var entries []entry
	for _, att := range l.Routes {
		entries = sb.compileAttachment(entries, att, l)
	}
	slices.SortFunc(entries, comparePrecedence)
	vh.Routes = make([]*Route, len(entries))
	for i := range entries {
		vh.Routes[i] = entries[i].route
	}
	return vh
}

// finish sorts the scopes and fills each with the secrets and clusters it references.
func (c *compiler) finish(clusters []*graph.Cluster) []*Snapshot {
	out := make([]*Snapshot, 0, len(c.scopes))
	for _, sb := range c.scopes {
		sb.fillSecrets()
		sb.fillClusters(clusters)
		out = append(out, sb.snap)
	}
	slices.SortFunc(out, func(a, b *Snapshot) int { return cmp.Compare(a.Scope.String(), b.Scope.String()) })
	return out
}

// fillSecrets copies the key material of the listeners this scope serves, and no other.
func (sb *scopeBuilder) fillSecrets() {
	for name, s := range sb.secrets {
		sb.snap.Secrets = append(sb.snap.Secrets, &Secret{
			Name:             name,
			CertificateChain: string(s.Data[corev1.TLSCertKey]),
			PrivateKey:       SecretBytes(slices.Clone(s.Data[corev1.TLSPrivateKeyKey])),
		})
	}
	slices.SortFunc(sb.snap.Secrets, func(a, b *Secret) int { return cmp.Compare(a.Name, b.Name) })
}

func (sb *scopeBuilder) fillClusters(all []*graph.Cluster) {
	for _, gc := range all {
		name := gc.Key.String()
		if !sb.clusters[name] {
			continue
		}
		cl := &Cluster{Name: name, Protocol: upstreamProtocol(gc.AppProtocol, gc.TLS != nil), TLS: gc.TLS}
		if gc.TLS != nil && !gc.TLS.FailClosed {
			cl.ClientCertificate = sb.clientCertificate(name)
		}
		for _, ep := range gc.Endpoints {
			cl.Endpoints = append(cl.Endpoints, Endpoint{Address: ep.Address, Port: ep.Port})
		}
		sb.snap.Clusters = append(sb.snap.Clusters, cl)
	}
}

// noteClientCertificate records that the Gateway being compiled uses a cluster.
func (sb *scopeBuilder) noteClientCertificate(cluster string) {
	if sb.gateway == nil {
		return
	}
	certs := sb.clientCerts[cluster]
	if certs == nil {
		certs = map[string]*corev1.Secret{}
		sb.clientCerts[cluster] = certs
	}
	if s := sb.gateway.BackendClientCertificate; s != nil {
		certs[s.Namespace+"/"+s.Name] = s
	} else {
		certs[""] = nil
	}
}

// clientCertificate returns the key pair to present to a cluster's endpoints: only when every
// Gateway of the scope that uses the cluster names the same one. A shared pool Gateway never
// presents another Gateway's certificate, so Gateways that disagree present none.
func (sb *scopeBuilder) clientCertificate(cluster string) *Secret {
	certs := sb.clientCerts[cluster]
	if len(certs) != 1 {
		return nil
	}
	for name, s := range certs {
		if s == nil {
			return nil
		}
		return &Secret{
			Name:             name,
			CertificateChain: string(s.Data[corev1.TLSCertKey]),
			PrivateKey:       SecretBytes(slices.Clone(s.Data[corev1.TLSPrivateKeyKey])),
		}
	}
	return nil
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
// (kubernetes.io/h2c or h2) is negotiated over TLS with ALPN.
func upstreamProtocol(appProtocol string, withTLS bool) UpstreamProtocol {
	switch {
	case withTLS && (appProtocol == appProtocolH2C || appProtocol == appProtocolH2):
		return UpstreamH2
	case !withTLS && appProtocol == appProtocolH2C:
		return UpstreamH2C
	}
	return UpstreamHTTP1
}

func listenerScheme(p gwapiv1.ProtocolType) string {
	if p == gwapiv1.HTTPSProtocolType {
		return "https"
	}
	return "http"
}
