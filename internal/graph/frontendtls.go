package graph

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
)

// FrontendValidation is how an HTTPS listener validates client certificates: the
// spec.tls.frontend configuration of its Gateway for its port. It holds public material only,
// and yet goldens and logs show a digest of the certificates, not the certificates.
type FrontendValidation struct {
	// CACertificateRefs name the usable ConfigMaps, "namespace/name", in ref order.
	CACertificateRefs []string `json:"caCertificateRefs"`
	// CACertificates is the PEM of the certificates of those ConfigMaps: the roots a client's
	// chain must verify against.
	CACertificates CABundle `json:"caCertificates"`
	// InsecureFallback (mode AllowInsecureFallback) lets a client without a valid certificate
	// through; otherwise the handshake fails without one.
	InsecureFallback bool `json:"insecureFallback,omitempty"`
}

// CABundle is PEM CA certificates. It prints and serialises for humans as its SHA-256 digest.
type CABundle string

// Digest returns "sha256:<hex>" of the bundle.
func (c CABundle) Digest() string {
	sum := sha256.Sum256([]byte(c))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// String returns the digest.
func (c CABundle) String() string { return c.Digest() }

// MarshalJSON writes the digest.
func (c CABundle) MarshalJSON() ([]byte, error) { return json.Marshal(c.Digest()) }

// frontendValidation returns the client certificate validation spec.tls.frontend asks of the
// HTTPS listeners on port, and where it comes from: the perPort entry of the port, which
// replaces the default (even when it sets no validation), else the default. nil means none.
func frontendValidation(spec gwapiv1.GatewaySpec, port int32) (*gwapiv1.FrontendTLSValidation, string) {
	if spec.TLS == nil || spec.TLS.Frontend == nil {
		return nil, ""
	}
	for _, pp := range spec.TLS.Frontend.PerPort {
		if int32(pp.Port) == port {
			return pp.TLS.Validation, fmt.Sprintf("spec.tls.frontend.perPort[port=%d]", port)
		}
	}
	return spec.TLS.Frontend.Default.Validation, "spec.tls.frontend.default"
}

// resolveFrontendValidation resolves the caCertificateRefs that apply to an HTTPS listener. A
// ref that cannot be used sets ResolvedRefs false with its reason; when none can, the listener
// is not accepted (NoValidCACertificate): it must not serve clients it cannot validate.
func (b *builder) resolveFrontendValidation(gw *Gateway, l *Listener) {
	v, from := frontendValidation(gw.Source.Spec, l.Port)
	if v == nil {
		return
	}
	out := &FrontendValidation{InsecureFallback: v.Mode == gwapiv1.AllowInsecureFallback}
	var pems []string
	var problem *metav1.Condition
	for _, ref := range v.CACertificateRefs {
		key, pem, p := b.resolveFrontendCA(gw.Source.Namespace, ref)
		if p != nil {
			if problem == nil {
				problem = p
			}
			continue
		}
		pems = append(pems, pem)
		out.CACertificateRefs = append(out.CACertificateRefs, key.String())
	}
	if problem != nil && refsResolved(l) {
		problem.Message = from + ": " + problem.Message
		l.Conditions = conditions.Upsert(l.Conditions, *problem)
	}
	if len(pems) == 0 {
		l.reject(conditions.NewListenerNoValidCACertificate(fmt.Sprintf("No caCertificateRef of %s holds a usable CA certificate", from)))
		return
	}
	out.CACertificates = CABundle(strings.Join(pems, ""))
	l.ClientValidation = out
}

// refsResolved reports whether the listener's ResolvedRefs is still true, so that the first
// problem found (a certificateRef, say) is the one reported.
func refsResolved(l *Listener) bool {
	c := conditions.Find(l.Conditions, string(gwapiv1.ListenerConditionResolvedRefs))
	return c == nil || c.Status == metav1.ConditionTrue
}

// resolveFrontendCA resolves one frontend caCertificateRef of a Gateway in namespace gwNamespace.
func (b *builder) resolveFrontendCA(gwNamespace string, ref gwapiv1.ObjectReference) (types.NamespacedName, string, *metav1.Condition) {
	key := types.NamespacedName{Namespace: gwNamespace, Name: string(ref.Name)}
	if ref.Namespace != nil && *ref.Namespace != "" {
		key.Namespace = string(*ref.Namespace)
	}
	group, kind := string(ref.Group), string(ref.Kind)
	if group != "" || kind != kindConfigMap {
		msg := fmt.Sprintf("CA certificate ref %s is a %s, not a core ConfigMap", key, groupKind(group, kind))
		return key, "", ptr(conditions.NewListenerInvalidCACertificateKind(msg))
	}
	from := reference{group: gwapiv1.GroupName, kind: kindGateway, namespace: gwNamespace}
	if !b.grants.allows(from, reference{kind: kindConfigMap, namespace: key.Namespace, name: key.Name}) {
		msg := fmt.Sprintf("ConfigMap %s is in another namespace and no ReferenceGrant allows it", key)
		return key, "", ptr(conditions.NewListenerRefNotPermitted(msg))
	}
	pem, p, msg := b.lookupCACertificate(key, group, kind)
	if p != caUsable {
		return key, "", ptr(conditions.NewListenerInvalidCACertificateRef(msg))
	}
	return key, pem, nil
}

// insecureFrontendValidation returns the InsecureFrontendValidationMode condition when
// spec.tls.frontend sets mode AllowInsecureFallback anywhere, else nil.
func insecureFrontendValidation(spec gwapiv1.GatewaySpec) *metav1.Condition {
	if spec.TLS == nil || spec.TLS.Frontend == nil {
		return nil
	}
	var where []string
	if v := spec.TLS.Frontend.Default.Validation; v != nil && v.Mode == gwapiv1.AllowInsecureFallback {
		where = append(where, "the default")
	}
	for _, pp := range spec.TLS.Frontend.PerPort {
		if v := pp.TLS.Validation; v != nil && v.Mode == gwapiv1.AllowInsecureFallback {
			where = append(where, fmt.Sprintf("port %d", pp.Port))
		}
	}
	if len(where) == 0 {
		return nil
	}
	return ptr(conditions.NewGatewayInsecureFrontendValidationMode(
		"Client certificate validation is AllowInsecureFallback for " + strings.Join(where, ", ") +
			": clients without a valid certificate are let through"))
}
