package graph

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
)

const (
	kindConfigMap = "ConfigMap"
	// caCertificateKey is the ConfigMap key a caCertificateRef reads.
	caCertificateKey = "ca.crt"
	// maxPolicyAncestors is the most ancestors a policy status may list.
	maxPolicyAncestors = 16
)

// BackendTLSPolicy is a BackendTLSPolicy with its verdict. Ancestors are the Gateways whose
// attached routes send traffic to a Service port the policy selects, sorted; the policy's
// status has one entry per ancestor, all with the same conditions.
type BackendTLSPolicy struct {
	Source     *gwapiv1.BackendTLSPolicy
	Ancestors  []types.NamespacedName
	Conditions []metav1.Condition
	// TLS is what the policy asks of the connections to its targets.
	TLS *BackendTLS
}

// BackendTLS is how the proxy must connect to a cluster's endpoints.
type BackendTLS struct {
	// Policy names the BackendTLSPolicy, "namespace/name".
	Policy string `json:"policy"`
	// Hostname is the SNI and, without SubjectAltNames, the name the certificate must hold.
	Hostname string `json:"hostname"`
	// SubjectAltNames, when not empty, replace Hostname for authentication.
	SubjectAltNames []SubjectAltName `json:"subjectAltNames,omitempty"`
	// CACertificates is the PEM of every usable CA certificate of the policy's refs, in ref order.
	CACertificates string `json:"caCertificates,omitempty"`
	// SystemRoots verifies against the proxy's system roots instead.
	SystemRoots bool `json:"systemRoots,omitempty"`
	// FailClosed says the policy cannot be met: no request reaches the endpoints.
	FailClosed bool `json:"failClosed,omitempty"`
}

// SubjectAltName is one accepted name; exactly one field is set.
type SubjectAltName struct {
	Hostname string `json:"hostname,omitempty"`
	URI      string `json:"uri,omitempty"`
}

// policyTarget is what one targetRef selects: a Service, and one of its ports by name or (with
// an empty section) all of them.
type policyTarget struct {
	service types.NamespacedName
	section string
}

// buildBackendTLSPolicies validates every policy and decides, for each target, which policy
// wins: the oldest, then the first by namespace/name. A policy that loses a target to another is
// not accepted there (Conflicted).
func (b *builder) buildBackendTLSPolicies() []*BackendTLSPolicy {
	out := make([]*BackendTLSPolicy, 0, len(b.cs.BackendTLSPolicies))
	for _, key := range sortedKeys(b.cs.BackendTLSPolicies) {
		out = append(out, b.buildBackendTLSPolicy(b.cs.BackendTLSPolicies[key]))
	}
	slices.SortStableFunc(out, func(x, y *BackendTLSPolicy) int {
		return x.Source.CreationTimestamp.Compare(y.Source.CreationTimestamp.Time)
	})
	for _, p := range out {
		var lost []string
		for _, t := range policyTargets(p.Source) {
			if winner, taken := b.policies[t]; taken {
				lost = append(lost, fmt.Sprintf("%s is selected by the older BackendTLSPolicy %s", t, winner.TLS.Policy))
				continue
			}
			b.policies[t] = p
		}
		if len(lost) > 0 {
			p.Conditions[0] = conditions.NewPolicyConflicted(strings.Join(lost, "; "))
		}
	}
	slices.SortFunc(out, func(x, y *BackendTLSPolicy) int { return compareKeys(policyKey(x), policyKey(y)) })
	return out
}

func policyKey(p *BackendTLSPolicy) types.NamespacedName {
	return types.NamespacedName{Namespace: p.Source.Namespace, Name: p.Source.Name}
}

// String returns "Service namespace/name" or "Service namespace/name port section".
func (t policyTarget) String() string {
	if t.section == "" {
		return "Service " + t.service.String()
	}
	return fmt.Sprintf("Service %s port %s", t.service, t.section)
}

// policyTargets returns the core Services a policy selects; other kinds are not supported and
// select nothing.
func policyTargets(p *gwapiv1.BackendTLSPolicy) []policyTarget {
	var out []policyTarget
	for _, ref := range p.Spec.TargetRefs {
		if ref.Group != "" || ref.Kind != kindService {
			continue
		}
		out = append(out, policyTarget{
			service: types.NamespacedName{Namespace: p.Namespace, Name: string(ref.Name)},
			section: string(deref(ref.SectionName)),
		})
	}
	return out
}

