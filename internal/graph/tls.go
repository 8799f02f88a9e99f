package graph

import (
	"crypto/tls"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
)

// resolveTLS checks the TLS settings of an HTTPS listener, or of a TLS listener in Terminate
// mode, and resolves its certificateRefs on behalf of from, the object that holds the listener
// (its Gateway or ListenerSet): refs default to its namespace and cross-namespace refs need a
// ReferenceGrant from its kind. Any unusable reference leaves the listener accepted but not
// programmed.
func (b *builder) resolveTLS(l *Listener, from reference) {
	cfg := l.source.TLS
	if cfg == nil || (cfg.Mode != nil && *cfg.Mode != gwapiv1.TLSModeTerminate) {
		l.reject(conditions.NewListenerUnsupportedValue(fmt.Sprintf("%s listeners need tls with mode Terminate", l.Protocol)))
		return
	}
	if len(cfg.CertificateRefs) == 0 {
		l.unresolved(conditions.NewListenerInvalidCertificateRef(fmt.Sprintf("%s listeners in Terminate mode need at least one certificateRef", l.Protocol)))
		return
	}
	for _, ref := range cfg.CertificateRefs {
		secret, problem := b.resolveCertificate(from, ref)
		if problem != nil {
			l.unresolved(*problem)
			l.Certificates = nil
			return
		}
		l.Certificates = append(l.Certificates, secret)
	}
}

func (b *builder) resolveCertificate(from reference, ref gwapiv1.SecretObjectReference) (*corev1.Secret, *metav1.Condition) {
	secret, msg, permitted := b.lookupKeyPair(from, ref)
	switch {
	case !permitted:
		return nil, ptr(conditions.NewListenerRefNotPermitted(msg))
	case msg != "":
		return nil, ptr(conditions.NewListenerInvalidCertificateRef(msg))
	}
	return secret, nil
}

// resolveBackendClientCertificate resolves spec.tls.backend.clientCertificateRef: the key pair
// the Gateway's proxies present to TLS backends. A Gateway with the field gets a ResolvedRefs
// condition; an unusable ref leaves the Gateway accepted, presenting no certificate.
func (b *builder) resolveBackendClientCertificate(gw *Gateway) {
	tlsCfg := gw.Source.Spec.TLS
	if tlsCfg == nil || tlsCfg.Backend == nil || tlsCfg.Backend.ClientCertificateRef == nil {
		return
	}
	secret, msg, permitted := b.lookupKeyPair(gatewayReference(gw), *tlsCfg.Backend.ClientCertificateRef)
	switch {
	case !permitted:
		gw.resolvedRefs = ptr(conditions.NewGatewayRefNotPermitted("clientCertificateRef: " + msg))
	case msg != "":
		gw.resolvedRefs = ptr(conditions.NewGatewayInvalidClientCertificateRef("clientCertificateRef: " + msg))
	default:
		gw.resolvedRefs = ptr(conditions.NewGatewayResolvedRefs())
		gw.BackendClientCertificate = secret
	}
}

// gatewayReference is a Gateway as the origin of references (ReferenceGrant from).
func gatewayReference(gw *Gateway) reference {
	return reference{group: gwapiv1.GroupName, kind: kindGateway, namespace: gw.Source.Namespace}
}

// lookupKeyPair resolves a Secret reference held by from (a Gateway or ListenerSet) to a valid
// kubernetes.io/tls Secret. On failure it returns why, and permitted is false when a
// ReferenceGrant is missing.
func (b *builder) lookupKeyPair(from reference, ref gwapiv1.SecretObjectReference) (secret *corev1.Secret, msg string, permitted bool) {
	group, kind := "", kindSecret
	if ref.Group != nil {
		group = string(*ref.Group)
	}
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	key := types.NamespacedName{Namespace: from.namespace, Name: string(ref.Name)}
	if ref.Namespace != nil {
		key.Namespace = string(*ref.Namespace)
	}
	if group != "" || kind != kindSecret {
		return nil, fmt.Sprintf("Certificate ref %s is a %s, not a core Secret", key, groupKind(group, kind)), true
	}
	to := reference{kind: kindSecret, namespace: key.Namespace, name: key.Name}
	if !b.grants.allows(from, to) {
		return nil, fmt.Sprintf("Secret %s is in another namespace and no ReferenceGrant allows it", key), false
	}
	secret, ok := b.cs.Secrets[key]
	if !ok {
		return nil, fmt.Sprintf("Secret %s not found", key), true
	}
	if msg := b.checkKeyPair(key, secret); msg != "" {
		return nil, msg, true
	}
	return secret, "", true
}

// checkKeyPair validates a TLS Secret once per build and remembers the verdict.
func (b *builder) checkKeyPair(key types.NamespacedName, s *corev1.Secret) string {
	if msg, seen := b.keyPairs[key]; seen {
		return msg
	}
	msg := ""
	if s.Type != corev1.SecretTypeTLS {
		msg = fmt.Sprintf("Secret %s has type %q, not %s", key, s.Type, corev1.SecretTypeTLS)
	} else if _, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]); err != nil {
		msg = fmt.Sprintf("Secret %s does not hold a valid certificate and key: %v", key, err)
	}
	b.keyPairs[key] = msg
	return msg
}

func groupKind(group, kind string) string {
	if group == "" {
		return kind
	}
	return kind + "." + group
}
