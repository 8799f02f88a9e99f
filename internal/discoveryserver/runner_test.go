package discoveryserver

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"coxswain.dev/coxswain/api/v1alpha1"
	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	snapcache "coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/identity/castore"
	"coxswain.dev/coxswain/internal/settings"
	"coxswain.dev/coxswain/internal/testlog"
)

const serverName = wellknown.DiscoveryServiceName + "." + wellknown.InstallNamespace + ".svc"

// Tests that External mode without its Secret serves nothing, and serves once the Secret
// appears, with no restart.
func TestFailsClosedWithoutCA(t *testing.T) {
	ns := newNamespace(t, "ds-external")
	s := testSettings(t)
	s.CAMode = v1alpha1.CAModeExternal
	c := startController(t, ns, s)

	c.waitCondition(t, v1alpha1.ConditionCAReady, metav1.ConditionFalse, "CASecretNotFound")
	c.waitCondition(t, v1alpha1.ConditionDiscoveryServing, metav1.ConditionFalse, ReasonCAUnavailable)
	bootstrapAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(s.BootstrapPort)))
	if !refused(bootstrapAddr) {
		t.Fatal("the bootstrap listener serves without a CA")
	}

	certPEM, keyPEM, err := pkitest.NewCA(t, wellknown.DefaultTrustDomain).EncodePEM()
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: wellknown.CASecretName},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM},
	}
	if _, err := clientset.CoreV1().Secrets(ns).Create(t.Context(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	addrs := c.waitListening(t, serving)
	if addrs.Bootstrap != bootstrapAddr {
		t.Errorf("bootstrap listens on %s, want %s", addrs.Bootstrap, bootstrapAddr)
	}
	c.waitCondition(t, v1alpha1.ConditionDiscoveryServing, metav1.ConditionTrue, ReasonServing)
}

// Tests that the listeners wait until the settings are final (the operator's CoxswainConfig
// read): nothing listens meanwhile, so no SVID can carry a lifetime about to change, and the
// first generation serves the settings in force when they were marked loaded.
func TestListensOnlyOnceTheSettingsAreLoaded(t *testing.T) {
	ns := newNamespace(t, "ds-pending")
	flags := testSettings(t)
	store := settings.NewPendingStore(flags)
	c := startControllerStore(t, restConfig, testlog.New(t), ns, store)
	c.waitCondition(t, v1alpha1.ConditionDiscoveryServing, metav1.ConditionFalse, ReasonSettingsPending)
	c.waitCondition(t, v1alpha1.ConditionCAReady, metav1.ConditionTrue, castore.ReasonCALoaded)
	time.Sleep(time.Second) // the CA is ready: a runner that did not wait would listen now
	if !refused(net.JoinHostPort("127.0.0.1", strconv.Itoa(int(flags.BootstrapPort)))) {
		t.Fatal("the bootstrap listener serves before the settings are loaded")
	}
	configured := flags
	configured.BootstrapPort, configured.Port = freePort(t), freePort(t)
	store.Set(configured)
	store.MarkLoaded()
	addrs := c.waitListening(t, serving)
	if !strings.HasSuffix(addrs.Bootstrap, ":"+strconv.Itoa(int(configured.BootstrapPort))) {
		t.Errorf("bootstrap listens on %s, want the loaded settings' port %d", addrs.Bootstrap, configured.BootstrapPort)
	}
	c.waitCondition(t, v1alpha1.ConditionDiscoveryServing, metav1.ConditionTrue, ReasonServing)
}

// Tests that a port change moves the listeners and that stopping the controller closes them.
func TestRestartsOnPortChangeAndStops(t *testing.T) {
	ns := newNamespace(t, "ds-ports")
	s := testSettings(t)
	c := startController(t, ns, s)
	first := c.waitListening(t, serving)

	s.BootstrapPort, s.Port = freePort(t), freePort(t)
	c.settings.Set(s)
	moved := c.waitListening(t, func(a Addrs) bool { return a.Bootstrap != "" && a.Bootstrap != first.Bootstrap })
	if !strings.HasSuffix(moved.Bootstrap, ":"+strconv.Itoa(int(s.BootstrapPort))) ||
		!strings.HasSuffix(moved.Stream, ":"+strconv.Itoa(int(s.Port))) {
		t.Fatalf("listeners on %+v, want ports %d and %d", moved, s.BootstrapPort, s.Port)
	}
	if !refused(first.Bootstrap) || !refused(first.Stream) {
		t.Fatal("the old listeners still accept connections")
	}

	c.stop()
	if !refused(moved.Bootstrap) || !refused(moved.Stream) {
		t.Fatal("the listeners outlive the controller")
	}
	c.waitCondition(t, v1alpha1.ConditionDiscoveryServing, metav1.ConditionFalse, ReasonStopped)
}

// Tests the whole channel against the real API server: a proxy bootstraps over TLS on loopback
// with a real token and the published trust bundle, gets an SVID for exactly its identity, and
// opens the mTLS stream listener with it; an identity off the allowlist is refused with a
// BootstrapRejected event.
func TestEndToEndBootstrap(t *testing.T) {
	ns := newNamespace(t, wellknown.InstallNamespace)
	for _, sa := range []string{wellknown.SharedProxyServiceAccount, "intruder"} {
		obj := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}
		if _, err := clientset.CoreV1().ServiceAccounts(ns).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c := startController(t, ns, testSettings(t))
	addrs := c.waitListening(t, serving)
	c.waitCondition(t, v1alpha1.ConditionTrustBundlePublished, metav1.ConditionTrue, "Published")
	bundlePath := writeTrustBundle(t, ns)

	svid, err := client.Bootstrap(t.Context(), client.BootstrapConfig{
		Address: addrs.Bootstrap, ServerName: serverName,
		TokenPath:  writeToken(t, ns, wellknown.SharedProxyServiceAccount),
		BundlePath: bundlePath,
		Scope:      &discoveryv1.Scope{Kind: &discoveryv1.Scope_SharedPool{SharedPool: &discoveryv1.SharedPool{}}},
	})
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	leaf := svid.Certificate.Leaf
	want := "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-shared-proxy"
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != want || len(leaf.DNSNames) != 0 {
		t.Fatalf("SVID names URIs %v DNS %v; want only %s", leaf.URIs, leaf.DNSNames, want)
	}
	requireStreamHandshake(t, addrs.Stream, svid)
	requireAnswersReported(t, c, addrs.Stream, svid)

	_, err = client.Bootstrap(t.Context(), client.BootstrapConfig{
		Address: addrs.Bootstrap, ServerName: serverName,
		TokenPath: writeToken(t, ns, "intruder"), BundlePath: bundlePath,
	})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("bootstrap of an identity off the allowlist = %v; want PermissionDenied", err)
	}
	requireRejectedEvent(t, ns, "coxswain-system/intruder")
}

