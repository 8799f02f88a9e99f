package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	dnsNamespace = "agent-dns"
	// clusterDNS is the bridge address, where the agent runs CoreDNS.
	clusterDNS = "10.244.0.1:53"
)

// Tests that a pod resolves Service names through the cluster DNS the agent runs: a ClusterIP
// Service by its short, namespaced, .svc and full names (through the search path of the
// /etc/resolv.conf the agent wrote), a headless Service to its ready pod's address (A and
// SRV), an unknown name as NXDOMAIN; and that a name outside the cluster domain is refused.
func TestPodsResolveServicesThroughClusterDNS(t *testing.T) {
	ctx := t.Context()
	c := getCluster(t)
	ensureNamespace(ctx, t, c, dnsNamespace)
	pod := barePod("resolver", corev1.RestartPolicyAlways)
	pod.Namespace = dnsNamespace
	createPod(t, c, pod)
	port := []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}
	svc, err := c.client.CoreV1().Services(dnsNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "resolver"}, Ports: port},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.CoreV1().Services(dnsNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "headless"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "resolver"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ip := waitPodReady(t, c, dnsNamespace, "resolver", 0)

	want := "search agent-dns.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.244.0.1\noptions ndots:5\n"
	if got := get(t, ip, "/file?path=/etc/resolv.conf"); got != want {
		t.Errorf("the pod's /etc/resolv.conf:\n%s\nwant:\n%s", got, want)
	}
	clusterIP := svc.Spec.ClusterIP
	for _, name := range []string{"web", "web.agent-dns", "web.agent-dns.svc", "web.agent-dns.svc.cluster.local", "web.agent-dns.svc.cluster.local."} {
		if got := resolve(t, ip, name, ""); got != clusterIP {
			t.Errorf("the pod resolves %s to %q, want the ClusterIP %s", name, got, clusterIP)
		}
	}
	if got := resolve(t, ip, "kubernetes.default", ""); got != "10.96.0.1" {
		t.Errorf("the pod resolves kubernetes.default to %q, want 10.96.0.1", got)
	}
	t.Logf("the pod resolves web, web.agent-dns, web.agent-dns.svc and the full name to %s", clusterIP)
	// The headless Service's EndpointSlice follows the pod's readiness.
	pollResolve(t, ip, "headless", "", ip)
	srv := strings.ReplaceAll(ip, ".", "-") + ".headless.agent-dns.svc.cluster.local.:8080"
	pollResolve(t, ip, "_http._tcp.headless.agent-dns.svc.cluster.local", "SRV", srv)
	t.Logf("the headless Service resolves to the pod's address %s, with its SRV record", ip)
	if got := resolve(t, ip, "missing.agent-dns.svc.cluster.local", ""); got != "NXDOMAIN" {
		t.Errorf("an unknown Service name resolves to %q, want NXDOMAIN", got)
	}
	// An unknown short name gets NXDOMAIN under each search domain, then REFUSED as an absolute
	// name outside the cluster domain: Go reports the last answer.
	if got, err := tryResolve(ctx, ip, "missing", ""); err == nil {
		t.Errorf("an unknown short name resolves to %q", got)
	}

	for _, network := range []string{"udp", "tcp"} {
		if rcode, answers := query(ctx, t, network, "web.agent-dns.svc.cluster.local."); rcode != dnsmessage.RCodeSuccess || len(answers) != 1 || answers[0] != clusterIP {
			t.Errorf("%s query for the Service: %v %v, want success with %s", network, rcode, answers, clusterIP)
		}
	}
	if rcode, _ := query(ctx, t, "udp", "example.com."); rcode != dnsmessage.RCodeRefused {
		t.Errorf("a name outside the cluster domain gets %v, want REFUSED (there is no upstream)", rcode)
	}
	if rcode, _ := query(ctx, t, "udp", "nothing.agent-dns.svc.cluster.local."); rcode != dnsmessage.RCodeNameError {
		t.Errorf("an unknown name of the cluster domain gets %v, want NXDOMAIN", rcode)
	}
	deletePodsIn(ctx, t, c, dnsNamespace, "resolver")
}

// resolve asks the test server in the pod at ip to look name up (typ "" for A, or "SRV"); it
// returns the answers, one a line, or NXDOMAIN.
func resolve(t *testing.T, ip, name, typ string) string {
	t.Helper()
	got, err := tryResolve(t.Context(), ip, name, typ)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func tryResolve(ctx context.Context, ip, name, typ string) (string, error) {
	u := "http://" + net.JoinHostPort(ip, "8080") + "/resolve?name=" + url.QueryEscape(name) + "&type=" + typ
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, http.NoBody)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return "", fmt.Errorf("resolve %s in the pod: %w", name, err)
	}
	defer resp.Body.Close()
	var body [4096]byte
	n, _ := resp.Body.Read(body[:])
	text := string(body[:n])
	switch resp.StatusCode {
	case http.StatusOK:
		return text, nil
	case http.StatusNotFound:
		return "NXDOMAIN", nil
	}
	return "", fmt.Errorf("resolve %s in the pod: %d %s", name, resp.StatusCode, text)
}

// pollResolve waits until name resolves to want in the pod; an empty want accepts any answer.
func pollResolve(t *testing.T, ip, name, typ, want string) {
	t.Helper()
	poll(t, "the pod resolving "+name, 30*time.Second, func() (bool, error) {
		got, err := tryResolve(t.Context(), ip, name, typ)
		if err != nil {
			return false, err
		}
		if want == "" {
			return got != "NXDOMAIN" && got != "", fmt.Errorf("answer %q", got)
		}
		return got == want, fmt.Errorf("answer %q", got)
	})
}

// query sends one A query to the cluster DNS over network and returns the response code and
// the addresses answered.
func query(ctx context.Context, t *testing.T, network, name string) (dnsmessage.RCode, []string) {
	t.Helper()
	msg := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 7, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
	}
	packed, err := msg.Pack()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, clusterDNS)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if network == "tcp" {
		packed = append([]byte{byte(len(packed) >> 8), byte(len(packed))}, packed...)
	}
	if _, err := conn.Write(packed); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if network == "tcp" {
		buf, n = buf[2:], n-2
	}
	var resp dnsmessage.Message
	if err := resp.Unpack(buf[:n]); err != nil {
		t.Fatalf("unpack the %s answer for %s: %v", network, name, err)
	}
	var addrs []string
	for _, a := range resp.Answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok {
			addrs = append(addrs, net.IP(r.A[:]).String())
		}
	}
	if resp.ID != 7 {
		t.Fatal(errors.New("the answer has another ID"))
	}
	return resp.RCode, addrs
}