// buildBackendTLSPolicy validates one policy and resolves its CA certificates. Conditions[0] is
// Accepted, Conditions[1] ResolvedRefs.
func (b *builder) buildBackendTLSPolicy(src *gwapiv1.BackendTLSPolicy) *BackendTLSPolicy {
	v := src.Spec.Validation
	tlsCfg := &BackendTLS{
		Policy:   src.Namespace + "/" + src.Name,
		Hostname: string(v.Hostname),
	}
	for _, san := range v.SubjectAltNames {
		switch san.Type {
		case gwapiv1.HostnameSubjectAltNameType:
			tlsCfg.SubjectAltNames = append(tlsCfg.SubjectAltNames, SubjectAltName{Hostname: string(san.Hostname)})
		case gwapiv1.URISubjectAltNameType:
			tlsCfg.SubjectAltNames = append(tlsCfg.SubjectAltNames, SubjectAltName{URI: string(san.URI)})
		}
	}
	p := &BackendTLSPolicy{Source: src, TLS: tlsCfg}
	accepted, resolved := conditions.NewPolicyAccepted(), conditions.NewPolicyResolvedRefs()
	switch {
	case v.WellKnownCACertificates != nil && len(v.CACertificateRefs) == 0:
		if *v.WellKnownCACertificates != gwapiv1.WellKnownCACertificatesSystem {
			accepted = conditions.NewPolicyInvalid(fmt.Sprintf("wellKnownCACertificates %q is not supported; only System is", *v.WellKnownCACertificates))
			tlsCfg.FailClosed = true
		}
		tlsCfg.SystemRoots = true
	default:
		var pems []string
		for _, ref := range v.CACertificateRefs {
			pem, problem := b.resolveCACertificate(src.Namespace, ref)
			if problem != nil {
				if resolved.Status == metav1.ConditionTrue {
					resolved = *problem
				}
				continue
			}
			pems = append(pems, pem)
		}
		if len(pems) == 0 {
			accepted = conditions.NewPolicyNoValidCACertificate("No caCertificateRef holds a usable CA certificate")
			tlsCfg.FailClosed = true
		}
		tlsCfg.CACertificates = strings.Join(pems, "")
	}
	if tlsCfg.FailClosed {
		tlsCfg.CACertificates, tlsCfg.SystemRoots = "", false
	}
	p.Conditions = []metav1.Condition{accepted, resolved}
	return p
}

// resolveCACertificate returns the PEM certificates of the ca.crt key of a ConfigMap in the
// policy's namespace, re-encoded so that nothing but certificates reaches a proxy.
func (b *builder) resolveCACertificate(namespace string, ref gwapiv1.LocalObjectReference) (string, *metav1.Condition) {
	key := types.NamespacedName{Namespace: namespace, Name: string(ref.Name)}
	pem, problem, msg := b.lookupCACertificate(key, string(ref.Group), string(ref.Kind))
	switch problem {
	case caInvalidKind:
		return "", ptr(conditions.NewPolicyInvalidKind(msg))
	case caInvalidRef:
		return "", ptr(conditions.NewPolicyInvalidCACertificateRef(msg))
	}
	return pem, nil
}

// caProblem says why a caCertificateRef is unusable; caUsable when it is not.
type caProblem int

const (
	caUsable caProblem = iota
	// caInvalidKind: the ref names something other than a core ConfigMap.
	caInvalidKind
	// caInvalidRef: the ConfigMap is missing or holds no usable ca.crt.
	caInvalidRef
)

// lookupCACertificate returns the PEM certificates of the ca.crt key of the ConfigMap key,
// re-encoded so that nothing but certificates reaches a proxy; or why it cannot. Whether the
// reference is permitted is the caller's to check.
func (b *builder) lookupCACertificate(key types.NamespacedName, group, kind string) (string, caProblem, string) {
	if group != "" || kind != kindConfigMap {
		return "", caInvalidKind, fmt.Sprintf("CA certificate ref %s is a %s, not a core ConfigMap", key, groupKind(group, kind))
	}
	cm, ok := b.cs.ConfigMaps[key]
	if !ok {
		return "", caInvalidRef, fmt.Sprintf("ConfigMap %s not found", key)
	}
	data, ok := cm.Data[caCertificateKey]
	if !ok {
		return "", caInvalidRef, fmt.Sprintf("ConfigMap %s has no key %s", key, caCertificateKey)
	}
	out, err := certificatesPEM([]byte(data))
	if err != nil {
		return "", caInvalidRef, fmt.Sprintf("ConfigMap %s key %s: %v", key, caCertificateKey, err)
	}
	return out, caUsable, ""
}