// requireAnswersReported subscribes to the shared pool with svid, ACKs its snapshot, and
// requires the Runner to list the stream with that ACK and OnAnswer to have heard of it.
func requireAnswersReported(t *testing.T, c *controller, addr string, svid *client.SVID) {
	t.Helper()
	r, err := snapcache.NewResource("listener", wrapperspb.String("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.snapshots.Set(snapcache.SharedPool(), []*discoveryv1.Resource{r}); err != nil {
		t.Fatal(err)
	}
	if got := c.Runner.Proxies(snapcache.SharedPool()); len(got) != 0 {
		t.Fatalf("Proxies before any stream = %+v", got)
	}
	td := spiffeid.RequireTrustDomainFromString(wellknown.DefaultTrustDomain)
	controllerID := spiffeid.RequireFromString("spiffe://cluster.local/ns/coxswain-system/sa/" + wellknown.ControllerServiceAccount)
	cfg := tlsconfig.MTLSClient(tlsconfig.NewRotatingCertificate(svid.Certificate), tlsconfig.NewRotatingBundle(svid.Bundle), td, tlsconfig.AuthorizeID(controllerID))
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s, err := discoveryv1.NewDiscoveryClient(conn).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Subscribe{Subscribe: &discoveryv1.Subscribe{
		WireVersion: discoveryv1.WireVersion, NodeId: "proxy-0", Scope: snapcache.SharedPool().Proto(),
	}}}); err != nil {
		t.Fatal(err)
	}
	msg, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	snap := msg.GetSnapshot()
	if err := s.Send(&discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Ack{Ack: &discoveryv1.Ack{
		Version: snap.GetVersion(), Nonce: snap.GetNonce(),
	}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the Runner lists the stream's ACK", func() bool {
		got := c.Runner.Proxies(snapcache.SharedPool())
		return len(got) == 1 && got[0].NodeID == "proxy-0" && got[0].Acked == snap.GetVersion()
	})
	if n := c.answered.Load(); n < 2 { // the stream opening, its ACK
		t.Errorf("OnAnswer heard %d times, want at least 2", n)
	}
}

