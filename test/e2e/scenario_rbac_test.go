package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/testenv"
)

// rbacCASecret is the CA Secret of the operator that runs with its own permissions: a new
// name, so that it has to create it.
const rbacCASecret = "coxswain-discovery-ca-rbac"

// operatorRunsWithItsRBAC restarts the operator as its own ServiceAccount with nothing but
// the permissions of config/rbac, and a CA Secret it has yet to create, and checks that it
// still does its work: the Secret, the trust bundle, Ready, a proxy bootstrapping (TokenReview),
// a BootstrapRejected event, and the echo route served from the Services and EndpointSlices it
// reads.
func (s *suite) operatorRunsWithItsRBAC(t *testing.T) {
	ctx := t.Context()
	root, err := testenv.ProjectRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cluster.ApplyManifests(ctx, filepath.Join(root, "config", "rbac", "*.yaml")); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(s.dir, "controller.kubeconfig")
	if err := s.cluster.WriteServiceAccountKubeconfig(ctx, wellknown.InstallNamespace, wellknown.ControllerServiceAccount, kubeconfig); err != nil {
		t.Fatal(err)
	}
	if err := s.shared.Stop(5 * time.Second); err != nil {
		t.Errorf("stop the shared proxy: %v", err)
	}
	if err := s.operator.Stop(10 * time.Second); err != nil {
		t.Errorf("stop the operator: %v", err)
	}
	s.operator = s.startOperatorWith(t, OperatorOptions{Kubeconfig: kubeconfig, SVIDTTL: wellknown.DefaultSVIDTTL, CASecret: rbacCASecret})

	var bundle []byte
	err = Poll(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		if err := s.operator.Ended(); err != nil {
			return err
		}
		if lines := grepLines(s.operator.Log(), "forbidden"); lines != "" {
			return fmt.Errorf("%w: the operator was refused permissions:\n%s", ErrGiveUp, lines)
		}
		var secret corev1.Secret
		if err := s.cluster.Client.Get(ctx, types.NamespacedName{Namespace: wellknown.InstallNamespace, Name: rbacCASecret}, &secret); err != nil {
			return err
		}
		certs := parseCertificates(secret.Data[corev1.TLSCertKey])
		if len(certs) == 0 {
			return fmt.Errorf("CA Secret %s holds no certificate", rbacCASecret)
		}
		b, err := s.cluster.TrustBundle(ctx, wellknown.InstallNamespace)
		if err != nil {
			return err
		}
		if !bundleHolds(b, certs[0]) {
			return fmt.Errorf("trust bundle does not hold the root of %s yet", rbacCASecret)
		}
		bundle = b
		return nil
	})
	if err != nil {
		t.Fatalf("operator running as %s never created its CA and published it: %v", wellknown.ControllerServiceAccount, err)
	}
	bundlePath := s.writeFile(t, "trust-bundle-rbac.pem", bundle)

	p := s.startProxy(t, ProxyOptions{
		NodeID: "shared-rbac", TokenPath: s.shared.opts.TokenPath, TrustBundlePath: bundlePath, HealthPort: rbacHealthPort,
	})
	defer stopQuietly(p)
	if err := p.waitState(ctx, 30*time.Second, "Ready"); err != nil {
		t.Fatalf("shared proxy never became Ready: %v", err)
	}
	c := NewClient(loopback(s.gatewayPort), false)
	defer c.CloseIdle()
	if err := Poll(ctx, 20*time.Second, 20*time.Millisecond, func(ctx context.Context) error {
		resp, err := c.Get(ctx, echoHost, echoPath)
		if err != nil {
			return err
		}
		return checkEcho(serviceName, "routed")(resp)
	}); err != nil {
		t.Fatalf("echo route not served: %v", err)
	}

	intruder := s.startProxy(t, ProxyOptions{
		NodeID: "intruder-rbac", TokenPath: s.tokenFile(ctx, t, "intruder-rbac"), TrustBundlePath: bundlePath, HealthPort: intruderHealthPort,
	})
	defer stopQuietly(intruder)
	if err := Poll(ctx, 20*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		return s.bootstrapRejected(ctx, wellknown.InstallNamespace+"/intruder-rbac")
	}); err != nil {
		t.Errorf("no BootstrapRejected event: %v", err)
	}
	if lines := grepLines(s.operator.Log(), "forbidden"); lines != "" {
		t.Errorf("the operator was refused permissions:\n%s", lines)
	}
}

// grepLines returns the lines of log that contain s.
func grepLines(log, s string) string {
	var out []string
	for line := range strings.Lines(log) {
		if strings.Contains(line, s) {
			out = append(out, strings.TrimRight(line, "\n"))
		}
	}
	return strings.Join(out, "\n")
}