// certificatesPEM parses every PEM block of data as a certificate and returns them re-encoded.
// Any other block, or none, is an error.
func certificatesPEM(data []byte) (string, error) {
	var out strings.Builder
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return "", fmt.Errorf("holds a %s block, not only certificates", block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return "", fmt.Errorf("invalid certificate: %w", err)
		}
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes}) // a Builder never fails
	}
	if out.Len() == 0 {
		return "", fmt.Errorf("holds no PEM certificate")
	}
	return out.String(), nil
}

// backendTLS returns the policy that applies to a Service port: one selecting the port by name
// wins over one selecting the whole Service.
func (b *builder) backendTLS(key ClusterKey, port *corev1.ServicePort) *BackendTLSPolicy {
	if len(b.policies) == 0 {
		return nil
	}
	svc := types.NamespacedName{Namespace: key.Namespace, Name: key.Name}
	if port.Name != "" {
		if p, ok := b.policies[policyTarget{service: svc, section: port.Name}]; ok {
			return p
		}
	}
	return b.policies[policyTarget{service: svc}]
}

// recordAncestors makes every Gateway whose attached routes use a Service port an ancestor of
// every policy that selects that port, winning or not, so a conflicted policy reports too.
func recordAncestors(gateways []*Gateway, policies []*BackendTLSPolicy, services map[types.NamespacedName]*corev1.Service) {
	if len(policies) == 0 {
		return
	}
	bySvc := map[types.NamespacedName][]*BackendTLSPolicy{}
	for _, p := range policies {
		for _, t := range policyTargets(p.Source) {
			bySvc[t.service] = append(bySvc[t.service], p)
		}
	}
	seen := map[*BackendTLSPolicy]map[types.NamespacedName]bool{}
	for _, gw := range gateways {
		for _, key := range gatewayClusters(gw) {
			svc := types.NamespacedName{Namespace: key.Namespace, Name: key.Name}
			sp := servicePort(services[svc], key.Port)
			for _, p := range bySvc[svc] {
				if selectsPort(p.Source, svc.Name, sp.Name) {
					if seen[p] == nil {
						seen[p] = map[types.NamespacedName]bool{}
					}
					seen[p][gw.Key()] = true
				}
			}
		}
	}
	for p, gws := range seen {
		for k := range gws {
			p.Ancestors = append(p.Ancestors, k)
		}
		slices.SortFunc(p.Ancestors, compareKeys)
		if len(p.Ancestors) > maxPolicyAncestors {
			p.Ancestors = p.Ancestors[:maxPolicyAncestors]
		}
	}
}

func selectsPort(p *gwapiv1.BackendTLSPolicy, service, portName string) bool {
	for _, t := range policyTargets(p) {
		if t.service.Name == service && (t.section == "" || t.section == portName) {
			return true
		}
	}
	return false
}

// gatewayClusters returns the Service ports the attached routes of a Gateway send traffic or
// mirrors to, sorted and deduplicated.
func gatewayClusters(gw *Gateway) []ClusterKey {
	var out []ClusterKey
	for _, l := range gw.AllListeners() {
		for _, att := range l.Routes {
			for _, rule := range att.Route.Rules {
				for _, be := range rule.Backends {
					if be.Valid {
						out = append(out, be.Cluster)
					}
				}
				for _, f := range rule.Filters {
					if f.Mirror != nil && f.Mirror.Valid {
						out = append(out, f.Mirror.Cluster)
					}
				}
			}
		}
	}
	slices.SortFunc(out, ClusterKey.Compare)
	return slices.Compact(out)
}

// status is the policy's status: one ancestor entry per Gateway.
func (p *BackendTLSPolicy) status(controllerName gwapiv1.GatewayController) BackendTLSPolicyStatus {
	st := BackendTLSPolicyStatus{Namespace: p.Source.Namespace, Name: p.Source.Name}
	for _, gw := range p.Ancestors {
		st.Ancestors = append(st.Ancestors, gwapiv1.PolicyAncestorStatus{
			AncestorRef: gwapiv1.ParentReference{
				Group:     ptr(gwapiv1.Group(gwapiv1.GroupName)),
				Kind:      ptr(gwapiv1.Kind(kindGateway)),
				Namespace: ptr(gwapiv1.Namespace(gw.Namespace)),
				Name:      gwapiv1.ObjectName(gw.Name),
			},
			ControllerName: controllerName,
			Conditions:     conditions.Stamp(slices.Clone(p.Conditions), p.Source.Generation),
		})
	}
	return st
}