// writeTrustBundle writes the published ConfigMap's ca.crt where a proxy would mount it.
func writeTrustBundle(t *testing.T, ns string) string {
	t.Helper()
	cm, err := clientset.CoreV1().ConfigMaps(ns).Get(t.Context(), wellknown.TrustBundleConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "ca.crt", cm.Data[wellknown.TrustBundleKey])
}

// writeToken requests a projected-style token for the coxswain-discovery audience, bound to a
// pod of sa on a node as the kubelet's would be.
func writeToken(t *testing.T, ns, sa string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa + "-0"},
		Spec: corev1.PodSpec{
			ServiceAccountName: sa, NodeName: "node-a", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "proxy", Image: "coxswain.dev/coxswain-proxy:test"}},
		},
	}
	pod, err := clientset.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{wellknown.TokenAudience}, ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	resp, err := clientset.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, sa+".token", resp.Status.Token)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// requireStreamHandshake opens the stream listener with svid, verifying the controller's
// SPIFFE ID, and requires the server to keep the connection and speak HTTP/2, while a client
// without a certificate is dropped.
func requireStreamHandshake(t *testing.T, addr string, svid *client.SVID) {
	t.Helper()
	td := spiffeid.RequireTrustDomainFromString(wellknown.DefaultTrustDomain)
	controllerID := spiffeid.RequireFromString("spiffe://cluster.local/ns/coxswain-system/sa/" + wellknown.ControllerServiceAccount)
	cfg := tlsconfig.MTLSClient(tlsconfig.NewRotatingCertificate(svid.Certificate), tlsconfig.NewRotatingBundle(svid.Bundle), td, tlsconfig.AuthorizeID(controllerID))
	cfg.NextProtos = []string{"h2"}
	if err := readAfterHandshake(addr, cfg); err != nil && !isTimeout(err) {
		t.Fatalf("stream listener with an SVID: %v; want the connection kept open", err)
	}
	anonymous := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13} //nolint:gosec // the test only checks that the server drops it
	if err := readAfterHandshake(addr, anonymous); err == nil || isTimeout(err) {
		t.Fatalf("stream listener without a client certificate: %v; want the connection refused", err)
	}
}

func readAfterHandshake(addr string, cfg *tls.Config) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	_, err = conn.Read(make([]byte, 1))
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// requireRejectedEvent waits for a BootstrapRejected event naming principal.
func requireRejectedEvent(t *testing.T, ns, principal string) {
	t.Helper()
	eventually(t, 30*time.Second, "a BootstrapRejected event for "+principal, func() bool {
		list, err := clientset.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=" + wellknown.EventReasonBootstrapRejected})
		if err != nil {
			return false
		}
		for _, ev := range list.Items {
			if ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, principal) {
				return true
			}
		}
		return false
	})
}
