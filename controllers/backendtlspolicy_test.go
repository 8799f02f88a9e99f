package controllers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// policyCondition checks one condition of our ancestor entry for gateway on a stored policy.
func (h *gatewayAPI) policyCondition(ns, name, gateway, condType string, status metav1.ConditionStatus, reason string) func() error {
	return func() error {
		var p gwapiv1.BackendTLSPolicy
		h.get(&p, ns, name)
		for _, a := range p.Status.Ancestors {
			if a.ControllerName == wellknown.GatewayControllerName && string(a.AncestorRef.Name) == gateway {
				return wantCondition(a.Conditions, condType, status, reason)
			}
		}
		return fmt.Errorf("no ancestor entry of ours for %s in %+v", gateway, p.Status.Ancestors)
	}
}

// cluster returns the Cluster resource of a scope's snapshot, or nil.
func (h *gatewayAPI) cluster(scope cache.Scope, key string) *discoveryv1.Cluster {
	h.t.Helper()
	snap := h.cache.Get(scope)
	if snap == nil {
		return nil
	}
	for _, r := range snap.Resources() {
		if r.GetKey() == key {
			cl := &discoveryv1.Cluster{}
			if err := r.GetPayload().UnmarshalTo(cl); err != nil {
				h.t.Fatal(err)
			}
			return cl
		}
	}
	return nil
}

func caPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "backend-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// Tests, against the real API server, that a BackendTLSPolicy whose CA ConfigMap is missing
// reports NoValidCACertificate and InvalidCACertificateRef on the Gateway that uses its Service
// and fails the cluster closed while the route stays resolved; and that creating the ConfigMap
// (a watched, referenced object) accepts the policy and ships the CA to the shared pool.
func TestBackendTLSPolicyFollowsItsCAConfigMap(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, "")
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.newBackend(ns, "secure", "10.1.2.3")
	h.create(newGateway(ns, "web", class))
	h.create(newHTTPRoute(ns, "secure", []gwapiv1.ParentReference{parentRef(ns, "web")}, ns, "secure"))
	h.create(&gwapiv1.BackendTLSPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secure"},
		Spec: gwapiv1.BackendTLSPolicySpec{
			TargetRefs: []gwapiv1.LocalPolicyTargetReferenceWithSectionName{{
				LocalPolicyTargetReference: gwapiv1.LocalPolicyTargetReference{Kind: "Service", Name: "secure"},
			}},
			Validation: gwapiv1.BackendTLSPolicyValidation{
				CACertificateRefs: []gwapiv1.LocalObjectReference{{Kind: "ConfigMap", Name: "backend-ca"}},
				Hostname:          "secure.example.com",
			},
		},
	})
	accepted, resolved := string(gwapiv1.PolicyConditionAccepted), string(gwapiv1.BackendTLSPolicyConditionResolvedRefs)
	eventually(t, "the policy reports its missing CA", func() error {
		return errors.Join(
			h.policyCondition(ns, "secure", "web", accepted, metav1.ConditionFalse, string(gwapiv1.BackendTLSPolicyReasonNoValidCACertificate))(),
			h.policyCondition(ns, "secure", "web", resolved, metav1.ConditionFalse, string(gwapiv1.BackendTLSPolicyReasonInvalidCACertificateRef))(),
		)
	})
	eventually(t, "the route stays resolved", h.routeCondition(ns, "secure", "web", string(gwapiv1.RouteConditionResolvedRefs), metav1.ConditionTrue, ""))
	key := "cluster/" + ns + "/secure:80"
	eventually(t, "the cluster fails closed", func() error {
		if cl := h.cluster(cache.SharedPool(), key); !cl.GetTls().GetFailClosed() {
			return fmt.Errorf("cluster %v", cl)
		}
		return nil
	})

	ca := caPEM(t)
	h.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "backend-ca"}, Data: map[string]string{"ca.crt": ca}})
	eventually(t, "the policy is accepted", func() error {
		return errors.Join(
			h.policyCondition(ns, "secure", "web", accepted, metav1.ConditionTrue, string(gwapiv1.PolicyReasonAccepted))(),
			h.policyCondition(ns, "secure", "web", resolved, metav1.ConditionTrue, string(gwapiv1.BackendTLSPolicyReasonResolvedRefs))(),
		)
	})
	eventually(t, "the cluster carries the CA", func() error {
		cl := h.cluster(cache.SharedPool(), key)
		if tls := cl.GetTls(); tls.GetFailClosed() || string(tls.GetCaCertificatesPem()) != ca || tls.GetServerName() != "secure.example.com" {
			return fmt.Errorf("cluster %v", cl)
		}
		return nil
	})
	var p gwapiv1.BackendTLSPolicy
	h.get(&p, ns, "secure")
	if err := h.c.Delete(context.Background(), &p); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deleting the policy makes the cluster plaintext again", func() error {
		if cl := h.cluster(cache.SharedPool(), key); cl == nil || cl.GetTls() != nil {
			return fmt.Errorf("cluster %v", cl)
		}
		return nil
	})
}
